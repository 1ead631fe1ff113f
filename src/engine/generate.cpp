// engine/generate.cpp — see generate.h.
#include "engine/generate.h"

#include <algorithm>
#include <cmath>
#include <chrono>

namespace specula {
namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Result<GenerateResult> generate(Model& model, StateRows& cache, int32_t row, const GenerateRequest& req,
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

  const double t0 = now_seconds();
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
  const double t1 = now_seconds();
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
  res.decode_seconds = now_seconds() - t1;
  return res;
}

SamplingDefaults model_sampling_defaults(const gguf::GgufFile& file) {
  SamplingDefaults d;
  const auto num = [&](const char* key, double lo, double hi) -> std::optional<double> {
    auto v = file.get_float(key);
    if (!v || !std::isfinite(*v) || *v < lo || *v > hi) return std::nullopt;
    return *v;
  };
  if (auto v = num("general.sampling.temp", 0.0, 100.0)) d.temperature = static_cast<float>(*v);
  if (auto v = num("general.sampling.top_p", 1e-6, 1.0)) d.top_p = static_cast<float>(*v);
  if (auto v = num("general.sampling.min_p", 0.0, 1.0)) d.min_p = static_cast<float>(*v);
  if (auto v = file.get_int("general.sampling.top_k"); v && *v >= 0 && *v <= (int64_t{1} << 24))
    d.top_k = static_cast<int32_t>(*v);
  return d;
}

}  // namespace specula
