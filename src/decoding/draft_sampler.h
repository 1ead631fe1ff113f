// decoding/draft_sampler.h — how a draft source with logits (a draft model, a head that reads
// the target's hidden states) picks a draft token for one request: the argmax (greedy rows,
// exact-match acceptance), or, for a row sampled with rejection-sampling acceptance
// (DraftRow::sampling with temperature > 0), a draw from the request's own sampling chain
// without its penalties (there is no history here), whose distribution q the round needs
// (decoding/speculative.h). The draws come from a stream of the request's own, seeded from
// its seed (a new seed, a new stream). Thread-compatible (one per request, the engine's
// thread).
#pragma once

#include <cstdint>
#include <memory>

#include "decoding/draft.h"
#include "sampling/sampler.h"

namespace specula {

class DraftSampler {
 public:
  // True when r's drafts are drawn (and come with their distribution).
  static bool wanted(const DraftRow& r) { return r.sampling != nullptr && r.sampling->temperature > 0.0f; }

  // The first maximum of logits [n] (ties: the lowest id).
  static int32_t argmax(const float* logits, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; ++i)
      if (logits[i] > logits[best]) best = i;
    return best;
  }

  // r's draft from logits [V]: argmax, or (wanted(r)) a draw whose distribution goes to
  // *dist (the sampler's probabilities over the ids it keeps).
  int32_t pick(const DraftRow& r, const float* logits, int32_t V, TokenDist* dist) {
    if (!wanted(r)) return argmax(logits, V);
    if (!sampler_ || seed_ != r.sampling->seed) {
      SamplingParams p = *r.sampling;  // the request's chain without penalties
      p.repeat_penalty = 1.0f;
      p.presence_penalty = 0.0f;
      p.frequency_penalty = 0.0f;
      p.repeat_last_n = 0;
      p.seed = r.sampling->seed ^ 0xD1B54A32D192ED03ULL;  // its own stream, not the request's
      sampler_ = std::make_unique<Sampler>(p);
      seed_ = r.sampling->seed;
    }
    TokenDist d = sampler_->probabilities(logits, V);
    double total = 0.0;
    for (const auto& e : d) total += e.second;
    const double target = static_cast<double>(sampler_->uniform()) * total;
    double cum = 0.0;
    int32_t id = -1;  // rounding at the top of the range: the last token with weight
    for (const auto& [tok, pr] : d) {
      if (pr <= 0.0f) continue;
      cum += pr;
      id = tok;
      if (cum > target) break;
    }
    if (id < 0) id = argmax(logits, V);
    if (dist != nullptr) *dist = std::move(d);
    return id;
  }

 private:
  std::unique_ptr<Sampler> sampler_;
  uint64_t seed_ = 0;
};

}  // namespace specula
