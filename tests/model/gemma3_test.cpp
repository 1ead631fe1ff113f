// Tests for model/arch/gemma3 on the real default model: cached prefill + decode equals
// one uncached forward (also past the 512-token sliding window), rollback inside the
// ring, batch invariance across rows, and load errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "model/model.h"
#include "../test_util.h"

namespace specula {
namespace {

class Gemma3Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::default_model_present())
      GTEST_SKIP() << "model not found: " << testing::default_model_path() << " (set SPECULA_MODELS)";
    auto m = load_model(testing::default_model_path());
    ASSERT_TRUE(m.is_ok()) << m.message();
    model_ = std::move(m).value();
  }
  std::vector<int32_t> random_ids(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(n);
    ids[0] = 2;  // BOS
    for (size_t i = 1; i < n; ++i) ids[i] = 3000 + static_cast<int32_t>(rng() % 200000);
    return ids;
  }
  // hidden rows of a run: prefill `split` tokens at once, then the rest `step` at a time.
  std::vector<float> run(const std::vector<int32_t>& ids, size_t split, size_t step, StateRows& cache,
                         int32_t row = 0) {
    const int64_t E = model_->info().n_embd;
    std::vector<float> out;
    Tensor hidden;
    const int32_t rows[1] = {row};
    size_t off = 0;
    while (off < ids.size()) {
      const size_t n = off == 0 ? split : std::min(step, ids.size() - off);
      Batch b{1, static_cast<int64_t>(n), ids.data() + off, rows};
      Status st = model_->forward(b, cache, hidden);
      EXPECT_TRUE(st.is_ok()) << st.message();
      out.insert(out.end(), hidden.data(), hidden.data() + n * E);
      off += n;
    }
    return out;
  }
  std::unique_ptr<Model> model_;
};

TEST_F(Gemma3Test, InfoFromMetadata) {
  EXPECT_EQ(model_->info().architecture, "gemma3");
  EXPECT_EQ(model_->info().n_vocab, 262144);
  EXPECT_EQ(model_->info().n_embd, 640);
  EXPECT_EQ(model_->info().n_layers, 18);
}

// For every layout: the step's new K/V are read back exactly as they are stored, so the
// cache's precision never makes cached decode differ from one uncached forward.
TEST_F(Gemma3Test, CachedDecodeEqualsOneForwardPastSlidingWindow) {
  const auto ids = random_ids(560, 7);
  for (const CacheOptions& c : std::vector<CacheOptions>{{}, {"q8_0", "q4_0", 0}, {"turbo4", "turbo3", 0}, {"q4_0", "q8_0", 16}}) {
    auto c1 = testing::make_state(*model_, 1, 1024, c);
    auto c2 = testing::make_state(*model_, 1, 1024, c);
    ASSERT_TRUE(c1.is_ok() && c2.is_ok());
    const auto whole = run(ids, ids.size(), 1, *c1);      // one forward of 560 tokens
    const auto pieces = run(ids, 500, 7, *c2);             // 500 prefill, then 7-token steps
    ASSERT_EQ(whole.size(), pieces.size());
    const int64_t E = model_->info().n_embd;
    size_t first_diff = whole.size();
    double max_abs = 0;
    for (size_t i = 0; i < whole.size(); ++i) {
      if (whole[i] != pieces[i] && first_diff == whole.size()) first_diff = i;
      max_abs = std::max(max_abs, std::fabs(double(whole[i]) - pieces[i]));
    }
    EXPECT_EQ(first_diff, whole.size()) << c.type_k << "/" << c.type_v << " delay " << c.delay << ": first differing token "
                                        << first_diff / E << ", max |diff| " << max_abs;
    // and the logits of the last token agree exactly
    std::vector<float> l1(262144), l2(262144);
    model_->project_logits(whole.data() + (ids.size() - 1) * E, 1, l1.data());
    model_->project_logits(pieces.data() + (ids.size() - 1) * E, 1, l2.data());
    EXPECT_EQ(0, std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(float)));
  }
}

TEST_F(Gemma3Test, SingleTokenDecodeEqualsOneForward) {
  const auto ids = random_ids(40, 11);
  auto c1 = testing::make_state(*model_, 1, 128);
  auto c2 = testing::make_state(*model_, 1, 128);
  const auto whole = run(ids, ids.size(), 1, *c1);
  const auto steps = run(ids, 1, 1, *c2);
  EXPECT_EQ(whole, steps);
}

TEST_F(Gemma3Test, RollbackAcrossWindowEdgeReproducesState) {
  // Write 508 tokens, then inside a speculative transaction 12 more (past the 512 window:
  // the ring overwrites slots the kept prefix still needs), roll back 6 (drafts rejected
  // at the edge), then continue with different tokens: must equal a fresh run of the same
  // final sequence. Outside a transaction a cut that far back is refused (the ring has
  // wrapped: the positions the window would need are gone).
  auto ids = random_ids(520, 3);
  auto alt = random_ids(12, 99);
  auto c1 = testing::make_state(*model_, 1, 1024);
  ASSERT_TRUE(c1.is_ok());
  run(std::vector<int32_t>(ids.begin(), ids.begin() + 508), 508, 1, *c1);
  const int32_t row0[1] = {0};
  c1->begin(row0);
  run(std::vector<int32_t>(ids.begin() + 508, ids.end()), 4, 4, *c1);  // 3 x 4 -> positions 508..519
  const int64_t keep[1] = {6};
  ASSERT_TRUE(c1->resolve(row0, keep).is_ok());
  ASSERT_EQ(c1->length(0), 514);
  EXPECT_FALSE(c1->truncate(0, 508).is_ok());
  EXPECT_EQ(c1->length(0), 514);
  std::vector<int32_t> tail(alt.begin() + 1, alt.begin() + 7);
  const auto after = run(tail, tail.size(), 1, *c1);

  std::vector<int32_t> final_seq(ids.begin(), ids.end() - 6);
  final_seq.insert(final_seq.end(), tail.begin(), tail.end());
  auto c2 = testing::make_state(*model_, 1, 1024);
  const auto fresh = run(final_seq, final_seq.size(), 1, *c2);
  const int64_t E = model_->info().n_embd;
  std::vector<float> fresh_tail(fresh.end() - static_cast<int64_t>(tail.size()) * E, fresh.end());
  EXPECT_EQ(after, fresh_tail);
}

TEST_F(Gemma3Test, BatchRowsAreIndependent) {
  // Two rows decoding together give bitwise the rows' solo results.
  const auto a = random_ids(30, 1), b = random_ids(45, 2);
  auto solo = testing::make_state(*model_, 1, 256);
  const auto ha = run(a, a.size(), 1, *solo);
  ASSERT_TRUE(solo->reset(0).is_ok());
  const auto hb = run(b, b.size(), 1, *solo);
  // batched: prefill each row alone, then decode the last 5 tokens of each together
  auto pair = testing::make_state(*model_, 2, 256);
  const int64_t E = model_->info().n_embd;
  std::vector<int32_t> pa(a.begin(), a.end() - 5), pb(b.begin(), b.end() - 5);
  run(pa, pa.size(), 1, *pair, 0);
  run(pb, pb.size(), 1, *pair, 1);
  Tensor hidden;
  const int32_t rows[2] = {1, 0};
  for (int s = 0; s < 5; ++s) {
    const int32_t ids[2] = {b[pb.size() + s], a[pa.size() + s]};
    ASSERT_TRUE(model_->forward(Batch{2, 1, ids, rows}, *pair, hidden).is_ok());
    EXPECT_EQ(0, std::memcmp(hidden.data(), hb.data() + (pb.size() + s) * E, E * sizeof(float))) << "row b step " << s;
    EXPECT_EQ(0, std::memcmp(hidden.data() + E, ha.data() + (pa.size() + s) * E, E * sizeof(float))) << "row a step " << s;
  }
}

TEST_F(Gemma3Test, RaggedBatchMixesPrefillAndDecodeBitwise) {
  // One forward carrying a decode row (1 token), a prefill chunk (37 tokens) and a second
  // chunk of another row (5 tokens) gives each row bitwise its solo result.
  const auto a = random_ids(40, 3), b = random_ids(37, 4), c = random_ids(25, 5);
  auto solo = testing::make_state(*model_, 1, 256);
  const auto ha = run(a, a.size(), 1, *solo);
  ASSERT_TRUE(solo->reset(0).is_ok());
  const auto hb = run(b, b.size(), b.size(), *solo);
  ASSERT_TRUE(solo->reset(0).is_ok());
  const auto hc = run(c, 20, 5, *solo);
  auto group = testing::make_state(*model_, 3, 256);
  std::vector<int32_t> pa(a.begin(), a.end() - 1), pc(c.begin(), c.begin() + 20);
  run(pa, pa.size(), 1, *group, 2);
  run(pc, pc.size(), 1, *group, 0);
  std::vector<int32_t> ids;
  ids.push_back(a.back());
  ids.insert(ids.end(), b.begin(), b.end());
  ids.insert(ids.end(), c.begin() + 20, c.end());
  const int32_t rows[3] = {2, 1, 0};
  const int64_t counts[3] = {1, 37, 5};
  Tensor hidden;
  Batch batch{3, 0, ids.data(), rows, counts};
  ASSERT_TRUE(model_->forward(batch, *group, hidden).is_ok());
  const int64_t E = model_->info().n_embd;
  ASSERT_EQ(hidden.dim(0), 43);
  EXPECT_EQ(0, std::memcmp(hidden.data(), ha.data() + 39 * E, E * sizeof(float))) << "decode row";
  EXPECT_EQ(0, std::memcmp(hidden.data() + E, hb.data(), 37 * E * sizeof(float))) << "prefill row";
  EXPECT_EQ(0, std::memcmp(hidden.data() + 38 * E, hc.data() + 20 * E, 5 * E * sizeof(float))) << "chunk row";
  EXPECT_EQ(group->length(2), 40);
  EXPECT_EQ(group->length(1), 37);
  EXPECT_EQ(group->length(0), 25);
  const int64_t zero[1] = {0};
  EXPECT_FALSE(model_->forward(Batch{1, 0, ids.data(), rows, zero}, *group, hidden).is_ok());
}

TEST_F(Gemma3Test, BadInputIsAnErrorNotACrash) {
  auto c = testing::make_state(*model_, 1, 16);
  Tensor hidden;
  const int32_t rows[1] = {0};
  const int32_t bad[1] = {262144};
  Status st = model_->forward(Batch{1, 1, bad, rows}, *c, hidden);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos) << st.message();
  std::vector<int32_t> many(17, 5);
  st = model_->forward(Batch{1, 17, many.data(), rows}, *c, hidden);
  EXPECT_NE(st.message().find("exceed the context"), std::string::npos) << st.message();
  EXPECT_EQ(c->length(0), 0);
  const int32_t bad_row[1] = {3};
  st = model_->forward(Batch{1, 1, many.data(), bad_row}, *c, hidden);
  EXPECT_FALSE(st.is_ok());
}

TEST(ModelLoad, ErrorsAreClear) {
  auto m = load_model("/nonexistent/model.gguf");
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.message().find("/nonexistent/model.gguf"), std::string::npos) << m.message();
}

}  // namespace
}  // namespace specula
