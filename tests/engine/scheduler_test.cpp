// Tests for engine/scheduler on the real default model: requests batched together produce
// exactly their solo tokens (greedy and seeded sampling), equal engine/generate's
// single-request path, cancellation frees the row, refusals (invalid, queue full), stop by
// the sink, and chunked prefill alongside decoding rows.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "engine/generate.h"
#include "engine/scheduler.h"
#include "../test_util.h"

namespace specula {
namespace {

class CollectSink : public RequestSink {
 public:
  explicit CollectSink(int stop_after = -1) : stop_after_(stop_after) {}
  bool on_tokens(std::span<const TokenEvent> events) override {
    for (const TokenEvent& e : events) {
      tokens.push_back(e.id);
      logprobs.push_back(e.logprob);
    }
    return stop_after_ < 0 || static_cast<int>(tokens.size()) < stop_after_;
  }
  void on_finish(const RequestSummary& s) override {
    std::lock_guard<std::mutex> lock(mu_);
    summary = s;
    done_ = true;
    cv_.notify_all();
  }
  bool wait(double seconds = 120) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return done_; });
  }
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  RequestSummary summary;

 private:
  int stop_after_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

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
  static std::unique_ptr<Engine> engine(int32_t rows, int64_t step_tokens = 64, int32_t max_queue = 64) {
    EngineOptions o;
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
  auto cache = model_->new_cache(1, 512);
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

TEST_F(SchedulerTest, RefusesInvalidAndBusy) {
  auto e = engine(1, 64, 1);
  auto sink = std::make_shared<CollectSink>();
  EngineRequest bad = request(5, 1, 10, 0.0f);
  bad.prompt[2] = 262144;
  Submission s = e->submit(bad, sink);
  EXPECT_EQ(s.error, SubmitError::kInvalid);
  EXPECT_NE(s.message.find("outside the vocabulary"), std::string::npos) << s.message;
  EngineRequest too_long = request(500, 1, 20, 0.0f);
  s = e->submit(too_long, sink);
  EXPECT_EQ(s.error, SubmitError::kInvalid);
  EXPECT_EQ(s.param, "max_tokens");
  EngineRequest no_tokens = request(5, 1, 0, 0.0f);
  EXPECT_EQ(e->submit(no_tokens, sink).error, SubmitError::kInvalid);
  EngineRequest lp = request(5, 1, 5, 0.0f);
  lp.top_logprobs = 21;
  EXPECT_EQ(e->submit(lp, sink).param, "top_logprobs");
  EngineRequest empty = request(1, 1, 5, 0.0f);
  empty.prompt.clear();
  EXPECT_EQ(e->submit(empty, sink).param, "prompt");
  // One row + one queue slot: the third long request is refused as busy.
  std::vector<Submission> held;
  std::vector<std::shared_ptr<CollectSink>> sinks;
  int busy = 0;
  for (int i = 0; i < 4; ++i) {
    sinks.push_back(std::make_shared<CollectSink>());
    Submission x = e->submit(request(5, 10 + i, 300, 0.0f), sinks.back());
    if (x.error == SubmitError::kBusy) ++busy;
    if (x.handle) held.push_back(x);
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

}  // namespace
}  // namespace specula
