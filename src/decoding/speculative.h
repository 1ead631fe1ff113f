// decoding/speculative.h — the per-row acceptance walk of a speculative round
// (docs/ARCHITECTURE.md, Speculative round, step 4).
//
// The target has run one forward over the row's verify window [pending, d_1 .. d_k]
// and produced logits at each of its k+1 positions; position j predicts the token after
// the window's j-th token. The walk samples with the row's OWN sampler, in order:
//   t_j = sample(logits_j); accept(t_j);
//   stop at an end-of-generation token (not content), when the row's budget is spent,
//   or when t_j != d_{j+1} (t_j is then the correction); otherwise d_{j+1} is accepted
//   and the walk continues; after all k drafts match, t_k is the bonus token.
// Exact-match acceptance is lossless at every temperature: each emitted token is drawn
// from the target's distribution given the accepted prefix, with the same RNG draws and
// penalty history as plain decoding, and the target logits are bitwise the same as a
// one-token decode (batch invariance) — so for the same seed the output equals plain
// decoding token for token (Leviathan et al. 2023 §2.3 note that any acceptance rule
// that only keeps target samples is exact; we keep only target samples).
//
// Rejection sampling (Leviathan et al. 2023 §2.3, Chen et al. 2023 Alg. 2), when the
// drafts were themselves sampled and their distributions q_j are given: draft d_j is kept
// with probability min(1, p_j(d_j) / q_j(d_j)) (p_j = the row's sampler distribution at
// position j, after penalties and truncation); on rejection the correction is drawn from
// the residual max(0, p_j - q_j), renormalised; after k kept drafts the bonus token is
// sampled from p_k. The emitted tokens are distributed exactly as plain sampling
// (lossless) but use other RNG draws, so a given seed gives other (equally likely) text.
// Acceptance is sum_x min(p(x), q(x)) instead of p(d_j) for a greedy draft.
// Does not run models, touch caches, or decide depth.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "sampling/sampler.h"

namespace specula {

struct WalkToken {
  int32_t id = -1;
  float logprob = 0.0f;                           // when top_logprobs >= 0
  std::vector<std::pair<int32_t, float>> top;     // when top_logprobs > 0
};

struct WalkResult {
  std::vector<WalkToken> tokens;  // emitted content tokens, in order (no EOG token)
  int32_t sampled = 0;            // tokens sampled (tokens.size() + 1 when hit_eog)
  int32_t accepted = 0;           // drafts accepted (prefix of the proposals)
  bool hit_eog = false;           // ended at an end-of-generation token
  bool hit_budget = false;        // emitted `budget` tokens
};

// logits: [proposals.size() + 1, n_vocab] f32, row j = the target's logits at window
// position j. budget >= 1: most tokens the row may still sample. eog: end-of-generation
// ids (ignored when ignore_eos). top_logprobs: -1 none, else alternatives per token.
// post_sampling: the logprobs are those of the distribution the sampler drew from
// (Sampler::probabilities: after penalties, truncation and temperature; only tokens with
// probability > 0 among the alternatives) instead of the raw logits' log-softmax —
// llama-server's post_sampling_probs.
WalkResult speculative_walk(Sampler& sampler, const float* logits, int32_t n_vocab,
                            std::span<const int32_t> proposals, int32_t budget,
                            std::span<const int32_t> eog, bool ignore_eos, int32_t top_logprobs,
                            bool post_sampling = false);

// The rejection-sampling walk: q[j] is the distribution proposals[j] was drawn from
// (q.size() == proposals.size()). With a greedy sampler (temperature <= 0) it is the
// exact-match walk above.
WalkResult speculative_walk_rejection(Sampler& sampler, const float* logits, int32_t n_vocab,
                                      std::span<const int32_t> proposals, std::span<const TokenDist> q,
                                      int32_t budget, std::span<const int32_t> eog, bool ignore_eos,
                                      int32_t top_logprobs, bool post_sampling = false);

}  // namespace specula
