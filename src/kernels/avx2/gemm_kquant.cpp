// kernels/avx2/gemm_kquant.cpp — AVX2 gemm for the 256-element K-quant weight types
// Q4_K, Q5_K, Q6_K with Q8_K activations.
//
// Per super-block: unsigned weight quants (Q4_K/Q5_K 0..31, Q6_K 0..63) times the
// signed activations with maddubs, weighted by the sub-block scales with madd, summed
// exactly in int32; the mins (Q4_K/Q5_K) and the Q6_K -32 centring are applied
// through the activation bsums, also in int32. Then one FMA by d_w*d_x (and one by
// -dmin_w*d_x for the mins) into an 8-lane float accumulator. Block formulas as in
// llama.cpp's ggml_vec_dot_q*_K_q8_K (facts only). Tiling and batch invariance:
// avx2.h. Does not quantize activations (convert.cpp).
#include "kernels/avx2/avx2.h"
#include "kernels/quant_blocks.h"

namespace specula::kernels::avx2 {
namespace {

struct KBase {
  using Acc = __m256;
  using X = const BlockQ8_K*;
  static constexpr int kBlock = kQKK;
  static Acc zero() { return _mm256_setzero_ps(); }
  static float finish(Acc acc, const uint8_t*, const uint8_t*, int64_t) { return hsum(acc); }
  static void load_x(const uint8_t* row, int64_t b, X& x) {
    x = reinterpret_cast<const BlockQ8_K*>(row) + b;
  }
};

// Unpacked Q4_K/Q5_K super-block.
struct W45 {
  __m256i q[8];   // sub-block s: 32 unsigned quants
  __m256i sc[8];  // sub-block s scale broadcast as int16
  __m256i mins;   // 16 int16: min of sub-block g/2 (pairs with bsums[g])
  float d, dmin;
};

inline void unpack_scales_mins(const uint8_t* s, W45& w) {
  alignas(32) int16_t mins[16];
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    if (j < 4) {
      sc = s[j] & 63;
      m = s[j + 4] & 63;
    } else {
      sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
      m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
    w.sc[j] = _mm256_set1_epi16(static_cast<int16_t>(sc));
    mins[2 * j] = mins[2 * j + 1] = static_cast<int16_t>(m);
  }
  w.mins = _mm256_load_si256(reinterpret_cast<const __m256i*>(mins));
}

inline __m256 dot45(const W45& w, const BlockQ8_K* x, __m256 acc) {
  __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
  for (int j = 0; j < 8; j += 2) {
    const __m256i p0 = _mm256_maddubs_epi16(w.q[j], loadu256(x->qs + 32 * j));
    const __m256i p1 = _mm256_maddubs_epi16(w.q[j + 1], loadu256(x->qs + 32 * j + 32));
    s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(p0, w.sc[j]));
    s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(p1, w.sc[j + 1]));
  }
  const __m256i sumi = _mm256_add_epi32(s0, s1);
  const __m256i summ = _mm256_madd_epi16(loadu256(x->bsums), w.mins);
  acc = _mm256_fmadd_ps(_mm256_set1_ps(w.d * x->d), _mm256_cvtepi32_ps(sumi), acc);
  return _mm256_fnmadd_ps(_mm256_set1_ps(w.dmin * x->d), _mm256_cvtepi32_ps(summ), acc);
}

struct Q4K : KBase {
  using W = W45;
  static void load_w(const uint8_t* row, int64_t b, W& w) {
    const BlockQ4_K* blk = reinterpret_cast<const BlockQ4_K*>(row) + b;
    w.d = h2f(blk->d);
    w.dmin = h2f(blk->dmin);
    unpack_scales_mins(blk->scales, w);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int p = 0; p < 4; ++p) {
      const __m256i raw = loadu256(blk->qs + 32 * p);
      w.q[2 * p] = _mm256_and_si256(raw, m4);
      w.q[2 * p + 1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
    }
  }
  static Acc dot(const W& w, const X& x, Acc acc) { return dot45(w, x, acc); }
};

struct Q5K : KBase {
  using W = W45;
  static void load_w(const uint8_t* row, int64_t b, W& w) {
    const BlockQ5_K* blk = reinterpret_cast<const BlockQ5_K*>(row) + b;
    w.d = h2f(blk->d);
    w.dmin = h2f(blk->dmin);
    unpack_scales_mins(blk->scales, w);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i bit = _mm256_set1_epi8(0x10);
    __m256i hb = loadu256(blk->qh);  // bit s of byte l -> sub-block s, element l
    for (int p = 0; p < 4; ++p) {
      const __m256i raw = loadu256(blk->qs + 32 * p);
      const __m256i h_lo = _mm256_and_si256(_mm256_slli_epi16(hb, 4), bit);  // bit 2p
      const __m256i h_hi = _mm256_and_si256(_mm256_slli_epi16(hb, 3), bit);  // bit 2p+1
      w.q[2 * p] = _mm256_or_si256(_mm256_and_si256(raw, m4), h_lo);
      w.q[2 * p + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4), h_hi);
      hb = _mm256_srli_epi16(hb, 2);
    }
  }
  static Acc dot(const W& w, const X& x, Acc acc) { return dot45(w, x, acc); }
};

struct Q6K : KBase {
  struct W {
    __m256i q[8];   // elements 32t..32t+31 as unsigned 0..63
    __m256i sc[8];  // int16: scales[2t] in the low 128 bits, scales[2t+1] in the high
    __m256i sc16;   // int16: scales[0..15]
    float d;
  };
  static void load_w(const uint8_t* row, int64_t b, W& w) {
    const BlockQ6_K* blk = reinterpret_cast<const BlockQ6_K*>(row) + b;
    w.d = h2f(blk->d);
    const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales));
    w.sc16 = _mm256_cvtepi8_epi16(s8);
    alignas(32) int16_t s[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(s), w.sc16);
    for (int t = 0; t < 8; ++t) {
      w.sc[t] = _mm256_set_m128i(_mm_set1_epi16(s[2 * t + 1]), _mm_set1_epi16(s[2 * t]));
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i m30 = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; ++h) {
      const __m256i a = loadu256(blk->ql + 64 * h);
      const __m256i c = loadu256(blk->ql + 64 * h + 32);
      const __m256i hb = loadu256(blk->qh + 32 * h);
      w.q[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(a, m4),
                                       _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
      w.q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(c, m4),
                                       _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
      w.q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4),
                                       _mm256_and_si256(hb, m30));
      w.q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4),
                                       _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
    }
  }
  static Acc dot(const W& w, const X& x, Acc acc) {
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
    for (int t = 0; t < 8; t += 2) {
      const __m256i p0 = _mm256_maddubs_epi16(w.q[t], loadu256(x->qs + 32 * t));
      const __m256i p1 = _mm256_maddubs_epi16(w.q[t + 1], loadu256(x->qs + 32 * t + 32));
      s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(p0, w.sc[t]));
      s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(p1, w.sc[t + 1]));
    }
    // Centring: sum_g scales[g] * 32 * bsums[g].
    const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(loadu256(x->bsums), w.sc16), 5);
    const __m256i sumi = _mm256_sub_epi32(_mm256_add_epi32(s0, s1), off);
    return _mm256_fmadd_ps(_mm256_set1_ps(w.d * x->d), _mm256_cvtepi32_ps(sumi), acc);
  }
};

}  // namespace

// m >= 4 (prefill): unpack each row panel once (gemm_panel); decode: tiles.
SPECULA_AVX2_GEMM(gemm_q4_k) {
  if (m >= 4) return gemm_panel<Q4K>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
  gemm_tiled<Q4K, 4, 2, 4>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
}
SPECULA_AVX2_GEMM(gemm_q5_k) {
  if (m >= 4) return gemm_panel<Q5K>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
  gemm_tiled<Q5K, 4, 2, 4>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
}
SPECULA_AVX2_GEMM(gemm_q6_k) {
  if (m >= 4) return gemm_panel<Q6K>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
  gemm_tiled<Q6K, 4, 2, 4>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
}

}  // namespace specula::kernels::avx2
