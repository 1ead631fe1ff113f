// Tests for model/arch/qwen2 on the real Qwen2.5-Coder files (1.5B target, 0.5B draft):
// metadata, teacher-forced logits and greedy continuations against llama.cpp
// (tests/fixtures/qwen2_reference.json, made by tools/make_qwen2_fixtures.py), cached
// prefill + decode equals one forward bitwise, a ragged batch equals solo runs bitwise,
// and rollback by cache.trim then re-decode equals the straight run.
// Each model is loaded once per suite; a test skips when its file is absent (CI fetches
// only Gemma by default: scripts/fetch_model.py qwen2.5-coder-1.5b / qwen2.5-coder-0.5b).
//
// Tolerance (same reasoning as gemma3_reference_test.cpp): both engines quantize
// activations to 8 bits and differ in summation order, so llama.cpp's incremental and
// one-pass argmax themselves disagree at near-ties. A greedy continuation must equal
// llama.cpp's until the first step where llama.cpp's own top-2 margin is below kNearTie;
// past such a split the texts legitimately differ, and comparison stops there.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "model/model.h"
#include "../test_util.h"

namespace specula {
namespace {

using nlohmann::json;

constexpr double kNearTie = 0.25;
constexpr int64_t kVocab = 151936;
const char* const kTarget = "qwen2.5-coder-1.5b";
const char* const kDraft = "qwen2.5-coder-0.5b";

std::string model_path(const std::string& key) {
  const char* env = std::getenv("SPECULA_MODELS");
  std::string dir = env != nullptr && *env != '\0'
                        ? env
                        : std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache/specula/models";
  return dir + "/" + key + "-instruct-q4_k_m.gguf";
}

int32_t argmax(const float* v, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = static_cast<int32_t>(i);
  return best;
}

class Qwen2Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fixture_ = new json();
    std::ifstream in(std::string(SPECULA_FIXTURES_DIR) + "/qwen2_reference.json");
    if (in) *fixture_ = json::parse(in);
    for (const char* key : {kTarget, kDraft}) {
      if (!std::filesystem::exists(model_path(key))) continue;
      auto m = load_model(model_path(key));
      if (!m) {
        load_errors_[key] = m.message();
        continue;
      }
      models_[key] = std::move(m).value();
    }
  }
  static void TearDownTestSuite() {
    models_.clear();
    delete fixture_;
    fixture_ = nullptr;
  }

  // The loaded model, or nullptr after GTEST_SKIP / a failure (caller returns).
  Model* model(const std::string& key) {
    if (auto e = load_errors_.find(key); e != load_errors_.end()) {
      ADD_FAILURE() << "load " << model_path(key) << ": " << e->second;
      return nullptr;
    }
    auto it = models_.find(key);
    if (it == models_.end()) return nullptr;
    return it->second.get();
  }
  const json& fixture_model(const std::string& key) {
    for (const auto& m : (*fixture_)["models"])
      if (m["key"] == key) return m;
    static const json kEmpty;
    return kEmpty;
  }

  static std::vector<int32_t> random_ids(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(n);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % 150000);
    return ids;
  }
  // Hidden rows of a run on one cache row: `split` tokens at once, then `step` at a time.
  static std::vector<float> run(Model& m, const std::vector<int32_t>& ids, size_t split, size_t step,
                                StateRows& cache, int32_t row = 0) {
    const int64_t E = m.info().n_embd;
    std::vector<float> out;
    Tensor hidden;
    const int32_t rows[1] = {row};
    size_t off = 0;
    while (off < ids.size()) {
      const size_t n = off == 0 ? split : std::min(step, ids.size() - off);
      Status st = m.forward(Batch{1, static_cast<int64_t>(n), ids.data() + off, rows}, cache, hidden);
      EXPECT_TRUE(st.is_ok()) << st.message();
      if (!st.is_ok()) break;
      out.insert(out.end(), hidden.data(), hidden.data() + n * E);
      off += n;
    }
    return out;
  }

  void check_teacher(const std::string& key);
  void check_greedy(const std::string& key);

  static inline std::map<std::string, std::unique_ptr<Model>> models_;
  static inline std::map<std::string, std::string> load_errors_;
  static inline json* fixture_ = nullptr;
};

#define SPECULA_MODEL_OR_SKIP(var, key)                                                         \
  Model* var = model(key);                                                                     \
  if (var == nullptr) {                                                                        \
    if (HasFailure()) return;                                                                  \
    GTEST_SKIP() << "model not found: " << model_path(key)                                     \
                 << " (scripts/fetch_model.py " << (key) << "; or set SPECULA_MODELS)";        \
  }

TEST_F(Qwen2Test, InfoFromMetadata) {
  SPECULA_MODEL_OR_SKIP(m, kTarget);
  EXPECT_EQ(m->info().architecture, "qwen2");
  EXPECT_EQ(m->info().n_vocab, kVocab);
  EXPECT_EQ(m->info().n_embd, 1536);
  EXPECT_EQ(m->info().n_layers, 28);
  EXPECT_EQ(m->info().n_ctx_train, 32768);
  if (Model* d = model(kDraft)) {
    EXPECT_EQ(d->info().architecture, "qwen2");
    EXPECT_EQ(d->info().n_vocab, kVocab);
    EXPECT_EQ(d->info().n_embd, 896);
    EXPECT_EQ(d->info().n_layers, 24);
  }
}

void Qwen2Test::check_teacher(const std::string& key) {
  SPECULA_MODEL_OR_SKIP(m, key);
  const json& fm = fixture_model(key);
  ASSERT_FALSE(fm.is_null()) << "no fixture for " << key;
  const int64_t V = m->info().n_vocab;
  int64_t rows_total = 0, agree = 0, near_ties = 0, n_abs = 0;
  double max_abs = 0, sum_abs = 0;
  std::vector<float> logits;
  for (const auto& c : fm["cases"]) {
    auto ids = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto g = c["greedy_ids"].get<std::vector<int32_t>>();
    ids.insert(ids.end(), g.begin(), g.end());
    const auto& t = c["teacher"];
    const int64_t n = static_cast<int64_t>(ids.size());
    ASSERT_EQ(static_cast<int64_t>(t["top_ids"].size()), n);
    auto cache = testing::make_state(*m, 1, 512);
    ASSERT_TRUE(cache.is_ok()) << cache.message();
    Tensor hidden;
    const int32_t rows[1] = {0};
    ASSERT_TRUE(m->forward(Batch{1, n, ids.data(), rows}, *cache, hidden).is_ok());
    logits.resize(static_cast<size_t>(n * V));
    m->project_logits(hidden.data(), n, logits.data());
    int64_t case_agree = 0;
    double case_max = 0;
    for (int64_t r = 0; r < n; ++r) {
      const float* l = logits.data() + r * V;
      const int32_t best = argmax(l, V);
      const auto& ti = t["top_ids"][r];
      const auto& tl = t["top_logits"][r];
      const bool tie = tl[0].get<double>() - tl[1].get<double>() < kNearTie;
      if (best == ti[0].get<int32_t>()) {
        ++case_agree;
      } else if (tie && best == ti[1].get<int32_t>()) {
        ++case_agree;
        ++near_ties;
      } else {
        std::cout << "[qwen2]   " << key << " row " << r << ": specula top-1 " << best << " (" << l[best]
                  << "), llama.cpp " << ti[0] << " (" << tl[0] << ", specula " << l[ti[0].get<int32_t>()] << ")\n";
      }
      for (size_t j = 0; j < ti.size(); ++j) {
        const double d = std::fabs(double(l[ti[j].get<int32_t>()]) - tl[j].get<double>());
        case_max = std::max(case_max, d);
        sum_abs += d;
        ++n_abs;
      }
    }
    std::cout << "[qwen2] " << key << " teacher '" << c["name"].get<std::string>() << "': " << n
              << " positions, top-1 agreement " << case_agree << "/" << n << ", max |dlogit| " << case_max << "\n";
    rows_total += n;
    agree += case_agree;
    max_abs = std::max(max_abs, case_max);
  }
  ASSERT_GT(rows_total, 0);
  const double rate = double(agree) / double(rows_total), mean = sum_abs / double(n_abs);
  std::cout << "[qwen2] " << key << " teacher total: top-1 " << agree << "/" << rows_total << " (" << near_ties
            << " at near ties), max |dlogit| " << max_abs << ", mean |dlogit| " << mean << "\n";
  EXPECT_GE(rate, 0.97);
  EXPECT_LT(max_abs, 1.0);
  EXPECT_LT(mean, 0.15);
}

// All cases decode together as rows of one batch (the prompts prefill in one ragged
// forward, then one forward per step carries every row): rows are bitwise their solo
// results (model.h), so this is llama.cpp's one-row greedy at a fifth of the cost.
void Qwen2Test::check_greedy(const std::string& key) {
  SPECULA_MODEL_OR_SKIP(m, key);
  const json& fm = fixture_model(key);
  ASSERT_FALSE(fm.is_null()) << "no fixture for " << key;
  const int64_t V = m->info().n_vocab, E = m->info().n_embd;
  const auto& cases = fm["cases"];
  const int32_t B = static_cast<int32_t>(cases.size());
  ASSERT_GT(B, 0);
  std::vector<std::vector<int32_t>> expect(B);
  std::vector<std::vector<double>> margin(B);
  std::vector<int32_t> ids, rows(B);
  std::vector<int64_t> counts(B);
  size_t steps = 0;
  for (int32_t b = 0; b < B; ++b) {
    const auto prompt = cases[b]["prompt_ids"].get<std::vector<int32_t>>();
    ids.insert(ids.end(), prompt.begin(), prompt.end());
    counts[b] = static_cast<int64_t>(prompt.size());
    rows[b] = b;
    expect[b] = cases[b]["greedy_ids"].get<std::vector<int32_t>>();
    margin[b] = cases[b]["greedy_margin"].get<std::vector<double>>();
    ASSERT_EQ(expect[b].size(), margin[b].size());
    steps = std::max(steps, expect[b].size());
  }
  auto cache = testing::make_state(*m, B, 512);
  ASSERT_TRUE(cache.is_ok()) << cache.message();
  Tensor hidden;
  ASSERT_TRUE(m->forward(Batch{B, 0, ids.data(), rows.data(), counts.data()}, *cache, hidden).is_ok());
  // Last hidden row of each prompt, packed.
  std::vector<float> last(static_cast<size_t>(B * E));
  int64_t off = 0;
  for (int32_t b = 0; b < B; ++b) {
    off += counts[b];
    std::copy(hidden.data() + (off - 1) * E, hidden.data() + off * E, last.data() + b * E);
  }
  std::vector<float> logits(static_cast<size_t>(B * V));
  m->project_logits(last.data(), B, logits.data());
  std::vector<size_t> first_diff(B, SIZE_MAX);
  std::vector<int32_t> next(B);
  for (size_t k = 0; k < steps; ++k) {
    for (int32_t b = 0; b < B; ++b) {
      next[b] = argmax(logits.data() + b * V, V);
      if (first_diff[b] == SIZE_MAX && k < expect[b].size() && next[b] != expect[b][k]) {
        first_diff[b] = k;
        std::cout << "[qwen2] " << key << " greedy '" << cases[b]["name"].get<std::string>()
                  << "': first difference at token " << k << " (specula " << next[b] << ", llama.cpp "
                  << expect[b][k] << ", llama.cpp's margin " << margin[b][k] << ")\n";
      }
    }
    if (k + 1 == steps) break;
    ASSERT_TRUE(m->forward(Batch{B, 1, next.data(), rows.data()}, *cache, hidden).is_ok());
    m->project_logits(hidden.data(), B, logits.data());
  }
  int full = 0, total = 0;
  for (int32_t b = 0; b < B; ++b) {
    if (first_diff[b] == SIZE_MAX) {
      ++full;
      total += static_cast<int>(expect[b].size());
    } else {
      EXPECT_LT(margin[b][first_diff[b]], kNearTie) << key << " case " << cases[b]["name"] << " diverges at token "
                                                    << first_diff[b] << " where llama.cpp is not near a tie";
      total += static_cast<int>(first_diff[b]);
    }
  }
  std::cout << "[qwen2] " << key << " greedy: " << full << " of " << B << " continuations fully equal, " << total
            << " tokens equal before any near-tie split\n";
  EXPECT_GE(full, B - 2);
}

TEST_F(Qwen2Test, TeacherForcedLogitsAgreeWithLlamaCpp_1_5B) { check_teacher(kTarget); }
TEST_F(Qwen2Test, TeacherForcedLogitsAgreeWithLlamaCpp_0_5B) { check_teacher(kDraft); }
TEST_F(Qwen2Test, GreedyContinuationsEqualLlamaCpp_1_5B) { check_greedy(kTarget); }
TEST_F(Qwen2Test, GreedyContinuationsEqualLlamaCpp_0_5B) { check_greedy(kDraft); }

TEST_F(Qwen2Test, CachedPrefillAndDecodeEqualOneForward) {
  int ran = 0;
  for (const char* key : {kTarget, kDraft}) {
    Model* m = model(key);
    if (m == nullptr) continue;
    ++ran;
    const auto ids = random_ids(48, 7);
    auto c1 = testing::make_state(*m, 1, 128);
    auto c2 = testing::make_state(*m, 1, 128);
    ASSERT_TRUE(c1.is_ok() && c2.is_ok());
    const auto whole = run(*m, ids, ids.size(), 1, *c1);  // one forward of 48 tokens
    const auto pieces = run(*m, ids, 37, 1, *c2);          // 37 prefill, then 11 decode steps
    ASSERT_EQ(whole.size(), pieces.size());
    const int64_t E = m->info().n_embd;
    size_t first_diff = whole.size();
    for (size_t i = 0; i < whole.size(); ++i)
      if (whole[i] != pieces[i]) {
        first_diff = i;
        break;
      }
    EXPECT_EQ(first_diff, whole.size()) << key << ": first differing token " << first_diff / E;
    std::vector<float> l1(kVocab), l2(kVocab);
    m->project_logits(whole.data() + (ids.size() - 1) * E, 1, l1.data());
    m->project_logits(pieces.data() + (ids.size() - 1) * E, 1, l2.data());
    EXPECT_EQ(0, std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(float))) << key;
  }
  if (ran == 0 && !HasFailure()) GTEST_SKIP() << "no Qwen2 model found under " << model_path(kTarget);
}

TEST_F(Qwen2Test, RaggedBatchMixesPrefillAndDecodeBitwise) {
  // One forward carrying a decode row (1 token), a prefill chunk (23 tokens) and a
  // continuation chunk of a third row (4 tokens) gives each row bitwise its solo result.
  SPECULA_MODEL_OR_SKIP(m, kTarget);
  const auto a = random_ids(20, 3), b = random_ids(23, 4), c = random_ids(16, 5);
  auto solo = testing::make_state(*m, 1, 128);
  ASSERT_TRUE(solo.is_ok());
  const auto ha = run(*m, a, a.size() - 1, 1, *solo);
  ASSERT_TRUE(solo->reset(0).is_ok());
  const auto hb = run(*m, b, b.size(), b.size(), *solo);
  ASSERT_TRUE(solo->reset(0).is_ok());
  const auto hc = run(*m, c, 12, 4, *solo);
  auto group = testing::make_state(*m, 3, 128);
  ASSERT_TRUE(group.is_ok());
  std::vector<int32_t> pa(a.begin(), a.end() - 1), pc(c.begin(), c.begin() + 12);
  run(*m, pa, pa.size(), 1, *group, 2);
  run(*m, pc, pc.size(), 1, *group, 0);
  std::vector<int32_t> ids;
  ids.push_back(a.back());
  ids.insert(ids.end(), b.begin(), b.end());
  ids.insert(ids.end(), c.begin() + 12, c.end());
  const int32_t rows[3] = {2, 1, 0};
  const int64_t counts[3] = {1, 23, 4};
  Tensor hidden;
  ASSERT_TRUE(m->forward(Batch{3, 0, ids.data(), rows, counts}, *group, hidden).is_ok());
  const int64_t E = m->info().n_embd;
  ASSERT_EQ(hidden.dim(0), 28);
  EXPECT_EQ(0, std::memcmp(hidden.data(), ha.data() + 19 * E, E * sizeof(float))) << "decode row";
  EXPECT_EQ(0, std::memcmp(hidden.data() + E, hb.data(), 23 * E * sizeof(float))) << "prefill row";
  EXPECT_EQ(0, std::memcmp(hidden.data() + 24 * E, hc.data() + 12 * E, 4 * E * sizeof(float))) << "chunk row";
  EXPECT_EQ(group->length(2), 20);
  EXPECT_EQ(group->length(1), 23);
  EXPECT_EQ(group->length(0), 16);
}

TEST_F(Qwen2Test, RollbackThenRedecodeEqualsStraightRun) {
  // Prefill 30, decode 5 drafts, reject 3 (trim), decode 4 other tokens: equals a fresh
  // run of the final sequence.
  SPECULA_MODEL_OR_SKIP(m, kTarget);
  const auto ids = random_ids(35, 11), alt = random_ids(4, 12);
  auto c1 = testing::make_state(*m, 1, 128);
  ASSERT_TRUE(c1.is_ok());
  run(*m, std::vector<int32_t>(ids.begin(), ids.begin() + 30), 30, 1, *c1);
  const int32_t row0[1] = {0};
  c1->begin(row0);
  run(*m, std::vector<int32_t>(ids.begin() + 30, ids.end()), 5, 1, *c1);
  const int64_t keep[1] = {2};
  ASSERT_TRUE(c1->resolve(row0, keep).is_ok());
  EXPECT_EQ(c1->length(0), 32);
  const auto after = run(*m, alt, 1, 1, *c1);
  std::vector<int32_t> final_seq(ids.begin(), ids.end() - 3);
  final_seq.insert(final_seq.end(), alt.begin(), alt.end());
  auto c2 = testing::make_state(*m, 1, 128);
  const auto straight = run(*m, final_seq, final_seq.size(), 1, *c2);
  const int64_t E = m->info().n_embd;
  std::vector<float> tail(straight.end() - static_cast<int64_t>(alt.size()) * E, straight.end());
  EXPECT_EQ(after, tail);
}

TEST_F(Qwen2Test, BadInputIsAnErrorNotACrash) {
  SPECULA_MODEL_OR_SKIP(m, kDraft);
  auto c = testing::make_state(*m, 1, 8);
  ASSERT_TRUE(c.is_ok());
  Tensor hidden;
  const int32_t rows[1] = {0};
  const int32_t bad[1] = {static_cast<int32_t>(kVocab)};
  Status st = m->forward(Batch{1, 1, bad, rows}, *c, hidden);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("[qwen2]"), std::string::npos) << st.message();
  std::vector<int32_t> many(9, 5);
  EXPECT_FALSE(m->forward(Batch{1, 9, many.data(), rows}, *c, hidden).is_ok());
  EXPECT_EQ(c->length(0), 0);
}

}  // namespace
}  // namespace specula
