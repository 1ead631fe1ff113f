// tests/reference_generate.h — the test suites' plain one-request loop: prefill the prompt
// in chunks, then decode one token per forward with the request's own Sampler. It is the
// reference the batched engine (engine/engine.h) and the speculative rounds are compared
// with: no batching, no speculation, no prompt cache — the simplest loop that is obviously
// right. Tokens go to `on_token` as they are made; returning false stops. Generation also
// stops at an end-of-generation id (delivered only with `deliver_eog`), at max_tokens, or
// when the state row is full. Test-only: the server, the CLI and the library all run the
// engine.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "model/model.h"
#include "sampling/sampler.h"
#include "specula/status.h"
#include "state/state_rows.h"

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


namespace reference_detail {
inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace reference_detail

// Errors: empty prompt, id outside the vocabulary, prompt that does not fit the cache row,
// invalid sampling. The state row is emptied first (StateRows::reset).
inline Result<GenerateResult> generate(Model& model, StateRows& cache, int32_t row, const GenerateRequest& req,
                                const std::function<bool(int32_t)>& on_token) {
  const int64_t n_vocab = model.info().n_vocab;
  if (row < 0 || row >= cache.n_rows())
    return Status::error("[generate] state row " + std::to_string(row) + " out of range (" +
                         std::to_string(cache.n_rows()) + " rows)");
  if (req.prompt.empty()) return Status::error("[generate] empty prompt");
  if (req.max_tokens <= 0)
    return Status::error("[generate] max_tokens must be positive, got " + std::to_string(req.max_tokens));
  for (size_t i = 0; i < req.prompt.size(); ++i)
    if (req.prompt[i] < 0 || req.prompt[i] >= n_vocab)
      return Status::error("[generate] prompt token " + std::to_string(req.prompt[i]) + " at position " +
                           std::to_string(i) + " outside the vocabulary (" + std::to_string(n_vocab) + ")");
  if (static_cast<int64_t>(req.prompt.size()) >= cache.max_length())
    return Status::error("[generate] prompt of " + std::to_string(req.prompt.size()) +
                         " tokens does not fit the context of " + std::to_string(cache.max_length()));
  auto sampler = Sampler::create(req.sampling, static_cast<int32_t>(n_vocab));
  if (!sampler) return sampler.status();

  SPECULA_RETURN_IF_ERROR(cache.reset(row));
  GenerateResult res;
  res.n_prompt = static_cast<int64_t>(req.prompt.size());
  Tensor hidden;
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  const int32_t rows[1] = {row};

  const double t0 = reference_detail::now_seconds();
  const int64_t chunk = std::max<int64_t>(1, req.prefill_chunk);
  for (int64_t off = 0; off < res.n_prompt; off += chunk) {
    Batch b;
    b.B = 1;
    b.T = std::min(chunk, res.n_prompt - off);
    b.ids = req.prompt.data() + off;
    b.rows = rows;
    SPECULA_RETURN_IF_ERROR(model.forward(b, cache, hidden));
  }
  const int64_t E = model.info().n_embd;
  model.project_logits(hidden.data() + (hidden.dim(0) - 1) * E, 1, logits.data());
  for (int32_t id : req.prompt) sampler->accept_prompt(id);
  const double t1 = reference_detail::now_seconds();
  res.prefill_seconds = t1 - t0;

  for (;;) {
    const int32_t tok = sampler->sample(logits.data(), static_cast<int32_t>(n_vocab));
    sampler->accept(tok);
    res.tokens.push_back(tok);
    ++res.n_generated;
    const bool eog = std::find(req.eog_ids.begin(), req.eog_ids.end(), tok) != req.eog_ids.end();
    if (eog) {
      if (req.deliver_eog) on_token(tok);
      res.finish = FinishReason::kStop;
      break;
    }
    if (!on_token(tok)) {
      res.finish = FinishReason::kCancelled;
      break;
    }
    if (res.n_generated >= req.max_tokens) {
      res.finish = FinishReason::kLength;
      break;
    }
    if (cache.length(row) + 1 > cache.max_length()) {
      res.finish = FinishReason::kContextFull;
      break;
    }
    Batch b;
    b.B = 1;
    b.T = 1;
    b.ids = &tok;
    b.rows = rows;
    SPECULA_RETURN_IF_ERROR(model.forward(b, cache, hidden));
    model.project_logits(hidden.data(), 1, logits.data());
  }
  res.decode_seconds = reference_detail::now_seconds() - t1;
  return res;
}

}  // namespace specula
