// Gemma 3 270M against llama.cpp (tests/fixtures/gemma3_reference.json, made by
// tools/make_gemma3_fixtures.py with llama-cpp-python): greedy continuations token for
// token, and teacher-forced logits (top-1 agreement, max |Δlogit| over the recorded ids).
//
// Tolerance, measured (see docs/BENCHMARKS.md "Accuracy"): both engines quantize
// activations to 8 bits, so each is ~0.3 logit (mean) from a float64 evaluation of the
// same weights, and llama.cpp does not even agree with itself (its incremental greedy and
// its one-pass argmax differ at margins under 0.1). A greedy continuation must equal
// llama.cpp's until the first position where llama.cpp's own top-2 margin is below
// kNearTie; past such a split the texts legitimately differ, and comparison stops there.
constexpr double kNearTie = 0.25;
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "kernels/kernels.h"
#include "model/model.h"
#include "../test_util.h"

namespace specula {
namespace {

using nlohmann::json;

json load_fixture() {
  std::ifstream in(std::string(SPECULA_FIXTURES_DIR) + "/gemma3_reference.json");
  return json::parse(in);
}

class Gemma3Reference : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::default_model_present())
      GTEST_SKIP() << "model not found: " << testing::default_model_path() << " (set SPECULA_MODELS)";
    auto m = load_model(testing::default_model_path());
    ASSERT_TRUE(m.is_ok()) << m.message();
    model_ = std::move(m).value();
    fx_ = load_fixture();
  }
  std::unique_ptr<Model> model_;
  json fx_;
};

int32_t argmax(const std::vector<float>& v) {
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[best]) best = static_cast<int32_t>(i);
  return best;
}

TEST_F(Gemma3Reference, GreedyContinuationsEqualLlamaCpp) {
  const int64_t V = model_->info().n_vocab, E = model_->info().n_embd;
  int cases = 0, total = 0;
  for (const auto& c : fx_["cases"]) {
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto expect = c["greedy_ids"].get<std::vector<int32_t>>();
    auto cache = testing::make_state(*model_, 1, 2048);
    ASSERT_TRUE(cache.is_ok());
    Tensor hidden;
    const int32_t rows[1] = {0};
    ASSERT_TRUE(model_->forward(Batch{1, static_cast<int64_t>(prompt.size()), prompt.data(), rows}, *cache, hidden).is_ok());
    std::vector<float> logits(static_cast<size_t>(V));
    model_->project_logits(hidden.data() + (hidden.dim(0) - 1) * E, 1, logits.data());
    std::vector<int32_t> got;
    for (size_t k = 0; k < expect.size(); ++k) {
      int32_t tok = argmax(logits);
      got.push_back(tok);
      ASSERT_TRUE(model_->forward(Batch{1, 1, &tok, rows}, *cache, hidden).is_ok());
      model_->project_logits(hidden.data(), 1, logits.data());
    }
    size_t first_diff = expect.size();
    for (size_t k = 0; k < expect.size(); ++k)
      if (got[k] != expect[k]) {
        first_diff = k;
        break;
      }
    double margin = 1e9;
    if (first_diff < expect.size()) {
      const auto& t = c["teacher"];
      const int64_t r = static_cast<int64_t>(prompt.size()) - 1 + static_cast<int64_t>(first_diff) - t["first_pos"].get<int64_t>();
      margin = t["top_logits"][r][0].get<double>() - t["top_logits"][r][1].get<double>();
    }
    std::cout << "[reference] greedy '" << c["name"].get<std::string>() << "': " << expect.size() << " tokens, "
              << (first_diff == expect.size()
                      ? std::string("all equal to llama.cpp")
                      : "first difference at token " + std::to_string(first_diff) + " (specula " +
                            std::to_string(got[first_diff]) + ", llama.cpp " + std::to_string(expect[first_diff]) +
                            ", llama.cpp's own top-2 margin " + std::to_string(margin) + ")")
              << "\n";
    if (first_diff < expect.size()) {
      EXPECT_LT(margin, kNearTie) << "case " << c["name"] << " diverges at token " << first_diff
                                  << " where llama.cpp is not near a tie";
    } else {
      ++cases;
    }
    total += static_cast<int>(first_diff);
  }
  std::cout << "[reference] greedy: " << cases << " of " << fx_["cases"].size() << " continuations fully equal, "
            << total << " tokens equal before any near-tie split\n";
  // Every split above must be at one of llama.cpp's near ties (the real criterion); how
  // many prompts run to the end without one depends on the tier's summation order (on
  // one AVX-512 machine: avx2 3 of 7 / 244 tokens, the packed-weight tiers 2 of 7 / 172;
  // the teacher-forced test below bounds the logits themselves).
  const bool packed_tier = kernels::active().of(DType::Q4_K).gemm_packed != nullptr;
  EXPECT_GE(cases, packed_tier ? 2 : 3);
  EXPECT_GE(total, packed_tier ? 5 * 64 / 2 : 3 * 64);
}

TEST_F(Gemma3Reference, TeacherForcedLogitsAgreeWithLlamaCpp) {
  const int64_t V = model_->info().n_vocab, E = model_->info().n_embd;
  const auto fixed = fx_["fixed_ids"].get<std::vector<int32_t>>();
  int64_t rows_total = 0, top1_agree = 0;
  double max_abs = 0, sum_abs = 0;
  int64_t n_abs = 0, near_ties = 0;
  for (const auto& c : fx_["cases"]) {
    auto ids = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto g = c["greedy_ids"].get<std::vector<int32_t>>();
    ids.insert(ids.end(), g.begin(), g.end());
    const auto& t = c["teacher"];
    const int64_t first = t["first_pos"].get<int64_t>();
    auto cache = testing::make_state(*model_, 1, 2048);
    Tensor hidden;
    const int32_t rows[1] = {0};
    ASSERT_TRUE(model_->forward(Batch{1, static_cast<int64_t>(ids.size()), ids.data(), rows}, *cache, hidden).is_ok());
    const int64_t n = static_cast<int64_t>(t["argmax"].size());
    ASSERT_EQ(first + n, static_cast<int64_t>(ids.size()));
    std::vector<float> logits(static_cast<size_t>(n * V));
    model_->project_logits(hidden.data() + first * E, n, logits.data());
    double case_max = 0;
    int64_t case_agree = 0;
    for (int64_t r = 0; r < n; ++r) {
      const float* l = logits.data() + r * V;
      int32_t best = 0;
      for (int64_t i = 1; i < V; ++i)
        if (l[i] > l[best]) best = static_cast<int32_t>(i);
      const int32_t ref_best = t["argmax"][r].get<int32_t>();
      // A near-tie in the reference (top two within 0.01) may go either way.
      const auto& tl = t["top_logits"][r];
      const bool tie = tl.size() > 1 && tl[0].get<double>() - tl[1].get<double>() < kNearTie;
      if (best == ref_best) {
        ++case_agree;
      } else if (tie && best == t["top_ids"][r][1].get<int32_t>()) {
        ++case_agree;
        ++near_ties;
      } else {
        std::cout << "[reference]   row " << r << ": specula top-1 " << best << " (" << l[best] << "), llama.cpp "
                  << ref_best << " (" << tl[0].get<double>() << ", specula " << l[ref_best] << "), llama.cpp 2nd "
                  << t["top_ids"][r][1].get<int32_t>() << " (" << tl[1].get<double>() << ")\n";
      }
      auto cmp = [&](int32_t id, double ref) {
        const double d = std::fabs(double(l[id]) - ref);
        if (d > case_max && d > 2.0)
          std::cout << "[reference]   row " << r << " id " << id << ": specula " << l[id] << ", llama.cpp " << ref << "\n";
        case_max = std::max(case_max, d);
        sum_abs += d;
        ++n_abs;
      };
      for (size_t j = 0; j < t["top_ids"][r].size(); ++j) cmp(t["top_ids"][r][j].get<int32_t>(), t["top_logits"][r][j].get<double>());
      for (size_t j = 0; j < fixed.size(); ++j) cmp(fixed[j], t["fixed_logits"][r][j].get<double>());
    }
    std::cout << "[reference] teacher '" << c["name"].get<std::string>() << "': " << n << " positions, top-1 agreement "
              << case_agree << "/" << n << ", max |dlogit| " << case_max << "\n";
    rows_total += n;
    top1_agree += case_agree;
    max_abs = std::max(max_abs, case_max);
  }
  const double agree = double(top1_agree) / double(rows_total);
  std::cout << "[reference] teacher total: top-1 agreement " << top1_agree << "/" << rows_total << " ("
            << 100.0 * agree << "%, of which " << near_ties << " at near ties), max |dlogit| " << max_abs
            << ", mean |dlogit| " << sum_abs / double(n_abs) << "\n";
  RecordProperty("top1_agreement", std::to_string(agree));
  RecordProperty("max_abs_dlogit", std::to_string(max_abs));
  // Measured: both engines are up to ~4.8 logits (mean ~0.3) from a float64 evaluation
  // of the same weights at some early positions (8-bit activations vs Gemma's activation
  // outliers; tools/gemma3_f64_reference.py), so the bounds are on the aggregate.
  EXPECT_GE(agree, 0.97);
  EXPECT_LT(max_abs, 6.0);
  EXPECT_LT(sum_abs / double(n_abs), 0.35);
}

}  // namespace
}  // namespace specula
