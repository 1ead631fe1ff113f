// Engine tests with a prompt cache on real models: a response served from the cache — a
// repeated prompt, a chat continuation that resends the previous answer, a prompt sharing
// only a prefix, after a restart from the disk tier — is token for token the response
// computed without it (greedy and seeded sampling, f16 and q8_0 caches, with and without
// speculation; Gemma 3's sliding-window rings and the hybrid model's recurrent state use
// checkpoints), and an unrelated request gets no cached tokens.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "engine/engine.h"
#include "decoding/draft.h"
#include "state/prompt_cache.h"
#include "../test_util.h"
#include "engine_test_util.h"

namespace specula {
namespace {

std::vector<int32_t> words(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(1000 + static_cast<int32_t>(rng() % 30000));
  return t;
}

EngineRequest req(std::vector<int32_t> prompt, int32_t max_tokens, float temperature, uint64_t seed) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return r;
}

std::unique_ptr<Engine> engine(Model& m, const CacheOptions& c, std::shared_ptr<PromptCache> pc,
                               std::shared_ptr<DraftSource> draft = nullptr) {
  EngineOptions o;
  o.n_rows = 2;
  o.n_ctx = 2048;
  o.step_tokens = 256;
  o.cache = c;
  o.prompt_cache = std::move(pc);
  o.cache_checkpoint_every = 256;
  o.draft = std::move(draft);
  auto e = Engine::create(m, o);
  EXPECT_TRUE(e.is_ok()) << e.message();
  return std::move(e).value();
}

std::shared_ptr<PromptCache> cache(const std::string& dir = "") {
  PromptCacheOptions po;
  po.ram_bytes = int64_t{1} << 30;
  po.dir = dir;
  po.fingerprint = "test";
  return std::shared_ptr<PromptCache>(PromptCache::create(po).value());
}

// Runs a conversation of requests one after another through `e`; returns tokens and
// summaries. Request i+1 of a chat resends request i's prompt, its answer and new words.
struct Turns {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<RequestSummary> sums;
};
Turns conversation(Engine& e, int64_t first_len, float temperature) {
  Turns t;
  const auto p1 = [&] { auto w = words(static_cast<int>(first_len), 5); w.insert(w.begin(), 2); return w; }();
  std::vector<EngineRequest> reqs;
  // 1: a long prompt; 2: the chat continuation (filled in below); 3: the same prompt as 1
  // with a sampled answer; 4: unrelated; 5: the first 100 tokens of 1, then other words.
  auto run = [&](const EngineRequest& r) {
    std::vector<RequestSummary> s;
    t.tokens.push_back(run_all(e, {r}, &s)[0]);
    t.sums.push_back(s[0]);
  };
  run(req(p1, 16, temperature, 11));
  auto p2 = p1;
  p2.insert(p2.end(), t.tokens[0].begin(), t.tokens[0].end());
  const auto more = words(30, 6);
  p2.insert(p2.end(), more.begin(), more.end());
  run(req(p2, 16, temperature, 12));
  run(req(p1, 16, 0.9f, 13));
  auto p4 = words(150, 7);
  p4.insert(p4.begin(), 2);
  run(req(p4, 16, temperature, 14));
  auto p5 = std::vector<int32_t>(p1.begin(), p1.begin() + 100);
  const auto tail = words(60, 8);
  p5.insert(p5.end(), tail.begin(), tail.end());
  run(req(p5, 16, temperature, 15));
  return t;
}

class PromptCacheEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::default_model_present()) GTEST_SKIP() << "model not found: " << testing::default_model_path();
    auto m = load_model(testing::default_model_path());
    ASSERT_TRUE(m.is_ok());
    model_ = std::move(m).value();
  }
  std::unique_ptr<Model> model_;
};

TEST_F(PromptCacheEngineTest, CachedResponsesEqualColdOnes) {
  // 300 tokens stay inside Gemma's 512-token window; 700 wrap its rings (checkpoints).
  for (int64_t len : {300, 700}) {
    for (const CacheOptions& c :
         len == 300 ? std::vector<CacheOptions>{{}} : std::vector<CacheOptions>{{"q8_0", "q8_0", 0}}) {
      auto cold_e = engine(*model_, c, nullptr);
      const Turns cold = conversation(*cold_e, len, 0.0f);
      auto warm_e = engine(*model_, c, cache());
      const Turns warm = conversation(*warm_e, len, 0.0f);
      const std::string what = std::to_string(len) + " tokens, " + c.type_k;
      for (size_t i = 0; i < cold.tokens.size(); ++i) {
        EXPECT_EQ(warm.tokens[i], cold.tokens[i]) << what << ", request " << i + 1;
        EXPECT_EQ(cold.sums[i].cached_tokens, 0);
      }
      const int64_t n1 = warm.sums[0].n_prompt;
      EXPECT_EQ(warm.sums[0].cached_tokens, 0) << what;
      EXPECT_EQ(warm.sums[1].cached_tokens, n1 + 15) << what << ": the answer is reused";
      EXPECT_EQ(warm.sums[2].cached_tokens, n1 - 1) << what << ": the prompt is reused";
      EXPECT_LE(warm.sums[3].cached_tokens, 1) << what << ": unrelated (only BOS in common)";
      // A shared prefix of 100: full layers cut any entry back; rings that wrapped cannot,
      // but the checkpoint at 256 prompt tokens has not wrapped Gemma's 512-token window.
      EXPECT_EQ(warm.sums[4].cached_tokens, 100) << what;
      std::printf("[prompt cache] %s: cached %lld %lld %lld %lld %lld of %lld %lld %lld %lld %lld prompt tokens\n",
                  what.c_str(), (long long)warm.sums[0].cached_tokens, (long long)warm.sums[1].cached_tokens,
                  (long long)warm.sums[2].cached_tokens, (long long)warm.sums[3].cached_tokens,
                  (long long)warm.sums[4].cached_tokens, (long long)warm.sums[0].n_prompt, (long long)warm.sums[1].n_prompt,
                  (long long)warm.sums[2].n_prompt, (long long)warm.sums[3].n_prompt, (long long)warm.sums[4].n_prompt);
    }
  }
}

TEST_F(PromptCacheEngineTest, WithSpeculationAndAfterARestart) {
  const std::string dir = (std::filesystem::temp_directory_path() / "specula_pc_engine").string();
  std::filesystem::remove_all(dir);
  auto cold_e = engine(*model_, {}, nullptr, make_ngram_draft());
  const Turns cold = conversation(*cold_e, 600, 0.0f);
  {
    auto pc = cache(dir);
    auto e = engine(*model_, {}, pc, make_ngram_draft());
    const Turns warm = conversation(*e, 600, 0.0f);
    EXPECT_EQ(warm.tokens, cold.tokens) << "speculative + cache";
    ASSERT_TRUE(pc->flush().is_ok());
    EXPECT_GT(pc->stats().disk_entries, 3);
  }
  // A new cache on the same folder (a restarted server): the first request is served from
  // the disk tier.
  auto pc = cache(dir);
  auto e = engine(*model_, {}, pc);
  const Turns again = conversation(*e, 600, 0.0f);
  EXPECT_EQ(again.tokens, cold.tokens) << "after restart";
  EXPECT_GT(again.sums[0].cached_tokens, 500);
  EXPECT_GT(pc->stats().disk_reads, 0u);
  EXPECT_EQ(pc->stats().disk_rejected, 0u);
}

// A sink that stops listening (and cancels its request) after n tokens: the client of an
// interrupted generation.
class InterruptSink : public CollectSink {
 public:
  explicit InterruptSink(size_t n) : n_(n) {}
  bool on_tokens(std::span<const TokenEvent> events) override {
    for (const TokenEvent& e : events) {
      tokens.push_back(e.id);
      logprobs.push_back(e.logprob);
    }
    if (tokens.size() >= n_ && handle) handle->cancel();
    return true;
  }
  std::shared_ptr<RequestHandle> handle;

 private:
  size_t n_;
};

TEST_F(PromptCacheEngineTest, ResumesAnInterruptedGenerationExactly) {
  const std::string dir = (std::filesystem::temp_directory_path() / "specula_pc_resume").string();
  for (float temperature : {0.0f, 0.8f}) {
    std::filesystem::remove_all(dir);
    auto prompt = words(200, 31);
    prompt.insert(prompt.begin(), 2);
    EngineRequest r = req(prompt, 40, temperature, 77);
    r.top_logprobs = 1;
    r.resume_key = "test";
    auto plain_e = engine(*model_, {}, nullptr);
    // An engine that checkpoints its generations into `pc` every 8 tokens.
    const auto resuming_engine = [&](std::shared_ptr<PromptCache> pc) {
      EngineOptions o;
      o.n_rows = 2;
      o.n_ctx = 2048;
      o.prompt_cache = std::move(pc);
      o.generation_checkpoint = 8;
      return std::move(Engine::create(*model_, o)).value();
    };
    auto sink0 = std::make_shared<CollectSink>();
    ASSERT_TRUE(plain_e->submit(r, sink0).handle);
    ASSERT_TRUE(sink0->wait());
    {
      auto pc = cache(dir);
      auto e = resuming_engine(pc);
      auto sink = std::make_shared<InterruptSink>(21);
      auto sub = e->submit(r, sink);
      ASSERT_TRUE(sub.handle);
      sink->handle = sub.handle;
      ASSERT_TRUE(sink->wait());
      EXPECT_EQ(sink->summary.outcome, Outcome::kCancelled);
      EXPECT_GE(sink->tokens.size(), 21u);
      EXPECT_LT(sink->tokens.size(), 40u);
      EXPECT_EQ(pc->stats().checkpoints, 1);
      ASSERT_TRUE(pc->flush().is_ok());
    }
    // "After a restart": a new cache on the same folder, a new engine, the same request.
    auto pc = cache(dir);
    EXPECT_EQ(pc->stats().checkpoints, 1);
    auto e = resuming_engine(pc);
    auto sink = std::make_shared<CollectSink>();
    ASSERT_TRUE(e->submit(r, sink).handle);
    ASSERT_TRUE(sink->wait());
    EXPECT_EQ(sink->tokens, sink0->tokens) << "T=" << temperature;
    EXPECT_EQ(sink->logprobs, sink0->logprobs) << "T=" << temperature;
    EXPECT_EQ(sink->summary.n_generated, 40);
    EXPECT_EQ(sink->summary.cached_tokens, static_cast<int64_t>(prompt.size())) << "resumed, not recomputed";
    EXPECT_NE(sink->summary.plan.reason.find("resumed"), std::string::npos) << sink->summary.plan.reason;
    EXPECT_EQ(pc->stats().checkpoints, 0) << "a finished generation drops its checkpoint";
  }
}

}  // namespace
}  // namespace specula
