// engine/generate.h — one request, autoregressive: prefill the prompt, then decode.
//
// Prefill runs the prompt through the model in chunks of `prefill_chunk` tokens
// (logits only for the last prompt token); decode runs one token per step, sampling
// with the request's own Sampler. Tokens are handed to `on_token` as they are made
// (before the next step); returning false stops generation. Generation also stops at
// an end-of-generation token (not delivered to on_token unless `deliver_eog`), at
// max_tokens, or when the state row is full.
// Does not batch several requests (that is the scheduler's job) and does not detokenize.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "method/sampler.h"
#include "model/model.h"
#include "tokenizer/vocab.h"
#include "specula/status.h"

namespace specula {

struct GenerateRequest {
  std::vector<int32_t> prompt;  // token ids, non-empty
  int32_t max_tokens = 128;     // > 0
  SamplingParams sampling;
  std::vector<int32_t> eog_ids;  // stop tokens (EOS, end-of-turn, ...)
  bool deliver_eog = false;
  int64_t prefill_chunk = 512;
};

enum class FinishReason { kLength, kStop, kContextFull, kCancelled };

struct GenerateResult {
  int64_t n_prompt = 0;
  int64_t n_generated = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;  // from the first sampled token to the last
  FinishReason finish = FinishReason::kLength;
  std::vector<int32_t> tokens;  // generated ids (incl. the EOG token if it ended so)
};

// Errors: empty prompt, id outside the vocabulary, prompt that does not fit the cache row
// ("[generate] prompt of 5000 tokens does not fit the context of 4096"), invalid sampling.
// The state row is emptied first (StateRows::reset).
Result<GenerateResult> generate(Model& model, StateRows& cache, int32_t row, const GenerateRequest& req,
                                const std::function<bool(int32_t)>& on_token);

// The model's sampling defaults: general.sampling.temp / top_p / min_p / top_k when present
// (llama.cpp's keys; a Hugging Face folder's generation_config.json, model/hf_folder.h), values
// outside the sampler's ranges ignored.
SamplingDefaults model_sampling_defaults(const gguf::GgufFile& file);

}  // namespace specula
