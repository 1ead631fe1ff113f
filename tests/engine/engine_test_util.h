// tests/engine/engine_test_util.h — helpers shared by the engine tests: a sink that
// collects a request's tokens and waits for its end, and running a list of requests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "engine/scheduler.h"

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
    EXPECT_TRUE(s.handle) << s.message;
  }
  std::vector<std::vector<int32_t>> out;
  for (auto& s : sinks) {
    EXPECT_TRUE(s->wait(600));
    out.push_back(s->tokens);
    if (sums) sums->push_back(s->summary);
  }
  return out;
}


}  // namespace specula
