// Tests for state/recurrent_layout with a small deterministic rule: rows advance token by
// token (any split of the tokens gives bitwise the same state and outputs), a transaction
// restores its snapshot and replays the kept inputs (equal to a row that only saw them),
// the state is reusable only whole, and save/load/clone round-trip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "state/recurrent_layout.h"

namespace specula {
namespace {

// conv over the last 3 inputs of C channels, then per unit u a decaying sum of its half
// of the channels; output per unit = that sum.
class ToyRule final : public RecurrentRule {
 public:
  static constexpr int64_t C = 4, K = 3, U = 2;
  std::string name() const override { return "toy"; }
  int64_t conv_floats() const override { return (K - 1) * C; }
  int64_t state_floats() const override { return U; }
  int64_t input_floats() const override { return C; }
  int64_t output_floats() const override { return U; }
  int64_t n_units() const override { return U; }
  int64_t work_floats(int64_t T) const override { return T * C; }
  void prepare(const float* in, int64_t T, float* conv, float* work) const override {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t c = 0; c < C; ++c)
        work[t * C + c] = 0.5f * conv[c] + 0.25f * conv[C + c] + 1.0f * in[t * C + c];
      std::memmove(conv, conv + C, C * sizeof(float));
      std::memcpy(conv + C, in + t * C, C * sizeof(float));
    }
  }
  void run_unit(int64_t u, const float* work, int64_t T, float* state, float* out) const override {
    for (int64_t t = 0; t < T; ++t) {
      state[u] = 0.9f * state[u] + work[t * C + 2 * u] - 0.3f * work[t * C + 2 * u + 1];
      if (out != nullptr) out[t * U + u] = state[u];
    }
  }
};

struct Fixture {
  std::shared_ptr<const RecurrentLayout> L;
  ThreadPool pool{2};
  RecurrentScratch scratch;
  Fixture() {
    RecurrentSpec spec;
    spec.rule = std::make_shared<ToyRule>();
    L = RecurrentLayout::create(spec).value();
  }
  std::vector<float> inputs(int64_t from, int64_t n) {
    std::vector<float> x;
    for (int64_t p = from; p < from + n; ++p)
      for (int64_t c = 0; c < ToyRule::C; ++c) x.push_back(std::sin(0.37f * p + c));
    return x;
  }
  // Feeds positions [row.length(), +n) of the standard input stream; returns the outputs.
  std::vector<float> feed(LayerRow& row, int64_t n) {
    auto in = inputs(row.length(), n);
    std::vector<float> out(n * ToyRule::U);
    LayerRow* rows[1] = {&row};
    const int64_t offset[2] = {0, n};
    L->run(pool, rows, offset, in.data(), out.data(), scratch);
    return out;
  }
};

TEST(RecurrentLayout, TokenSplitsGiveTheSameState) {
  Fixture f;
  auto a = f.L->new_row(), b = f.L->new_row();
  auto oa = f.feed(**a, 13);
  auto ob = f.feed(**b, 5);
  auto ob2 = f.feed(**b, 8);
  ob.insert(ob.end(), ob2.begin(), ob2.end());
  EXPECT_EQ(oa, ob);
  std::string sa, sb;
  (*a)->save(sa);
  (*b)->save(sb);
  EXPECT_EQ(sa, sb);
}

TEST(RecurrentLayout, SnapshotAndReplayEqualsAStraightRun) {
  Fixture f;
  for (int64_t keep : {0, 1, 4, 7}) {
    auto a = f.L->new_row(), b = f.L->new_row();
    f.feed(**a, 9);
    (*a)->begin();
    f.feed(**a, 3);  // two forwards in one round
    f.feed(**a, 4);
    ASSERT_TRUE((*a)->resolve(keep).is_ok());
    EXPECT_EQ((*a)->length(), 9 + keep);
    f.feed(**b, 9 + keep);
    std::string sa, sb;
    (*a)->save(sa);
    (*b)->save(sb);
    EXPECT_EQ(sa, sb) << "keep " << keep;
    EXPECT_EQ(f.feed(**a, 3), f.feed(**b, 3)) << "keep " << keep;
  }
}

TEST(RecurrentLayout, ReusableOnlyWholeAndRoundTrips) {
  Fixture f;
  EXPECT_TRUE(f.L->info().needs_snapshot);
  EXPECT_EQ(f.L->info().kind, LayerKind::kRecurrent);
  EXPECT_EQ(f.L->info().fixed_bytes_per_row, static_cast<int64_t>(sizeof(float)) * (8 + 2));
  auto a = f.L->new_row();
  f.feed(**a, 6);
  EXPECT_EQ((*a)->min_length(), 6);
  EXPECT_FALSE((*a)->truncate(5).is_ok());
  EXPECT_TRUE((*a)->truncate(6).is_ok());
  std::string blob;
  (*a)->save(blob);
  auto b = f.L->new_row();
  ASSERT_TRUE((*b)->load(blob).is_ok());
  auto c = (*a)->clone();
  ASSERT_TRUE(c.is_ok());
  const auto next = f.feed(**a, 2);
  EXPECT_EQ(f.feed(**b, 2), next);
  EXPECT_EQ(f.feed(**c, 2), next);
  auto d = f.L->new_row();
  EXPECT_FALSE((*d)->load(blob.substr(0, 10)).is_ok());
  EXPECT_FALSE((*d)->load("KVR1").is_ok());
  EXPECT_FALSE((*d)->resolve(0).is_ok());
  RecurrentSpec none;
  EXPECT_FALSE(RecurrentLayout::create(none).is_ok());
}

}  // namespace
}  // namespace specula
