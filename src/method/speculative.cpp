// method/speculative.cpp — see speculative.h.
#include "method/speculative.h"

#include <algorithm>

namespace specula {

WalkResult speculative_walk(Sampler& sampler, const float* logits, int32_t n_vocab,
                            std::span<const int32_t> proposals, int32_t budget,
                            std::span<const int32_t> eog, bool ignore_eos, int32_t n_top) {
  WalkResult r;
  const size_t k = proposals.size();
  for (size_t j = 0; j <= k && r.sampled < budget; ++j) {
    const float* lg = logits + j * static_cast<size_t>(n_vocab);
    WalkToken t;
    t.id = sampler.sample(lg, n_vocab);
    sampler.accept(t.id);
    ++r.sampled;
    if (!ignore_eos && std::find(eog.begin(), eog.end(), t.id) != eog.end()) {
      r.hit_eog = true;
      return r;
    }
    if (n_top >= 0) {
      t.logprob = token_logprob(lg, n_vocab, t.id);
      if (n_top > 0) t.top = top_logprobs(lg, n_vocab, n_top);
    }
    const bool match = j < k && t.id == proposals[j];
    r.tokens.push_back(std::move(t));
    if (!match) break;
    ++r.accepted;
  }
  r.hit_budget = r.sampled >= budget;
  return r;
}

}  // namespace specula
