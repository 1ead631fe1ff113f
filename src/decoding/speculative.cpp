// decoding/speculative.cpp — see speculative.h.
#include "decoding/speculative.h"

#include <algorithm>

namespace specula {
namespace {

// A chosen token t at logits lg: into the sampler's history and the count; an
// end-of-generation token ends the walk (returns false, not emitted); otherwise its
// logprobs are filled and it is emitted.
bool record(Sampler& sampler, WalkResult& r, WalkToken& t, const float* lg, int32_t n_vocab,
            std::span<const int32_t> eog, bool ignore_eos, int32_t n_top) {
  sampler.accept(t.id);
  ++r.sampled;
  if (!ignore_eos && std::find(eog.begin(), eog.end(), t.id) != eog.end()) {
    r.hit_eog = true;
    return false;
  }
  if (n_top >= 0) {
    t.logprob = token_logprob(lg, n_vocab, t.id);
    if (n_top > 0) t.top = top_logprobs(lg, n_vocab, n_top);
  }
  r.tokens.push_back(std::move(t));
  return true;
}

}  // namespace

WalkResult speculative_walk(Sampler& sampler, const float* logits, int32_t n_vocab,
                            std::span<const int32_t> proposals, int32_t budget,
                            std::span<const int32_t> eog, bool ignore_eos, int32_t n_top) {
  WalkResult r;
  const size_t k = proposals.size();
  for (size_t j = 0; j <= k && r.sampled < budget; ++j) {
    const float* lg = logits + j * static_cast<size_t>(n_vocab);
    WalkToken t;
    t.id = sampler.sample(lg, n_vocab);
    const bool match = j < k && t.id == proposals[j];
    if (!record(sampler, r, t, lg, n_vocab, eog, ignore_eos, n_top)) return r;
    if (!match) break;
    ++r.accepted;
  }
  r.hit_budget = r.sampled >= budget;
  return r;
}


WalkResult speculative_walk_rejection(Sampler& sampler, const float* logits, int32_t n_vocab,
                                      std::span<const int32_t> proposals, std::span<const TokenDist> q,
                                      int32_t budget, std::span<const int32_t> eog, bool ignore_eos,
                                      int32_t n_top) {
  if (sampler.params().temperature <= 0.0f || q.size() != proposals.size())
    return speculative_walk(sampler, logits, n_vocab, proposals, budget, eog, ignore_eos, n_top);
  WalkResult r;
  const size_t k = proposals.size();
  thread_local std::vector<float> qd;  // q_j by token id (zero elsewhere)
  qd.assign(static_cast<size_t>(n_vocab), 0.0f);
  for (size_t j = 0; j <= k && r.sampled < budget; ++j) {
    const float* lg = logits + j * static_cast<size_t>(n_vocab);
    WalkToken t;
    bool kept = false;
    if (j < k) {
      const TokenDist p = sampler.probabilities(lg, n_vocab);
      const int32_t x = proposals[j];
      for (const auto& [id, pr] : q[j])
        if (id >= 0 && id < n_vocab) qd[id] += pr;
      float px = 0.0f;
      for (const auto& [id, pr] : p)
        if (id == x) px = pr;
      const float qx = (x >= 0 && x < n_vocab) ? qd[x] : 0.0f;
      const float u = sampler.uniform();
      if (qx > 0.0f && static_cast<double>(u) * qx < px) {
        t.id = x;
        kept = true;
      } else {
        // Residual max(0, p - q), drawn by inverse CDF in p's order.
        double total = 0.0;
        for (const auto& [id, pr] : p) total += std::max(0.0, static_cast<double>(pr) - qd[id]);
        const double target = static_cast<double>(sampler.uniform()) * total;
        double cum = 0.0;
        t.id = -1;
        for (const auto& [id, pr] : p) {
          const double w = std::max(0.0, static_cast<double>(pr) - qd[id]);
          if (w <= 0.0) continue;
          cum += w;
          t.id = id;
          if (cum > target) break;
        }
        if (t.id < 0) t.id = sampler.sample(lg, n_vocab);  // no residual mass (p == q up to rounding): draw from p
      }
      for (const auto& [id, pr] : q[j])
        if (id >= 0 && id < n_vocab) qd[id] = 0.0f;
    } else {
      t.id = sampler.sample(lg, n_vocab);
    }
    if (!record(sampler, r, t, lg, n_vocab, eog, ignore_eos, n_top)) return r;
    if (!kept) break;
    ++r.accepted;
  }
  r.hit_budget = r.sampled >= budget;
  return r;
}

}  // namespace specula
