// Tests for state/kv_layout: rows store exactly what was staged, in pages; a ring keeps its
// window and refuses cuts it cannot serve; a transaction rolls back past the ring's wrap
// with no margin (the kept state is bitwise that of a row that never saw the rejected
// positions); the delayed layout keeps its newest positions in f16; save/load and clone
// round-trip; memory accounting; layout errors.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "state/kv_layout.h"

namespace specula {
namespace {

constexpr int64_t kHeads = 2, kDim = 64;

std::shared_ptr<const KvLayout> layout(const std::string& k, const std::string& v, int64_t window = 0,
                                       int64_t delay = 0) {
  CacheOptions o;
  o.type_k = k;
  o.type_v = v;
  o.delay = delay;
  auto l = KvLayout::create(attention_spec(kHeads, kDim, window), o, kernels::active());
  EXPECT_TRUE(l.is_ok()) << l.message();
  return l.is_ok() ? *l : nullptr;
}

// K/V of position p (any row): deterministic, different per position.
std::vector<float> kv_of(int64_t p, int salt) {
  std::mt19937 rng(static_cast<uint32_t>(p * 7919 + salt));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(kHeads * kDim);
  for (float& v : x) v = nd(rng);
  return x;
}

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

// Appends positions [row.length(), row.length() + n) to the row.
void append(const KvLayout& L, LayerRow& row, int64_t n) {
  std::vector<float> k, v;
  for (int64_t i = 0; i < n; ++i) {
    auto a = kv_of(row.length() + i, 1), b = kv_of(row.length() + i, 2);
    k.insert(k.end(), a.begin(), a.end());
    v.insert(v.end(), b.begin(), b.end());
  }
  KvStage stage;
  L.encode(pool(), k.data(), v.data(), n, stage);
  L.commit(row, stage, 0, n);
}

// The stored bytes of position p, head g (K then V).
std::vector<uint8_t> stored(const KvLayout& L, const LayerRow& row, int64_t p, int64_t g, bool recent = false) {
  KvStage empty;
  const KvRowView v = L.view(row, empty, 0, 0);
  const KvTierView& kt = recent ? v.k_recent : v.k;
  const KvTierView& vt = recent ? v.v_recent : v.v;
  const uint8_t* k = kt.at(p, v.base, g);
  const uint8_t* vv = vt.at(p, v.base, g);
  std::vector<uint8_t> out(k, k + kt.head_bytes);
  out.insert(out.end(), vv, vv + vt.head_bytes);
  return out;
}

// What position p, head g should hold: its K/V through the codecs.
std::vector<uint8_t> expected(const KvCodec& kc, const KvCodec& vc, int64_t p, int64_t g) {
  auto k = kv_of(p, 1), v = kv_of(p, 2);
  std::vector<uint8_t> out(kc.bytes() + vc.bytes());
  kc.encode(k.data() + g * kDim, out.data());
  vc.encode(v.data() + g * kDim, out.data() + kc.bytes());
  return out;
}

TEST(KvLayout, FullRowsStoreWhatWasStagedAcrossPages) {
  for (const char* t : {"f16", "q8_0", "q4_0", "turbo4", "turbo3", "f32", "bf16"}) {
    auto L = layout(t, t);
    auto row = L->new_row();
    ASSERT_TRUE(row.is_ok());
    append(*L, **row, 1);
    append(*L, **row, 70);  // crosses the 64-position page edge
    append(*L, **row, 79);
    ASSERT_EQ((*row)->length(), 150);
    for (int64_t p : {0, 1, 63, 64, 65, 127, 128, 149})
      for (int64_t g = 0; g < kHeads; ++g)
        EXPECT_EQ(stored(*L, **row, p, g), expected(L->k_codec(), L->v_codec(), p, g)) << t << " pos " << p;
    EXPECT_EQ((*row)->min_length(), 0);
    EXPECT_TRUE((*row)->truncate(3).is_ok());
    EXPECT_EQ((*row)->length(), 3);
    EXPECT_EQ((*row)->bytes(), L->bytes_for(150)) << t;  // pages kept for reuse
  }
}

TEST(KvLayout, RingKeepsItsWindowAndRefusesDeepCuts) {
  auto L = layout("f16", "q8_0", 16);
  auto row = L->new_row();
  ASSERT_TRUE(row.is_ok());
  append(*L, **row, 40);
  KvStage empty;
  EXPECT_EQ(L->view(**row, empty, 0, 0).lo, 24);
  for (int64_t p = 24; p < 40; ++p) EXPECT_EQ(stored(*L, **row, p, 1), expected(L->k_codec(), L->v_codec(), p, 1));
  // The next query (position L) needs [L - 15, L): the row can be cut back to 39 at most.
  EXPECT_EQ((*row)->min_length(), 39);
  EXPECT_FALSE((*row)->truncate(38).is_ok());
  EXPECT_EQ((*row)->length(), 40);
  EXPECT_TRUE((*row)->truncate(39).is_ok());
  EXPECT_EQ(L->bytes_for(1000), L->bytes_for(16));  // a ring holds its window at most
  EXPECT_EQ(L->info().max_positions, 16);
}

TEST(KvLayout, TransactionRollsBackPastTheWrap) {
  for (const char* t : {"f16", "q4_0", "turbo4"}) {
    for (int64_t keep : {0, 1, 3, 9, 10}) {
      auto L = layout(t, t, 16);
      auto a = L->new_row(), b = L->new_row();
      ASSERT_TRUE(a.is_ok() && b.is_ok());
      append(*L, **a, 20);
      (*a)->begin();
      ASSERT_TRUE((*a)->in_transaction());
      append(*L, **a, 4);  // a verify window and another forward in the same round:
      append(*L, **a, 6);  // 10 positions, overwriting ring slots of positions 4..13
      ASSERT_TRUE((*a)->resolve(keep).is_ok());
      EXPECT_FALSE((*a)->in_transaction());
      append(*L, **b, 20 + keep);  // a row that never saw the rejected positions
      ASSERT_EQ((*a)->length(), 20 + keep);
      const int64_t len = 20 + keep;
      for (int64_t p = std::max<int64_t>(0, len - 16); p < len; ++p)
        for (int64_t g = 0; g < kHeads; ++g)
          EXPECT_EQ(stored(*L, **a, p, g), stored(*L, **b, p, g)) << t << " keep " << keep << " pos " << p;
      EXPECT_EQ((*a)->min_length(), (*b)->min_length()) << t << " keep " << keep;
      // The rolled-back row continues exactly as the straight one.
      append(*L, **a, 5);
      append(*L, **b, 5);
      for (int64_t p = len + 5 - 16; p < len + 5; ++p)
        EXPECT_EQ(stored(*L, **a, p, 0), stored(*L, **b, p, 0)) << t << " keep " << keep << " after, pos " << p;
    }
  }
  auto L = layout("f16", "f16");
  auto r = L->new_row();
  EXPECT_FALSE((*r)->resolve(0).is_ok());  // no transaction
  (*r)->begin();
  append(*L, **r, 3);
  EXPECT_FALSE((*r)->resolve(4).is_ok());  // more than appended
  EXPECT_FALSE((*r)->truncate(1).is_ok());  // inside a transaction
  EXPECT_TRUE((*r)->resolve(2).is_ok());
  EXPECT_EQ((*r)->length(), 2);
}

TEST(KvLayout, DelayedKeepsNewestPositionsInF16) {
  auto L = layout("q4_0", "q4_0", 0, 8);
  EXPECT_EQ(L->delay(), 8);
  EXPECT_GT(L->info().fixed_bytes_per_row, 0);
  auto row = L->new_row();
  ASSERT_TRUE(row.is_ok());
  append(*L, **row, 30);
  auto f16 = make_f16_codec_like(make_kv_codec("q4_0", kDim, kernels::active()).value(), kernels::active());
  for (int64_t p = 22; p < 30; ++p) {
    EXPECT_EQ(stored(*L, **row, p, 0, true), expected(*f16, *f16, p, 0)) << p;  // f16 tier
    EXPECT_EQ(stored(*L, **row, p, 0, false), expected(L->k_codec(), L->v_codec(), p, 0)) << p;  // quantized
  }
  // Rollback restores the f16 ring too.
  auto straight = L->new_row();
  append(*L, **straight, 32);
  (*row)->begin();
  append(*L, **row, 7);
  ASSERT_TRUE((*row)->resolve(2).is_ok());
  for (int64_t p = 24; p < 32; ++p) EXPECT_EQ(stored(*L, **row, p, 1, true), stored(*L, **straight, p, 1, true)) << p;
  // A delay needs a quantized type.
  CacheOptions o;
  o.delay = 4;
  auto bad = KvLayout::create(attention_spec(kHeads, kDim, 0), o, kernels::active());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("needs a quantized"), std::string::npos) << bad.message();
}

TEST(KvLayout, SaveLoadAndCloneRoundTrip) {
  for (auto [t, w, d] : {std::tuple{"f16", 0, 0}, std::tuple{"q8_0", 16, 0}, std::tuple{"turbo3", 0, 4}}) {
    auto L = layout(t, t, w, d);
    auto row = L->new_row();
    append(*L, **row, 37);
    std::string blob;
    (*row)->save(blob);
    auto copy = L->new_row();
    ASSERT_TRUE((*copy)->load(blob).is_ok()) << t;
    EXPECT_EQ((*copy)->length(), 37);
    auto cl = (*row)->clone();
    ASSERT_TRUE(cl.is_ok());
    append(*L, **row, 3);  // the original moves on; the copies do not
    EXPECT_EQ((*cl)->length(), 37);
    for (int64_t p = std::max(0, 37 - std::max(w, 1)); p < 37; ++p) {
      EXPECT_EQ(stored(*L, **copy, p, 1), expected(L->k_codec(), L->v_codec(), p, 1)) << t << " " << p;
      EXPECT_EQ(stored(*L, **cl, p, 1), expected(L->k_codec(), L->v_codec(), p, 1)) << t << " " << p;
    }
    EXPECT_EQ((*copy)->min_length(), (*cl)->min_length());
    // Truncated, foreign or non-empty targets are refused.
    auto t2 = L->new_row();
    EXPECT_FALSE((*t2)->load(std::string_view(blob).substr(0, blob.size() - 1)).is_ok());
    EXPECT_FALSE((*copy)->load(blob).is_ok());  // not empty
    auto other = layout("f16", "f16", 8);
    auto o2 = other->new_row();
    if (std::string(t) != "f16" || w != 8) {
      Status st = (*o2)->load(blob);
      EXPECT_FALSE(st.is_ok()) << t;
    }
  }
}

TEST(KvLayout, NamesAndBytesPerToken) {
  auto L = layout("q8_0", "turbo3", 512, 0);
  EXPECT_EQ(L->info().name, "kv q8_0/turbo3 ring 512");
  EXPECT_DOUBLE_EQ(L->info().bytes_per_token, kHeads * (68.0 + 26.0));
  EXPECT_EQ(L->bytes_for(0), 0);
  EXPECT_EQ(L->bytes_for(1), kPageTokens * kHeads * (68 + 26));
  auto bad = KvLayout::create(attention_spec(0, kDim, 0), CacheOptions{}, kernels::active());
  EXPECT_FALSE(bad.is_ok());
}

}  // namespace
}  // namespace specula
