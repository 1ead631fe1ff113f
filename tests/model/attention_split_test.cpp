// model/attention splits a (row, kv head) pair's work across threads when there are fewer
// pairs than threads and many keys (decode at a long context): keys for the scores,
// queries for the softmax, head_dim for the P·V product. These tests hold it to the
// contract of attention.h: every output is bitwise the one of the same query computed in
// one prefill call on one thread (the task path), for plain and quantized caches,
// sliding windows, grouped heads, odd thread counts and two rows in one step.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/attention.h"

namespace specula {
namespace {

struct Shape {
  int64_t n_heads, n_kv_heads, head_dim, window;
  std::string type_k, type_v;
};

struct Tokens {
  std::vector<float> q, k, v;  // [T, n_heads, hd], [T, n_kv_heads, hd] x2
};

Tokens make_tokens(const Shape& s, int64_t T, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Tokens t;
  for (int64_t i = 0; i < T * s.n_heads * s.head_dim; ++i) t.q.push_back(nd(rng));
  for (int64_t i = 0; i < T * s.n_kv_heads * s.head_dim; ++i) {
    t.k.push_back(nd(rng));
    t.v.push_back(nd(rng));
  }
  return t;
}

StateRows make_state(const Shape& s, int n_rows) {
  LayerSpec ls;
  ls.attention = attention_spec(s.n_kv_heads, s.head_dim, s.window);
  CacheOptions o;
  o.type_k = s.type_k;
  o.type_v = s.type_v;
  auto st = StateRows::create({ls}, o, kernels::active(), 4096);
  EXPECT_TRUE(st.is_ok()) << st.message();
  EXPECT_TRUE(st->reserve(n_rows).is_ok());
  for (int r = 0; r < n_rows; ++r) st->insert(st->new_row().value());
  return std::move(*st);
}

AttentionArgs args(const Shape& s, int64_t M, int32_t B, const int32_t* rows, const int64_t* offset,
                   const int32_t* token_row) {
  AttentionArgs a;
  a.n_heads = s.n_heads;
  a.n_kv_heads = s.n_kv_heads;
  a.head_dim = s.head_dim;
  a.scale = 0.125f;
  a.M = M;
  a.B = B;
  a.rows = rows;
  a.offset = offset;
  a.token_row = token_row;
  a.kt = &kernels::active();
  return a;
}

// All T tokens of one row in one call on one thread: out [T, n_heads, hd].
std::vector<float> prefill_one_thread(const Shape& s, const Tokens& t, int64_t T) {
  StateRows st = make_state(s, 1);
  ThreadPool pool(1);
  std::vector<int32_t> token_row(static_cast<size_t>(T), 0);
  const int32_t rows[1] = {0};
  const int64_t offset[2] = {0, T};
  std::vector<float> out(static_cast<size_t>(T * s.n_heads * s.head_dim));
  AttentionScratch scratch;
  attention(pool, args(s, T, 1, rows, offset, token_row.data()), st, t.q.data(), t.k.data(), t.v.data(), out.data(),
            scratch);
  return out;
}

// Rows r = 0..n-1 hold T[r] - n_decode tokens (prefilled together), then decode their last
// n_decode tokens one step at a time, all rows in each step, on n_threads threads. Every
// output is compared bitwise with prefill_one_thread of that row.
void check(const Shape& s, const std::vector<int64_t>& T, int64_t n_decode, int n_threads) {
  SCOPED_TRACE("heads " + std::to_string(s.n_heads) + "/" + std::to_string(s.n_kv_heads) + " hd " +
               std::to_string(s.head_dim) + " window " + std::to_string(s.window) + " " + s.type_k + "/" + s.type_v +
               " threads " + std::to_string(n_threads) + " rows " + std::to_string(T.size()));
  const int32_t B = static_cast<int32_t>(T.size());
  const int64_t QD = s.n_heads * s.head_dim, KD = s.n_kv_heads * s.head_dim;
  std::vector<Tokens> tok;
  std::vector<std::vector<float>> ref;
  for (int32_t b = 0; b < B; ++b) {
    tok.push_back(make_tokens(s, T[b], 100 + static_cast<uint32_t>(b)));
    ref.push_back(prefill_one_thread(s, tok[b], T[b]));
  }
  StateRows st = make_state(s, B);
  ThreadPool pool(n_threads);
  AttentionScratch scratch;
  std::vector<int32_t> rows(B);
  for (int32_t b = 0; b < B; ++b) rows[b] = b;
  // The prefill: rows packed one after another.
  {
    std::vector<int64_t> offset{0};
    std::vector<int32_t> token_row;
    std::vector<float> q, k, v;
    for (int32_t b = 0; b < B; ++b) {
      const int64_t n = T[b] - n_decode;
      offset.push_back(offset.back() + n);
      token_row.insert(token_row.end(), static_cast<size_t>(n), b);
      q.insert(q.end(), tok[b].q.begin(), tok[b].q.begin() + n * QD);
      k.insert(k.end(), tok[b].k.begin(), tok[b].k.begin() + n * KD);
      v.insert(v.end(), tok[b].v.begin(), tok[b].v.begin() + n * KD);
    }
    std::vector<float> out(static_cast<size_t>(offset.back() * QD));
    attention(pool, args(s, offset.back(), B, rows.data(), offset.data(), token_row.data()), st, q.data(), k.data(),
              v.data(), out.data(), scratch);
    for (int32_t b = 0; b < B; ++b) st.advance(b, T[b] - n_decode);
  }
  for (int64_t step = 0; step < n_decode; ++step) {
    std::vector<int64_t> offset(static_cast<size_t>(B) + 1);
    std::vector<int32_t> token_row(static_cast<size_t>(B));
    std::vector<float> q, k, v;
    for (int32_t b = 0; b < B; ++b) {
      offset[b + 1] = b + 1;
      token_row[b] = b;
      const int64_t p = T[b] - n_decode + step;
      q.insert(q.end(), tok[b].q.begin() + p * QD, tok[b].q.begin() + (p + 1) * QD);
      k.insert(k.end(), tok[b].k.begin() + p * KD, tok[b].k.begin() + (p + 1) * KD);
      v.insert(v.end(), tok[b].v.begin() + p * KD, tok[b].v.begin() + (p + 1) * KD);
    }
    std::vector<float> out(static_cast<size_t>(B * QD));
    attention(pool, args(s, B, B, rows.data(), offset.data(), token_row.data()), st, q.data(), k.data(), v.data(),
              out.data(), scratch);
    for (int32_t b = 0; b < B; ++b) {
      st.advance(b, 1);
      const int64_t p = T[b] - n_decode + step;
      ASSERT_EQ(0, std::memcmp(out.data() + b * QD, ref[b].data() + p * QD, static_cast<size_t>(QD) * sizeof(float)))
          << "row " << b << " position " << p;
    }
  }
}

TEST(AttentionSplit, DecodeEqualsOneThreadPrefillBitwise) {
  const std::vector<Shape> shapes = {
      {4, 1, 256, 0, "f16", "f16"},       // Gemma 3 270M's global layers
      {4, 1, 256, 300, "f16", "f16"},     // a sliding window shorter than the context
      {6, 2, 128, 0, "q8_0", "q8_0"},     // grouped heads, block codecs (range decode)
      {2, 1, 64, 0, "turbo4", "turbo3"},  // rotated codecs (whole-vector decode)
      {3, 1, 80, 0, "f32", "bf16"},       // head_dim not a power of two
  };
  for (const Shape& s : shapes) {
    for (int n_threads : {2, 3}) {
      check(s, {700}, 3, n_threads);
      if (HasFatalFailure()) return;
    }
    check(s, {520, 300}, 2, 3);  // two rows, fewer pairs than threads: pair after pair
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace specula
