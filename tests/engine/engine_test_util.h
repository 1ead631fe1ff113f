// tests/engine/engine_test_util.h — helpers shared by the engine tests: a sink that
// collects a request's tokens and waits for its end, and running a list of requests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <vector>

#include "engine/engine.h"

namespace specula {

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

inline std::vector<std::vector<int32_t>> run_all(Engine& e, const std::vector<EngineRequest>& reqs,
                                          std::vector<RequestSummary>* sums = nullptr) {
  std::vector<std::shared_ptr<CollectSink>> sinks;
  for (const auto& r : reqs) {
    sinks.push_back(std::make_shared<CollectSink>());
    Submission s = e.submit(r, sinks.back());
    EXPECT_TRUE(s.handle) << s.status.message();
  }
  std::vector<std::vector<int32_t>> out;
  for (auto& s : sinks) {
    EXPECT_TRUE(s->wait(600));
    out.push_back(s->tokens);
    if (sums) sums->push_back(s->summary);
  }
  return out;
}

// Four requests whose prompts repeat a random phrase (so an n-gram draft source has
// something to propose), over ids [2, V).
inline std::vector<EngineRequest> repeating_requests(int32_t V, int max_tokens) {
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < 4; ++i) {
    std::mt19937 rng(30 + i);
    std::vector<int32_t> phrase;
    for (int k = 0; k < 5 + i; ++k) phrase.push_back(2 + static_cast<int32_t>(rng() % (V - 2)));
    EngineRequest r;
    while (r.prompt.size() < static_cast<size_t>(40 + 10 * i)) r.prompt.insert(r.prompt.end(), phrase.begin(), phrase.end());
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    reqs.push_back(r);
  }
  return reqs;
}

// An engine of `rows` rows (256 positions each, 64-token steps) speculating `depth` tokens
// deep with `draft` (none: plain decoding).
inline std::unique_ptr<Engine> speculative_engine(Model& m, int32_t rows, std::shared_ptr<DraftSource> draft,
                                                  int depth = 4) {
  EngineOptions o;
  o.n_rows = rows;
  o.n_ctx = 256;
  o.step_tokens = 64;
  o.spec_depth = depth;
  o.draft = std::move(draft);
  auto e = Engine::create(m, o);
  EXPECT_TRUE(e.is_ok()) << e.message();
  return e.is_ok() ? std::move(e).value() : nullptr;
}

// Each request alone on `e` (one after the other).
inline std::vector<std::vector<int32_t>> run_each(Engine& e, const std::vector<EngineRequest>& reqs) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& r : reqs) out.push_back(run_all(e, {r})[0]);
  return out;
}

}  // namespace specula
