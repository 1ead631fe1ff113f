// Tests for decoding/draft and decoding/speculative: n-gram lookup proposals, the acceptance
// walk on synthetic logits, and a model-level speculative loop (draft -> one verify
// forward -> walk -> trim the rejected positions) that must equal plain greedy decoding
// token for token on Gemma 3 270M, across the 512-token sliding-window edge.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../reference_generate.h"
#include "decoding/draft.h"
#include "decoding/speculative.h"
#include "../test_util.h"

namespace specula {
namespace {

TEST(NgramDraft, ProposesWhatFollowedTheLatestMatch) {
  auto d = make_ngram_draft({1, 3});
  const std::vector<int32_t> ctx = {5, 6, 7, 8, 9, 1, 2, 5, 6, 7};
  std::vector<std::vector<int32_t>> out;
  DraftRow r{0, ctx, 3};
  ASSERT_TRUE(d->draft(std::span<const DraftRow>(&r, 1), out).is_ok());
  EXPECT_EQ(out[0], (std::vector<int32_t>{8, 9, 1}));
  r.max_depth = 10;  // bounded by the context's end
  ASSERT_TRUE(d->draft(std::span<const DraftRow>(&r, 1), out).is_ok());
  EXPECT_EQ(out[0], (std::vector<int32_t>{8, 9, 1, 2, 5, 6, 7}));
  const std::vector<int32_t> none = {1, 2, 3, 4};
  DraftRow r2{1, none, 4};
  ASSERT_TRUE(d->draft(std::span<const DraftRow>(&r2, 1), out).is_ok());
  EXPECT_TRUE(out[0].empty());
}

TEST(SpeculativeWalk, AcceptsMatchingPrefixThenCorrects) {
  const int32_t V = 8;
  // Greedy targets per position: 3, 4, 6, 1.
  std::vector<float> logits(4 * V, 0.0f);
  const int32_t best[4] = {3, 4, 6, 1};
  for (int j = 0; j < 4; ++j) logits[j * V + best[j]] = 5.0f;
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler s(p);
  const std::vector<int32_t> drafts = {3, 4, 5};
  WalkResult r = speculative_walk(s, logits.data(), V, drafts, 100, {}, false, 2);
  ASSERT_EQ(r.tokens.size(), 3u);
  EXPECT_EQ(r.accepted, 2);
  EXPECT_EQ(r.tokens[2].id, 6);  // correction
  EXPECT_LE(r.tokens[0].logprob, 0.0f);
  EXPECT_EQ(r.tokens[0].top.size(), 2u);
  // All drafts accepted: bonus token.
  Sampler s2(p);
  const std::vector<int32_t> good = {3, 4, 6};
  r = speculative_walk(s2, logits.data(), V, good, 100, {}, false, -1);
  EXPECT_EQ(r.accepted, 3);
  ASSERT_EQ(r.tokens.size(), 4u);
  EXPECT_EQ(r.tokens[3].id, 1);
  // Budget and end of generation stop the walk.
  Sampler s3(p);
  r = speculative_walk(s3, logits.data(), V, good, 2, {}, false, -1);
  EXPECT_EQ(r.tokens.size(), 2u);
  EXPECT_TRUE(r.hit_budget);
  Sampler s4(p);
  const int32_t eog[1] = {4};
  r = speculative_walk(s4, logits.data(), V, good, 100, eog, false, -1);
  EXPECT_TRUE(r.hit_eog);
  EXPECT_EQ(r.tokens.size(), 1u);
  EXPECT_EQ(r.sampled, 2);
}

// post_sampling: the logprobs are the sampler's distribution — top_k 2 at temperature 0.5 over
// logits {2, 1, 0, ...} keeps two tokens with probabilities softmax({2, 1} / 0.5) — while the
// sampled tokens stay those of the same seed without it.
TEST(SpeculativeWalk, PostSamplingLogprobsAreTheSamplersDistribution) {
  const int32_t V = 6;
  std::vector<float> logits = {2.0f, 1.0f, 0.0f, 0.0f, -1.0f, 0.5f};
  SamplingParams p;
  p.temperature = 0.5f;
  p.top_k = 2;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 11;
  Sampler s(p), plain(p);
  WalkResult r = speculative_walk(s, logits.data(), V, {}, 1, {}, false, 5, /*post_sampling=*/true);
  WalkResult raw = speculative_walk(plain, logits.data(), V, {}, 1, {}, false, 5);
  ASSERT_EQ(r.tokens.size(), 1u);
  ASSERT_EQ(raw.tokens.size(), 1u);
  EXPECT_EQ(r.tokens[0].id, raw.tokens[0].id);
  const double p0 = 1.0 / (1.0 + std::exp(-2.0));  // e^(2/0.5) / (e^(2/0.5) + e^(1/0.5))
  ASSERT_EQ(r.tokens[0].top.size(), 2u);  // only the kept tokens, most likely first
  EXPECT_EQ(r.tokens[0].top[0].first, 0);
  EXPECT_NEAR(std::exp(r.tokens[0].top[0].second), p0, 1e-5);
  EXPECT_EQ(r.tokens[0].top[1].first, 1);
  EXPECT_NEAR(std::exp(r.tokens[0].top[1].second), 1.0 - p0, 1e-5);
  EXPECT_NEAR(std::exp(r.tokens[0].logprob), r.tokens[0].id == 0 ? p0 : 1.0 - p0, 1e-5);
  EXPECT_EQ(raw.tokens[0].top.size(), 5u);  // raw: the whole vocabulary's log-softmax
}

// Rejection sampling on synthetic distributions: drafts drawn from q (far from p), the
// first emitted token must be distributed as p (chi-square, 5 degrees of freedom, below
// the 0.999 quantile 20.52), and the acceptance rate must be sum_x min(p(x), q(x))
// (within 4 standard errors). Also: greedy falls back to exact match.
TEST(SpeculativeWalk, RejectionSamplingIsLossless) {
  const int32_t V = 6;
  const float lg[V] = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, 1.5f};
  std::vector<float> logits(2 * V);
  for (int i = 0; i < V; ++i) logits[i] = logits[V + i] = lg[i];
  double p[V], z = 0;
  for (int i = 0; i < V; ++i) z += std::exp(static_cast<double>(lg[i]));
  for (int i = 0; i < V; ++i) p[i] = std::exp(static_cast<double>(lg[i])) / z;
  const double qv[V] = {0.05, 0.40, 0.30, 0.10, 0.10, 0.05};
  TokenDist q;
  for (int i = 0; i < V; ++i) q.push_back({i, static_cast<float>(qv[i])});
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  std::mt19937_64 rng(123);
  std::discrete_distribution<int> draw_q(qv, qv + V);
  const int N = 40000;
  std::vector<int> hist(V, 0);
  int accepted = 0;
  for (int n = 0; n < N; ++n) {
    sp.seed = static_cast<uint64_t>(n) + 1;
    Sampler s(sp);
    const int32_t x = draw_q(rng);
    const int32_t drafts[1] = {x};
    const TokenDist qs[1] = {q};
    WalkResult r = speculative_walk_rejection(s, logits.data(), V, drafts, qs, 10, {}, false, -1);
    ASSERT_GE(r.tokens.size(), 1u);
    ASSERT_EQ(r.tokens.size(), static_cast<size_t>(r.accepted) + 1);
    hist[r.tokens[0].id]++;
    accepted += r.accepted;
  }
  double chi2 = 0, overlap = 0;
  for (int i = 0; i < V; ++i) {
    const double e = N * p[i];
    chi2 += (hist[i] - e) * (hist[i] - e) / e;
    overlap += std::min(p[i], qv[i]);
  }
  EXPECT_LT(chi2, 20.52) << "first-token distribution differs from the target's";
  const double rate = static_cast<double>(accepted) / N, se = std::sqrt(overlap * (1 - overlap) / N);
  EXPECT_NEAR(rate, overlap, 4 * se);
  std::printf("[rejection] chi2 %.2f (df 5), acceptance %.4f vs sum min(p,q) %.4f\n", chi2, rate, overlap);

  // Greedy: exact match whatever q says.
  SamplingParams g;
  g.temperature = 0.0f;
  Sampler gs(g);
  const int32_t wrong[1] = {1};
  const TokenDist qs[1] = {q};
  WalkResult r = speculative_walk_rejection(gs, logits.data(), V, wrong, qs, 10, {}, false, -1);
  ASSERT_EQ(r.tokens.size(), 1u);
  EXPECT_EQ(r.tokens[0].id, 0);
  EXPECT_EQ(r.accepted, 0);
}

// Plain greedy vs draft/verify/walk/trim with one row.
std::vector<int32_t> speculative_greedy(Model& m, DraftSource& d, const std::vector<int32_t>& prompt, int n,
                                        int depth, int* rounds, int* accepted) {
  auto cache = testing::make_state(m, 1, 2048);
  EXPECT_TRUE(cache.is_ok());
  const int32_t V = static_cast<int32_t>(m.info().n_vocab);
  const int64_t E = m.info().n_embd;
  Tensor hidden;
  const int32_t rows[1] = {0};
  Batch b{1, static_cast<int64_t>(prompt.size()) - 1, prompt.data(), rows};
  EXPECT_TRUE(m.forward(b, *cache, hidden).is_ok());
  std::vector<int32_t> ctx = prompt, out;
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler s(p);
  std::vector<float> logits;
  while (static_cast<int>(out.size()) < n) {
    DraftRow r{0, ctx, depth};
    std::vector<std::vector<int32_t>> prop;
    EXPECT_TRUE(d.draft(std::span<const DraftRow>(&r, 1), prop).is_ok());
    std::vector<int32_t> window = {ctx.back()};
    window.insert(window.end(), prop[0].begin(), prop[0].end());
    cache->begin(rows);
    Batch vb{1, static_cast<int64_t>(window.size()), window.data(), rows};
    EXPECT_TRUE(m.forward(vb, *cache, hidden).is_ok());
    logits.resize(window.size() * static_cast<size_t>(V));
    m.project_logits(hidden.data(), static_cast<int64_t>(window.size()), logits.data());
    (void)E;
    WalkResult w = speculative_walk(s, logits.data(), V, prop[0], n - static_cast<int>(out.size()), {}, true, -1);
    ++*rounds;
    *accepted += w.accepted;
    const int64_t keep[1] = {1 + w.accepted};
    EXPECT_TRUE(cache->resolve(rows, keep).is_ok());
    for (const auto& t : w.tokens) {
      out.push_back(t.id);
      ctx.push_back(t.id);
    }
    DraftRow c{0, ctx, 0};
    d.commit(std::span<const DraftRow>(&c, 1));
  }
  return out;
}

TEST(SpeculativeModel, NgramEqualsGreedyAcrossTheWindowEdge) {
  if (!testing::default_model_present()) GTEST_SKIP() << "model not found: " << testing::default_model_path();
  auto m = load_model(testing::default_model_path());
  ASSERT_TRUE(m.is_ok()) << m.message();
  // A repetitive ~470-token prompt: the n-gram source proposes a lot, some of it wrong,
  // while decoding crosses position 512 (Gemma 3's sliding window).
  std::mt19937 rng(7);
  std::vector<int32_t> phrase;
  for (int i = 0; i < 23; ++i) phrase.push_back(1000 + static_cast<int32_t>(rng() % 5000));
  std::vector<int32_t> prompt = {2};
  while (prompt.size() < 470) prompt.insert(prompt.end(), phrase.begin(), phrase.end());
  const int n = 90;
  auto cache = testing::make_state(**m, 1, 2048);
  GenerateRequest g;
  g.prompt = prompt;
  g.max_tokens = n;
  g.sampling.temperature = 0.0f;
  auto plain = generate(**m, *cache, 0, g, [](int32_t) { return true; });
  ASSERT_TRUE(plain.is_ok()) << plain.message();
  auto d = make_ngram_draft();
  int rounds = 0, accepted = 0;
  const auto spec = speculative_greedy(**m, *d, prompt, n, 6, &rounds, &accepted);
  EXPECT_EQ(spec, plain->tokens);
  EXPECT_LT(rounds, n) << "no draft was ever accepted";
  std::printf("[ngram] %d tokens in %d rounds, %d drafts accepted\n", n, rounds, accepted);
}


// The model as its own draft: its proposals are the greedy continuation, whether its
// cache was filled by prefill() during the prompt (chunk by chunk, as the engine does) or
// by draft()'s own catch-up; after commit() of a context that rejected the last two
// drafts, the next draft continues from the new context.
TEST(SpeculativeModel, DraftModelPrefillEqualsCatchUp) {
  if (!testing::default_model_present()) GTEST_SKIP() << "model not found: " << testing::default_model_path();
  auto target = load_model(testing::default_model_path());
  auto dm1 = load_model(testing::default_model_path());
  auto dm2 = load_model(testing::default_model_path());
  ASSERT_TRUE(target.is_ok() && dm1.is_ok() && dm2.is_ok());
  std::vector<int32_t> prompt = {2, 818, 5279, 529, 7001, 563, 9079, 236761, 669, 5279, 529};
  auto cache = testing::make_state(**target, 1, 256);
  GenerateRequest g;
  g.prompt = prompt;
  g.max_tokens = 12;
  g.sampling.temperature = 0.0f;
  auto plain = generate(**target, *cache, 0, g, [](int32_t) { return true; });
  ASSERT_TRUE(plain.is_ok()) << plain.message();
  ASSERT_EQ(plain->tokens.size(), 12u);

  auto a = make_model_draft(std::move(dm1).value(), 256);
  auto b = make_model_draft(std::move(dm2).value(), 256);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  // a: the prompt in chunks of 4, 4, 3 through prefill() (request id 1), after a context
  // that diverges from it at position 8 (its state must be cut back to the common prefix).
  std::vector<int32_t> other(prompt.begin(), prompt.begin() + 8);
  other.insert(other.end(), {4000, 4001, 4002});
  DraftRow o{1, other, 0};
  ASSERT_TRUE((*a)->prefill(std::span<const DraftRow>(&o, 1)).is_ok());
  for (size_t n : {4u, 8u, 11u}) {
    DraftRow p{1, std::span<const int32_t>(prompt.data(), n), 0};
    ASSERT_TRUE((*a)->prefill(std::span<const DraftRow>(&p, 1)).is_ok());
  }
  std::vector<int32_t> ctx = prompt;
  ctx.push_back(plain->tokens[0]);  // the pending token
  std::vector<std::vector<int32_t>> pa, pb;
  DraftRow r{1, ctx, 6};
  ASSERT_TRUE((*a)->draft(std::span<const DraftRow>(&r, 1), pa).is_ok());
  ASSERT_TRUE((*b)->draft(std::span<const DraftRow>(&r, 1), pb).is_ok());
  const std::vector<int32_t> want(plain->tokens.begin() + 1, plain->tokens.begin() + 7);
  EXPECT_EQ(pa[0], want);
  EXPECT_EQ(pb[0], want);
  // Keep 4 of the 6 drafts, then a token that differs from the 5th draft.
  ctx.insert(ctx.end(), want.begin(), want.begin() + 4);
  ctx.push_back(want[4] + 1);
  DraftRow c{1, ctx, 0};
  (*a)->commit(std::span<const DraftRow>(&c, 1));
  DraftRow r2{1, ctx, 3};
  ASSERT_TRUE((*a)->draft(std::span<const DraftRow>(&r2, 1), pa).is_ok());
  // Reference: a fresh source catching up the whole context.
  auto dm3 = load_model(testing::default_model_path());
  ASSERT_TRUE(dm3.is_ok());
  auto fresh = make_model_draft(std::move(dm3).value(), 256);
  ASSERT_TRUE(fresh.is_ok());
  ASSERT_TRUE((*fresh)->draft(std::span<const DraftRow>(&r2, 1), pb).is_ok());
  EXPECT_EQ(pa[0], pb[0]);
  EXPECT_EQ(pa[0].size(), 3u);
}

}  // namespace
}  // namespace specula
