// engine/embeddings.h — sentence embeddings: the final-normed hidden states of a token
// sequence, pooled (mean over the positions, or the last position) and L2-normalised
// (unless asked not to) — what llama.cpp's embeddings give for the same model and pooling.
// The forward runs on the engine thread between two steps (Engine::run_exclusive), in
// chunks of 512 tokens, in a state row of its own (the target's cache layout), so
// decoding requests keep stepping between inputs and never see it.
// Does not: tokenize (the caller does; BOS as it wants), truncate, or cache prompts.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/engine.h"
#include "specula/status.h"

namespace specula {

enum class Pooling { kMean, kLast };

// The embedding [n_embd] of `ids` (non-empty, each in the vocabulary, at most the engine's
// n_ctx). Errors: kInvalidArgument for bad ids, kUnavailable when the engine is stopping,
// kInternal for a failed forward or state allocation.
// normalize false: the pooled vector as it is (llama-cpp-python's embed(normalize=False)).
Result<std::vector<float>> embed(Engine& engine, std::span<const int32_t> ids, Pooling pooling, bool normalize = true);

}  // namespace specula
