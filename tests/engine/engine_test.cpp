// Tests for engine/scheduler on the real default model: requests batched together produce
// exactly their solo tokens (greedy and seeded sampling), equal engine/generate's
// single-request path, cancellation frees the row, refusals (invalid, queue full), stop by
// the sink, and chunked prefill alongside decoding rows.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cmath>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "../reference_generate.h"
#include "engine/engine.h"
#include "../test_util.h"
#include "engine_test_util.h"

namespace specula {
namespace {

class SchedulerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!testing::default_model_present()) return;
    auto m = load_model(testing::default_model_path());
    ASSERT_TRUE(m.is_ok()) << m.message();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    if (model_ == nullptr) GTEST_SKIP() << "model not found: " << testing::default_model_path();
  }
  static EngineRequest request(size_t prompt_len, uint32_t seed, int32_t max_tokens, float temperature) {
    std::mt19937 rng(seed);
    EngineRequest r;
    r.prompt.push_back(2);
    for (size_t i = 1; i < prompt_len; ++i) r.prompt.push_back(1000 + static_cast<int32_t>(rng() % 100000));
    r.max_tokens = max_tokens;
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    r.top_logprobs = 2;
    return r;
  }
  // repetitive: a prompt the n-gram source drafts well (peaked continuation); else random
  // tokens (a flat distribution: many categories).
  void expect_same_third_token_distribution(Engine& plain_e, Engine& spec_e, const char* what, bool repetitive);
  static std::unique_ptr<Engine> engine(int32_t rows, int64_t step_tokens = 64, int32_t max_queue = 64,
                                        std::shared_ptr<DraftSource> draft = nullptr, int32_t depth = 4) {
    EngineOptions o;
    o.draft = std::move(draft);
    o.spec_depth = depth;
    o.n_rows = rows;
    o.n_ctx = 512;
    o.step_tokens = step_tokens;
    o.max_queue = max_queue;
    auto e = Engine::create(*model_, o);
    EXPECT_TRUE(e.is_ok()) << e.message();
    return std::move(e).value();
  }
  static Model* model_;
};
Model* SchedulerTest::model_ = nullptr;

TEST_F(SchedulerTest, BatchedEqualsSoloAndGenerate) {
  // 6 requests of mixed prompt lengths (some longer than the 64-token step budget, so
  // their prefill is chunked while others decode), greedy and sampled.
  std::vector<EngineRequest> reqs;
  const size_t lens[6] = {5, 90, 17, 150, 1, 33};
  for (int i = 0; i < 6; ++i) reqs.push_back(request(lens[i], 100 + i, 12 + i, i % 2 ? 0.9f : 0.0f));
  std::vector<std::vector<int32_t>> solo;
  {
    auto e = engine(1);
    for (const auto& r : reqs) {
      auto sink = std::make_shared<CollectSink>();
      ASSERT_TRUE(e->submit(r, sink).handle);
      ASSERT_TRUE(sink->wait());
      EXPECT_EQ(sink->summary.outcome, Outcome::kLength);
      EXPECT_EQ(sink->summary.n_generated, r.max_tokens);
      solo.push_back(sink->tokens);
    }
  }
  // engine/generate's one-request path agrees with the solo engine run.
  auto cache = testing::make_state(*model_, 1, 512);
  for (int i = 0; i < 2; ++i) {
    GenerateRequest g;
    g.prompt = reqs[i].prompt;
    g.max_tokens = reqs[i].max_tokens;
    g.sampling = reqs[i].sampling;
    auto res = generate(*model_, *cache, 0, g, [](int32_t) { return true; });
    ASSERT_TRUE(res.is_ok()) << res.message();
    EXPECT_EQ(res->tokens, solo[i]) << "request " << i;
  }
  auto e = engine(4);
  std::vector<std::shared_ptr<CollectSink>> sinks;
  for (const auto& r : reqs) {
    sinks.push_back(std::make_shared<CollectSink>());
    ASSERT_TRUE(e->submit(r, sinks.back()).handle);
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(sinks[i]->wait());
    EXPECT_EQ(sinks[i]->tokens, solo[i]) << "request " << i;
    EXPECT_EQ(sinks[i]->summary.n_prompt, static_cast<int64_t>(reqs[i].prompt.size()));
  }
  const EngineStats st = e->stats();
  EXPECT_EQ(st.finished[static_cast<int>(Outcome::kLength)], 6u);
  EXPECT_EQ(st.running_rows, 0);
  EXPECT_GT(st.batch_rows.sum / st.batch_rows.count, 1.5) << "rows were not batched";
  for (float lp : sinks[0]->logprobs) EXPECT_LE(lp, 0.0f);
}

TEST_F(SchedulerTest, CancelAndSinkStopFreeTheRow) {
  auto e = engine(1);
  auto slow = std::make_shared<CollectSink>();
  Submission s = e->submit(request(10, 1, 400, 0.0f), slow);
  ASSERT_TRUE(s.handle);
  auto next = std::make_shared<CollectSink>(3);  // stops itself after 3 tokens
  ASSERT_TRUE(e->submit(request(10, 2, 50, 0.0f), next).handle);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  s.handle->cancel();
  ASSERT_TRUE(slow->wait());
  EXPECT_EQ(slow->summary.outcome, Outcome::kCancelled);
  EXPECT_LT(slow->tokens.size(), 400u);
  ASSERT_TRUE(next->wait());
  EXPECT_EQ(next->summary.outcome, Outcome::kStop);
  EXPECT_EQ(next->tokens.size(), 3u);
}

// A queued request cancelled behind a running one ends at once and gives its queue slot
// up (it does not wait to reach the head): the next request is not refused as busy.
TEST_F(SchedulerTest, CancelledQueuedRequestLeavesTheQueueAtOnce) {
  auto e = engine(1, 64, 1);
  auto running = std::make_shared<CollectSink>();
  EngineRequest r = request(5, 1, 400, 0.0f);
  r.ignore_eos = true;
  Submission a = e->submit(r, running);
  ASSERT_TRUE(a.handle);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // admitted: holds the only row
  auto queued = std::make_shared<CollectSink>();
  Submission b = e->submit(request(5, 2, 10, 0.0f), queued);
  ASSERT_TRUE(b.handle);
  b.handle->cancel();
  ASSERT_TRUE(queued->wait());
  EXPECT_EQ(queued->summary.outcome, Outcome::kCancelled);
  EXPECT_TRUE(queued->tokens.empty());
  EXPECT_FALSE(running->wait(0)) << "the running request must still hold its row";
  auto third = std::make_shared<CollectSink>();
  Submission c = e->submit(request(5, 3, 2, 0.0f), third);
  EXPECT_TRUE(c.ok()) << c.status.message();
  EXPECT_EQ(e->stats().finished[static_cast<int>(Outcome::kCancelled)], 1);
  a.handle->cancel();
  ASSERT_TRUE(running->wait());
  if (c.handle) {
    ASSERT_TRUE(third->wait());
  }
}

TEST_F(SchedulerTest, RefusesInvalidAndBusy) {
  auto e = engine(1, 64, 1);
  auto sink = std::make_shared<CollectSink>();
  EngineRequest bad = request(5, 1, 10, 0.0f);
  bad.prompt[2] = 262144;
  Submission s = e->submit(bad, sink);
  EXPECT_EQ(s.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status.message().find("outside the vocabulary"), std::string::npos) << s.status.message();
  EngineRequest too_long = request(500, 1, 20, 0.0f);
  s = e->submit(too_long, sink);
  EXPECT_EQ(s.status.code(), StatusCode::kContextOverflow);
  EXPECT_EQ(s.param, "max_tokens");
  EngineRequest negative = request(5, 1, -1, 0.0f);
  EXPECT_EQ(e->submit(negative, sink).status.code(), StatusCode::kInvalidArgument);
  EngineRequest lp = request(5, 1, 5, 0.0f);
  lp.top_logprobs = 21;
  EXPECT_EQ(e->submit(lp, sink).param, "top_logprobs");
  EngineRequest empty = request(1, 1, 5, 0.0f);
  empty.prompt.clear();
  EXPECT_EQ(e->submit(empty, sink).param, "prompt");
  // One row + one queue slot: the third long request is refused as busy.
  std::vector<Submission> held;
  std::vector<std::shared_ptr<CollectSink>> sinks;  // sinks[i] belongs to held[i]
  int busy = 0;
  for (int i = 0; i < 4; ++i) {
    auto sink_i = std::make_shared<CollectSink>();
    EngineRequest r = request(5, 10 + i, 300, 0.0f);
    r.ignore_eos = true;  // an early end of sequence would free the row and admit the next
    Submission x = e->submit(r, sink_i);
    if (x.status.code() == StatusCode::kBusy) ++busy;
    if (x.handle) {
      held.push_back(x);
      sinks.push_back(sink_i);  // a refused request never reaches its sink
    }
  }
  EXPECT_GE(busy, 1);
  for (auto& h : held) h.handle->cancel();
  for (size_t i = 0; i < held.size(); ++i) ASSERT_TRUE(sinks[i]->wait());
}

TEST_F(SchedulerTest, ShutdownFinishesEverything) {
  auto sink1 = std::make_shared<CollectSink>();
  auto sink2 = std::make_shared<CollectSink>();
  {
    auto e = engine(1);
    ASSERT_TRUE(e->submit(request(10, 1, 400, 0.0f), sink1).handle);
    ASSERT_TRUE(e->submit(request(10, 2, 400, 0.0f), sink2).handle);
  }
  ASSERT_TRUE(sink1->wait(1));
  ASSERT_TRUE(sink2->wait(1));
  EXPECT_EQ(sink2->summary.outcome, Outcome::kCancelled);
}

// Runs requests through an engine (all submitted at once) and returns each one's tokens.
// Repetitive prompts (so prompt lookup drafts often) of mixed lengths.
std::vector<EngineRequest> repetitive_requests(int n, float temperature, int32_t max_tokens) {
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < n; ++i) {
    std::mt19937 rng(50 + i);
    std::vector<int32_t> phrase;
    for (int k = 0; k < 5 + i; ++k) phrase.push_back(1000 + static_cast<int32_t>(rng() % 30000));
    EngineRequest r;
    r.prompt = {2};
    while (r.prompt.size() < static_cast<size_t>(20 + 9 * i)) r.prompt.insert(r.prompt.end(), phrase.begin(), phrase.end());
    r.max_tokens = max_tokens + i;
    r.sampling.temperature = temperature;
    r.sampling.seed = 900 + i;
    r.top_logprobs = 1;
    reqs.push_back(r);
  }
  return reqs;
}

TEST_F(SchedulerTest, SpeculativeNgramEqualsPlainAtB1AndB4) {
  for (float temperature : {0.0f, 0.9f}) {
    const auto reqs = repetitive_requests(4, temperature, 20);
    std::vector<std::vector<int32_t>> plain;
    {
      auto e = engine(1);
      for (const auto& r : reqs) plain.push_back(run_all(*e, {r})[0]);
    }
    std::vector<RequestSummary> sums;
    {
      auto e = engine(1, 64, 64, make_ngram_draft(), 5);
      std::vector<std::vector<int32_t>> b1;
      for (const auto& r : reqs) b1.push_back(run_all(*e, {r}, &sums)[0]);
      EXPECT_EQ(b1, plain) << "B=1, temperature " << temperature;
    }
    auto e4 = engine(4, 64, 64, make_ngram_draft(), 5);
    sums.clear();
    EXPECT_EQ(run_all(*e4, reqs, &sums), plain) << "B=4, temperature " << temperature;
    int64_t drafted = 0, accepted = 0;
    for (const auto& s : sums) drafted += s.drafted, accepted += s.accepted;
    EXPECT_GT(accepted, 0) << "no draft accepted at temperature " << temperature;
    std::printf("[spec ngram T=%.1f] B=4: %lld drafted, %lld accepted\n", temperature,
                static_cast<long long>(drafted), static_cast<long long>(accepted));
    // Opting out runs plain decoding.
    EngineRequest r = reqs[0];
    r.speculative = false;
    std::vector<RequestSummary> one;
    EXPECT_EQ(run_all(*e4, {r}, &one)[0], plain[0]);
    EXPECT_EQ(one[0].drafted, 0);
  }
}

TEST_F(SchedulerTest, SpeculativeStopsInsideAcceptedDraftsExactly) {
  // max_tokens and a sink stop that land inside an accepted run of drafts.
  auto reqs = repetitive_requests(1, 0.0f, 0);
  auto plain_e = engine(1);
  EngineRequest r = reqs[0];
  r.max_tokens = 40;
  const auto plain = run_all(*plain_e, {r})[0];
  auto e = engine(1, 64, 64, make_ngram_draft(), 8);
  for (int32_t n : {1, 2, 3, 7, 11}) {
    EngineRequest q = reqs[0];
    q.max_tokens = n;
    std::vector<RequestSummary> sums;
    const auto got = run_all(*e, {q}, &sums)[0];
    EXPECT_EQ(got, std::vector<int32_t>(plain.begin(), plain.begin() + n)) << "max_tokens " << n;
    EXPECT_EQ(sums[0].n_generated, n);
    EXPECT_EQ(sums[0].outcome, Outcome::kLength);
    auto stopper = std::make_shared<CollectSink>(n);
    EngineRequest q2 = reqs[0];
    q2.max_tokens = 40;
    ASSERT_TRUE(e->submit(q2, stopper).handle);
    ASSERT_TRUE(stopper->wait(600));
    EXPECT_EQ(stopper->tokens, std::vector<int32_t>(plain.begin(), plain.begin() + n)) << "sink stop " << n;
    EXPECT_EQ(stopper->summary.n_generated, n);
    EXPECT_EQ(stopper->summary.outcome, Outcome::kStop);
  }
}

// Two-sample chi-square on the 3rd sampled token: plain sampling with seeds 1..N vs a
// speculative engine with seeds N+1..2N, temperature 1. Independent seeds, so this checks
// the distribution, not the per-seed identity (SpeculativeNgramEqualsPlainAtB1AndB4 checks
// that for exact match). Threshold: the 0.999 quantile of chi-square with the pooled
// categories' degrees of freedom (Wilson-Hilferty).
void SchedulerTest::expect_same_third_token_distribution(Engine& plain_e, Engine& spec_e, const char* what,
                                                         bool repetitive) {
  EngineRequest base = repetitive ? repetitive_requests(1, 1.0f, 3)[0] : request(16, 4242, 3, 1.0f);
  base.prompt.resize(16);
  base.sampling.top_k = repetitive ? 0 : 5;  // random prompts: 5 categories, not hundreds of rare ones
  expect_same_third_token_distribution_of(base, plain_e, spec_e, what);
}

TEST_F(SchedulerTest, SpeculativeSamplingDistributionMatchesPlain) {
  // n-gram drafts (exact-match acceptance), accepted often on the repetitive prompt.
  auto plain_e = engine(8, 256, 320);
  auto spec_e = engine(8, 256, 320, make_ngram_draft(), 4);
  expect_same_third_token_distribution(*plain_e, *spec_e, "ngram exact", true);
}

TEST_F(SchedulerTest, RejectionSamplingWithDraftModelMatchesPlain) {
  // The model as its own sampled draft, rejection-sampling acceptance.
  auto dm = load_model(testing::default_model_path());
  ASSERT_TRUE(dm.is_ok()) << dm.message();
  auto d = make_model_draft(std::move(dm).value(), 512);
  ASSERT_TRUE(d.is_ok()) << d.message();
  auto plain_e = engine(8, 256, 320);
  EngineOptions o;
  o.draft = std::shared_ptr<DraftSource>(std::move(d).value());
  o.spec_depth = 3;
  o.spec_rejection = true;
  o.n_rows = 8;
  o.n_ctx = 512;
  o.step_tokens = 256;
  o.max_queue = 320;
  auto spec_e = Engine::create(*model_, o);
  ASSERT_TRUE(spec_e.is_ok()) << spec_e.message();
  expect_same_third_token_distribution(*plain_e, **spec_e, "draft-model rejection", false);
  // p == q bit for bit (batch invariance), so every draft must be kept.
  EXPECT_GE((*spec_e)->stats().accepted, (*spec_e)->stats().drafted * 95 / 100) << "a model drafting for itself";
}

TEST(SpeculativeDraftModel, QwenPairEqualsPlainAtB1AndB4) {
  const std::string dir = std::filesystem::path(testing::default_model_path()).parent_path().string();
  const std::string target = dir + "/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";
  const std::string draft = dir + "/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
  if (!std::filesystem::exists(target) || !std::filesystem::exists(draft))
    GTEST_SKIP() << "Qwen pair not found in " << dir << " (specula pull qwen2.5-coder-1.5b qwen2.5-coder-0.5b)";
  auto tm = load_model(target);
  ASSERT_TRUE(tm.is_ok()) << tm.message();
  ModelOptions mo;
  mo.pool = (*tm)->pool();
  // Token ids of four short code prompts (Qwen2.5 BPE, from llama.cpp's tokenizer).
  const std::vector<std::vector<int32_t>> prompts = {
      {750, 3974, 6860, 10939, 1648},          // "def quicksort(arr):"
      {1040, 14284, 314},                      // "class Stack {"
      {474, 2643, 198, 750, 1887, 368},        // "import os\ndef main()"
      {322, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
  };
  std::vector<EngineRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EngineRequest r;
    r.prompt = prompts[i];
    r.max_tokens = 16;
    r.sampling.temperature = i == 3 ? 0.7f : 0.0f;
    r.sampling.seed = 11 + i;
    reqs.push_back(r);
  }
  auto make = [&](int32_t rows, bool spec) {
    EngineOptions o;
    o.n_rows = rows;
    o.n_ctx = 256;
    o.step_tokens = 64;
    o.spec_depth = 4;
    if (spec) {
      auto dm = load_model(draft, mo);
      EXPECT_TRUE(dm.is_ok()) << dm.message();
      EXPECT_TRUE(check_same_vocabulary(**tm, **dm).is_ok());
      auto d = make_model_draft(std::move(dm).value(), 256);
      EXPECT_TRUE(d.is_ok());
      o.draft = std::move(d).value();
    }
    auto e = Engine::create(**tm, o);
    EXPECT_TRUE(e.is_ok()) << e.message();
    return std::move(e).value();
  };
  std::vector<std::vector<int32_t>> plain;
  {
    auto e = make(1, false);
    for (const auto& r : reqs) plain.push_back(run_all(*e, {r})[0]);
  }
  {
    auto e = make(1, true);
    std::vector<std::vector<int32_t>> b1;
    for (const auto& r : reqs) b1.push_back(run_all(*e, {r})[0]);
    EXPECT_EQ(b1, plain) << "B=1";
  }
  auto e4 = make(4, true);
  std::vector<RequestSummary> sums;
  EXPECT_EQ(run_all(*e4, reqs, &sums), plain) << "B=4";
  int64_t drafted = 0, accepted = 0;
  for (const auto& s : sums) drafted += s.drafted, accepted += s.accepted;
  std::printf("[spec draft-model] B=4: %lld drafted, %lld accepted\n", static_cast<long long>(drafted),
              static_cast<long long>(accepted));
  EXPECT_GT(accepted, 0);
}

// max_tokens 0: the prompt is prefilled (its prompt logprobs computed when asked for) and
// the request ends with kLength, having sampled nothing; the prompt's logprobs equal those a
// generating request with the same prompt gets.
TEST_F(SchedulerTest, MaxTokensZeroPrefillsOnlyAndScoresThePrompt) {
  struct PromptSink : CollectSink {
    void on_prompt_logprobs(std::span<const TokenEvent> events) override {
      for (const TokenEvent& e : events) prompt.push_back(e.logprob);
    }
    std::vector<float> prompt;
  };
  auto e = engine(2);
  EngineRequest score = request(40, 7, 0, 0.0f);
  score.prompt_logprobs = 1;
  EngineRequest gen = request(40, 7, 3, 0.0f);
  gen.prompt_logprobs = 1;
  auto s1 = std::make_shared<PromptSink>();
  auto s2 = std::make_shared<PromptSink>();
  ASSERT_TRUE(e->submit(score, s1).ok());
  ASSERT_TRUE(e->submit(gen, s2).ok());
  ASSERT_TRUE(s1->wait());
  ASSERT_TRUE(s2->wait());
  EXPECT_EQ(s1->summary.outcome, Outcome::kLength);
  EXPECT_EQ(s1->summary.n_generated, 0);
  EXPECT_TRUE(s1->tokens.empty());
  EXPECT_EQ(s1->prompt.size(), score.prompt.size() - 1);
  EXPECT_EQ(s1->prompt, s2->prompt);
  EXPECT_EQ(s2->tokens.size(), 3u);
}

}  // namespace
}  // namespace specula
