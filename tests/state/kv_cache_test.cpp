// Tests for state/kv_cache: ring slots, advance/trim bounds, rollback limits of ring layers.
#include "state/kv_cache.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/fp16.h"

namespace specula {
namespace {

std::vector<float> vec(float x, int64_t n) { return std::vector<float>(static_cast<size_t>(n), x); }

TEST(KvCache, FullAndRingLayersStoreAndReadBack) {
  auto c = KvCache::create({{1, 4, 0}, {1, 4, 8}}, 2, 64, 4);
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->capacity(0), 64);
  EXPECT_EQ(c->capacity(1), 12);
  for (int64_t p = 0; p < 30; ++p) {
    for (int64_t il = 0; il < 2; ++il) c->write(il, 1, p, vec(float(p), 4).data(), vec(-float(p), 4).data());
    ASSERT_TRUE(c->advance(1, 1).is_ok());
  }
  EXPECT_EQ(c->length(1), 30);
  EXPECT_EQ(c->length(0), 0);
  EXPECT_EQ(fp16_to_fp32(c->k(0, 1, 3)[0]), 3.0f);
  // ring keeps the last 12 positions
  EXPECT_EQ(c->oldest(1, 1), 18);
  for (int64_t p = 18; p < 30; ++p) {
    EXPECT_EQ(fp16_to_fp32(c->k(1, 1, p)[2]), float(p));
    EXPECT_EQ(fp16_to_fp32(c->v(1, 1, p)[3]), -float(p));
  }
}

TEST(KvCache, TrimWithinRollbackBudgetThenRefuses) {
  auto c = KvCache::create({{1, 2, 8}}, 1, 100, 4);
  ASSERT_TRUE(c.is_ok());
  for (int64_t p = 0; p < 40; ++p) {
    c->write(0, 0, p, vec(1, 2).data(), vec(1, 2).data());
    ASSERT_TRUE(c->advance(0, 1).is_ok());
  }
  // ring holds [28, 40); new length L needs [L-7, L) -> L-7 >= 28 -> L >= 35
  EXPECT_TRUE(c->trim(0, 5).is_ok());  // L = 35
  EXPECT_EQ(c->length(0), 35);
  Status bad = c->trim(0, 1);          // L = 34 needs position 27
  EXPECT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("window needs position 27"), std::string::npos) << bad.message();
  EXPECT_EQ(c->length(0), 35);  // unchanged on error
  EXPECT_FALSE(c->trim(0, 36).is_ok());
  c->clear(0);
  EXPECT_EQ(c->length(0), 0);
  EXPECT_EQ(c->oldest(0, 0), 0);
}

TEST(KvCache, AdvancePastContextFails) {
  auto c = KvCache::create({{1, 2, 0}}, 1, 10, 0);
  ASSERT_TRUE(c.is_ok());
  EXPECT_TRUE(c->advance(0, 10).is_ok());
  EXPECT_FALSE(c->advance(0, 1).is_ok());
  EXPECT_FALSE(KvCache::create({}, 1, 10).is_ok());
  EXPECT_FALSE(KvCache::create({{1, 2, 0}}, 0, 10).is_ok());
}

}  // namespace
}  // namespace specula
