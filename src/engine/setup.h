// engine/setup.h — the parts of an engine that a front door builds from what it was told
// (the CLI's flags today, the library's parameters later): the draft source for
// speculative decoding, and the prompt cache with the fingerprint its entries are keyed
// by (the model files' identity and the cache layouts).
// Does not: parse flags, resolve model names to paths (the front door does), or start
// the engine (Engine::create).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "decoding/draft.h"
#include "decoding/eagle3.h"
#include "decoding/mtp.h"
#include "model/model.h"
#include "state/layout.h"
#include "state/prompt_cache.h"
#include "specula/status.h"

namespace specula {

// The draft source `spec` names: "ngram" (prompt lookup), "draft" (the model at
// `draft_model_path`, loaded on the target's thread pool, same vocabulary checked),
// "eagle3" (the EAGLE-3 head at draft_model_path, decoding/eagle3.h; a head given with
// "draft" or "" is used as one too), "mtp" (the target's own multi-token-prediction layer,
// decoding/mtp.h; no draft model), "none"; "" means "draft" when a draft model is given,
// else none. Null when there is none.
// Errors: an unknown spec or "mtp" with a draft model (kInvalidArgument), a draft model that
// does not load or whose vocabulary differs, a head that does not fit the target
// (make_eagle3_draft's errors), a target without MTP layers (make_mtp_draft's).
Result<std::shared_ptr<DraftSource>> make_draft_source(const std::string& spec, const std::string& draft_model_path,
                                                       Model& target, int64_t n_ctx);

// What a prompt cache entry was computed with: the model (a hash of the first 4 MiB of its
// file — the GGUF header and the first tensors — and its size; a folder: every regular
// file's name, size and first 4 MiB, in name order) and the cache layouts of `cache`.
std::string prompt_cache_fingerprint(const std::string& model_path, const Model& model, const CacheOptions& cache);

// The RAM tier's default size in MiB: a quarter of this machine's memory, at most 8192
// (llama-server's --cache-ram default is 8 GiB).
int64_t default_prompt_cache_ram_mib();

}  // namespace specula
