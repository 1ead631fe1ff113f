// tests/engine/engine_test_util.h — helpers shared by the engine tests: a sink that
// collects a request's tokens and waits for its end, and running a list of requests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <map>
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

// Speculative sampling is lossless in distribution: 160 seeds of `base` (temperature 1,
// top_p 1, min_p 0; its top_k kept) on each engine, the histograms of the third generated
// token compared by a chi-squared test (categories with fewer than 10 draws pooled; 0.999
// critical value by Wilson-Hilferty); spec_e must have accepted drafts.
inline void expect_same_third_token_distribution_of(EngineRequest base, Engine& plain_e, Engine& spec_e,
                                                    const char* what) {
  const int N = 160;
  base.top_logprobs = -1;
  base.sampling.temperature = 1.0f;
  base.sampling.top_p = 1.0f;
  base.sampling.min_p = 0.0f;
  auto count = [&](Engine& e, uint64_t seed0) {
    std::vector<EngineRequest> reqs;
    for (int i = 0; i < N; ++i) {
      EngineRequest r = base;
      r.sampling.seed = seed0 + i;
      reqs.push_back(r);
    }
    std::map<int32_t, int> hist;
    for (const auto& t : run_all(e, reqs)) hist[t.size() >= 3 ? t[2] : -1]++;
    return hist;
  };
  auto a = count(plain_e, 1), b = count(spec_e, 100001);
  // Pool categories with expected count < 5 into one.
  std::map<int32_t, std::pair<int, int>> cells;
  for (auto& [k, v] : a) cells[k].first += v;
  for (auto& [k, v] : b) cells[k].second += v;
  std::vector<std::pair<double, double>> bins;
  std::pair<double, double> rare{0, 0};
  for (auto& [k, v] : cells) {
    if (v.first + v.second < 10) {
      rare.first += v.first;
      rare.second += v.second;
    } else {
      bins.push_back({static_cast<double>(v.first), static_cast<double>(v.second)});
    }
  }
  if (rare.first + rare.second > 0) bins.push_back(rare);
  double chi2 = 0;
  for (auto [x, y] : bins) chi2 += (x - y) * (x - y) / (x + y);  // equal sample sizes
  const double df = std::max<double>(1, static_cast<double>(bins.size()) - 1);
  const double z = 3.090;  // 0.999 normal quantile
  const double crit = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
  std::printf("[spec chi2 %s] %zu categories, chi2 %.2f, 0.999 critical %.2f, accepted %llu of %llu drafts\n", what,
              bins.size(), chi2, crit, static_cast<unsigned long long>(spec_e.stats().accepted),
              static_cast<unsigned long long>(spec_e.stats().drafted));
  EXPECT_LT(chi2, crit) << what;
  EXPECT_GT(spec_e.stats().accepted, 0u) << what;
}

// Each request alone on `e` (one after the other).
inline std::vector<std::vector<int32_t>> run_each(Engine& e, const std::vector<EngineRequest>& reqs) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& r : reqs) out.push_back(run_all(e, {r})[0]);
  return out;
}

}  // namespace specula
