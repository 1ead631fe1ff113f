// Tests for state/state_rows: a group built from layer specs; membership (insert after
// reserve, filter in a new order, extract, clone, reset) applies to every layer and keeps
// rows independent; a transaction resolves each row to its own keep; cuts a layer cannot
// serve are refused with nothing changed; memory accounting and errors name the layer.
#include <gtest/gtest.h>

#include <vector>

#include "core/thread_pool.h"
#include "state/kv_layout.h"
#include "state/state_rows.h"

namespace specula {
namespace {

constexpr int64_t kHeads = 1, kDim = 32;

std::vector<LayerSpec> specs() {
  std::vector<LayerSpec> s(3);
  s[0].attention = attention_spec(kHeads, kDim, 0);  // full
  s[1].attention = attention_spec(kHeads, kDim, 8);  // ring of 8
  s[2].attention = attention_spec(kHeads, kDim, 0);
  return s;
}

ThreadPool& pool() {
  static ThreadPool p(1);
  return p;
}

// Appends n positions (values from `salt` and the position) to every layer of a row.
void append(StateRows& st, int32_t row, int64_t n, int salt) {
  std::vector<float> k(n * kHeads * kDim), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    const int64_t p = st.length(row) + static_cast<int64_t>(i) / kDim;
    k[i] = static_cast<float>((p * 31 + salt * 7 + static_cast<int64_t>(i) % kDim) % 97) / 10.0f;
    v[i] = -k[i];
  }
  for (int64_t il = 0; il < st.n_layers(); ++il) {
    const KvLayout* L = st.layout_as<KvLayout>(il);
    KvStage stage;
    L->encode(pool(), k.data(), v.data(), n, stage);
    L->commit(st.layer_row(row, il), stage, 0, n);
  }
  st.advance(row, n);
}

std::string snapshot(const StateRows& st, int32_t row) {
  std::string s;
  for (int64_t il = 0; il < st.n_layers(); ++il) st.layer_row(row, il).save(s);
  return s;
}

StateRows group(int32_t rows, const std::string& type = "q8_0") {
  CacheOptions o;
  o.type_k = o.type_v = type;
  auto st = StateRows::create(specs(), o, kernels::active(), 100);
  EXPECT_TRUE(st.is_ok()) << st.message();
  EXPECT_TRUE(st->reserve(rows).is_ok());
  for (int32_t r = 0; r < rows; ++r) st->insert(st->new_row().value());
  return std::move(st).value();
}

TEST(StateRows, MembershipKeepsRowsIndependent) {
  StateRows st = group(3);
  append(st, 0, 5, 0);
  append(st, 1, 12, 1);
  append(st, 2, 3, 2);
  const std::string r0 = snapshot(st, 0), r1 = snapshot(st, 1), r2 = snapshot(st, 2);
  auto ex = st.extract(1);
  ASSERT_TRUE(ex.is_ok());
  EXPECT_EQ(ex->length, 12);
  const int32_t keep[2] = {2, 0};  // retire row 1, reorder
  st.filter(keep);
  ASSERT_EQ(st.n_rows(), 2);
  EXPECT_EQ(snapshot(st, 0), r2);
  EXPECT_EQ(snapshot(st, 1), r0);
  // Re-insert the extracted row: it continues exactly where it was.
  ASSERT_TRUE(st.reserve(1).is_ok());
  const int32_t back = st.insert(std::move(ex).value());
  EXPECT_EQ(back, 2);
  EXPECT_EQ(snapshot(st, back), r1);
  auto cl = st.clone();
  ASSERT_TRUE(cl.is_ok());
  append(st, 0, 4, 9);
  EXPECT_EQ(snapshot(*cl, 0), r2);  // the clone did not move
  ASSERT_TRUE(st.reset(1).is_ok());
  EXPECT_EQ(st.length(1), 0);
  EXPECT_EQ(st.length(2), 12);
  st.clear();
  EXPECT_EQ(st.n_rows(), 0);
}

TEST(StateRows, TransactionResolvesEachRowToItsKeep) {
  StateRows st = group(3), ref = group(3);
  for (int32_t r = 0; r < 3; ++r) {
    append(st, r, 6 + r, r);
    append(ref, r, 6 + r, r);
  }
  const int32_t rows[2] = {0, 2};
  st.begin(rows);
  for (int32_t r : rows) append(st, r, 7, 100 + r);  // crosses row 2's ring wrap
  append(st, 1, 2, 1);                               // a row outside the transaction
  const int64_t keep[2] = {3, 0};
  ASSERT_TRUE(st.resolve(rows, keep).is_ok());
  EXPECT_EQ(st.length(0), 9);
  EXPECT_EQ(st.length(1), 9);
  EXPECT_EQ(st.length(2), 8);
  append(ref, 0, 3, 100);
  append(ref, 1, 2, 1);
  EXPECT_EQ(snapshot(st, 0), snapshot(ref, 0));
  EXPECT_EQ(snapshot(st, 1), snapshot(ref, 1));
  EXPECT_EQ(snapshot(st, 2), snapshot(ref, 2));
}

TEST(StateRows, RefusedCutsChangeNothing) {
  StateRows st = group(1, "f16");
  append(st, 0, 20, 0);
  const std::string before = snapshot(st, 0);
  Status s = st.truncate(0, 12);  // the ring of 8 wrapped: needs length >= 19
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("shortest reusable prefix 19"), std::string::npos) << s.message();
  EXPECT_EQ(st.length(0), 20);
  EXPECT_EQ(snapshot(st, 0), before);
  EXPECT_EQ(st.row(0).min_length(), 19);
  EXPECT_TRUE(st.truncate(0, 19).is_ok());
  EXPECT_EQ(st.length(0), 19);
  EXPECT_FALSE(st.truncate(0, 25).is_ok());
}

TEST(StateRows, MemoryAndDescription) {
  StateRows st = group(2, "q4_0");
  EXPECT_EQ(st.describe(), "2 x kv q4_0/q4_0, 1 x kv q4_0/q4_0 ring 8");
  EXPECT_DOUBLE_EQ(st.bytes_per_token(), 3 * 2 * 18.0);
  EXPECT_EQ(st.bytes(), 0);
  append(st, 0, 10, 0);
  EXPECT_EQ(st.bytes(), st.bytes_for(10));
  EXPECT_EQ(st.row(0).bytes(), st.bytes_for(10));
  EXPECT_LT(st.bytes_for(1000), 3 * st.layout(0).bytes_for(1000));  // the ring layer is capped
}

TEST(StateRows, LayoutErrorsNameTheLayer) {
  CacheOptions o;
  o.type_v = "q5_9";
  auto st = StateRows::create(specs(), o, kernels::active(), 100);
  ASSERT_FALSE(st.is_ok());
  // An unknown name is wrong for every layer: named once, with the flag, without a layer.
  EXPECT_NE(st.message().find("unknown cache type 'q5_9'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--cache-type-v"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("layer"), std::string::npos) << st.message();
  std::vector<LayerSpec> odd = specs();
  odd[2].attention.head_dim_k = odd[2].attention.head_dim_v = 48;
  o.type_v = "turbo4";
  st = StateRows::create(odd, o, kernels::active(), 100);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("layer 2"), std::string::npos) << st.message();
  EXPECT_FALSE(StateRows::create({}, CacheOptions{}, kernels::active(), 100).is_ok());
  EXPECT_FALSE(StateRows::create(specs(), CacheOptions{}, kernels::active(), 0).is_ok());
  LayerSpec rec;
  rec.kind = LayerKind::kRecurrent;  // no rule
  EXPECT_FALSE(StateRows::create({rec}, CacheOptions{}, kernels::active(), 100).is_ok());
}

}  // namespace
}  // namespace specula
