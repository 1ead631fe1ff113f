// decoding/speculative.cpp — see speculative.h.
#include "decoding/speculative.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace specula {
namespace {

// A chosen token t at logits lg: into the sampler's history and the count; an
// end-of-generation token ends the walk (returns false, not emitted); otherwise its
// logprobs are filled and it is emitted.
// The sampled token's logprob and n_top alternatives from the distribution the sampler drew
// from (called before accept(): the same state as the draw).
void post_sampling_logprobs(Sampler& sampler, WalkToken& t, const float* lg, int32_t n_vocab, int32_t n_top) {
  std::vector<std::pair<int32_t, float>> p = sampler.probabilities(lg, n_vocab);
  p.erase(std::remove_if(p.begin(), p.end(), [](const auto& e) { return !(e.second > 0.0f); }), p.end());
  t.logprob = -std::numeric_limits<float>::infinity();
  for (const auto& [id, pr] : p)
    if (id == t.id) t.logprob = std::log(pr);
  const size_t k = std::min(p.size(), static_cast<size_t>(std::max(n_top, 0)));
  std::partial_sort(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(k), p.end(),
                    [](const auto& a, const auto& b) { return a.second > b.second || (a.second == b.second && a.first < b.first); });
  t.top.clear();
  for (size_t i = 0; i < k; ++i) t.top.push_back({p[i].first, std::log(p[i].second)});
}

bool record(Sampler& sampler, WalkResult& r, WalkToken& t, const float* lg, int32_t n_vocab,
            std::span<const int32_t> eog, bool ignore_eos, int32_t n_top, bool post_sampling) {
  const bool eog_hit = !ignore_eos && std::find(eog.begin(), eog.end(), t.id) != eog.end();
  if (n_top >= 0 && post_sampling && !eog_hit) post_sampling_logprobs(sampler, t, lg, n_vocab, n_top);
  sampler.accept(t.id);
  ++r.sampled;
  if (eog_hit) {
    r.hit_eog = true;
    return false;
  }
  if (n_top >= 0 && !post_sampling) {
    t.logprob = token_logprob(lg, n_vocab, t.id);
    if (n_top > 0) t.top = top_logprobs(lg, n_vocab, n_top);
  }
  r.tokens.push_back(std::move(t));
  return true;
}

}  // namespace

WalkResult speculative_walk(Sampler& sampler, const float* logits, int32_t n_vocab,
                            std::span<const int32_t> proposals, int32_t budget,
                            std::span<const int32_t> eog, bool ignore_eos, int32_t n_top, bool post_sampling) {
  WalkResult r;
  const size_t k = proposals.size();
  for (size_t j = 0; j <= k && r.sampled < budget; ++j) {
    const float* lg = logits + j * static_cast<size_t>(n_vocab);
    WalkToken t;
    t.id = sampler.sample(lg, n_vocab);
    const bool match = j < k && t.id == proposals[j];
    if (!record(sampler, r, t, lg, n_vocab, eog, ignore_eos, n_top, post_sampling)) return r;
    if (!match) break;
    ++r.accepted;
  }
  r.hit_budget = r.sampled >= budget;
  return r;
}


WalkResult speculative_walk_rejection(Sampler& sampler, const float* logits, int32_t n_vocab,
                                      std::span<const int32_t> proposals, std::span<const TokenDist> q,
                                      int32_t budget, std::span<const int32_t> eog, bool ignore_eos,
                                      int32_t n_top, bool post_sampling) {
  if (sampler.params().temperature <= 0.0f || q.size() != proposals.size())
    return speculative_walk(sampler, logits, n_vocab, proposals, budget, eog, ignore_eos, n_top, post_sampling);
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
    if (!record(sampler, r, t, lg, n_vocab, eog, ignore_eos, n_top, post_sampling)) return r;
    if (!kept) break;
    ++r.accepted;
  }
  r.hit_budget = r.sampled >= budget;
  return r;
}

}  // namespace specula
