// kernels/avx2/gemm_legacy.cpp — AVX2 gemm for the 32-element block types: Q4_0,
// Q5_0, Q8_0, IQ4_NL (with Q8_0 activations) and Q4_1, Q5_1, Q8_A (with Q8_1 activations).
//
// Per block: the exact int32 sum of qw*qx is formed with maddubs/madd (unsigned
// weights times signed activations; the Q4_0/Q5_0 centring offset is subtracted as
// offset*sum(qx), Q8_0 uses the sign trick; IQ4_NL looks its 4-bit indices up in the
// codebook, which gives int8 weights, and then is Q8_0), converted to float and folded into an
// 8-lane accumulator with one FMA by (d_w*d_x); Q4_1/Q5_1 add m_w*s_x into lane 0.
// Same block formulas as llama.cpp's ggml_vec_dot_q*_q8_* (facts only). Tiling and
// batch invariance: avx2.h. Does not quantize activations (convert.cpp).
#include "kernels/avx2/avx2.h"
#include "core/quant_blocks.h"

#include <vector>

namespace specula::kernels::avx2 {
namespace {

// Activation blocks Q8_0: q, d and offset*sum over pairs (for centred weights).
template <int kOffset>
struct XQ8_0 {
  __m256i q;
  __m256i off;  // int16 pairs: kOffset * (q[2i] + q[2i+1])
  __m256 d;
};

template <int kOffset>
inline void load_x_q8_0(const uint8_t* row, int64_t b, XQ8_0<kOffset>& x) {
  const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
  x.q = loadu256(blk->qs);
  if constexpr (kOffset != 0) x.off = _mm256_maddubs_epi16(_mm256_set1_epi8(kOffset), x.q);
  x.d = _mm256_set1_ps(h2f(blk->d));
}

struct UnsignedW {
  __m256i q;  // unsigned quants 0..31
  __m256 d;
};

template <int kOffset>
inline __m256 dot_centred(const UnsignedW& w, const XQ8_0<kOffset>& x, __m256 acc) {
  const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(w.q, x.q), x.off);
  return _mm256_fmadd_ps(_mm256_mul_ps(w.d, x.d), _mm256_cvtepi32_ps(sum_pairs16(p)), acc);
}

struct QuantBase {
  using Acc = __m256;
  static constexpr int kBlock = kQK;
  static Acc zero() { return _mm256_setzero_ps(); }
  static float finish(Acc acc, const uint8_t*, const uint8_t*, int64_t) { return hsum(acc); }
};

struct Q4_0 : QuantBase {
  using Block = BlockQ4_0;
  using W = UnsignedW;
  using X = XQ8_0<8>;
  static void load_w(const uint8_t* row, int64_t b, W& w) {
    const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
    w.q = unpack_nibbles16(blk->qs);
    w.d = _mm256_set1_ps(h2f(blk->d));
  }
  static void load_x(const uint8_t* row, int64_t b, X& x) { load_x_q8_0(row, b, x); }
  static Acc dot(const W& w, const X& x, Acc acc) { return dot_centred(w, x, acc); }
};

struct Q5_0 : QuantBase {
  using Block = BlockQ5_0;
  using W = UnsignedW;
  using X = XQ8_0<16>;
  static void load_w(const uint8_t* row, int64_t b, W& w) {
    const BlockQ5_0* blk = reinterpret_cast<const BlockQ5_0*>(row) + b;
    uint32_t qh;
    __builtin_memcpy(&qh, blk->qh, 4);
    w.q = _mm256_or_si256(unpack_nibbles16(blk->qs), bits_to_0x10(qh));
    w.d = _mm256_set1_ps(h2f(blk->d));
  }
  static void load_x(const uint8_t* row, int64_t b, X& x) { load_x_q8_0(row, b, x); }
  static Acc dot(const W& w, const X& x, Acc acc) { return dot_centred(w, x, acc); }
};

struct Q8_0 : QuantBase {
  struct W {
    __m256i q;
    __m256i aq;
    __m256 d;
  };
  using X = XQ8_0<0>;
  static void load_w(const uint8_t* row, int64_t b, W& w) {
    const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
    w.q = loadu256(blk->qs);
    w.aq = _mm256_abs_epi8(w.q);
    w.d = _mm256_set1_ps(h2f(blk->d));
  }
  static void load_x(const uint8_t* row, int64_t b, X& x) { load_x_q8_0(row, b, x); }
  static Acc dot(const W& w, const X& x, Acc acc) {
    const __m256i p = _mm256_maddubs_epi16(w.aq, _mm256_sign_epi8(x.q, w.q));
    return _mm256_fmadd_ps(_mm256_mul_ps(w.d, x.d), _mm256_cvtepi32_ps(sum_pairs16(p)), acc);
  }
};

// IQ4_NL: the codebook lookup turns a block into a Q8_0 block (same d, q = level), so
// it runs Q8_0's dot: sum_b (d_w*d_x) * sum_j level_j * qx_j, as the generic reference.
struct IQ4_NL : QuantBase {
  using Block = BlockIQ4_NL;
  using W = Q8_0::W;
  using X = XQ8_0<0>;
  static void load_w(const uint8_t* row, int64_t b, W& w) {
    const BlockIQ4_NL* blk = reinterpret_cast<const BlockIQ4_NL*>(row) + b;
    w.q = _mm256_shuffle_epi8(iq4_codebook(), unpack_nibbles16(blk->qs));
    w.aq = _mm256_abs_epi8(w.q);
    w.d = _mm256_set1_ps(h2f(blk->d));
  }
  static void load_x(const uint8_t* row, int64_t b, X& x) { load_x_q8_0(row, b, x); }
  static Acc dot(const W& w, const X& x, Acc acc) { return Q8_0::dot(w, x, acc); }
};

// Q4_1 / Q5_1 with Q8_1 activations: sum_b (d_w*d_x)*sum(q*qx) + m_w*s_x.
struct AffineW {
  __m256i q;
  __m256 d;
  float m;
};
struct XQ8_1 {
  __m256i q;
  __m256 d;
  float s;
};
inline void load_x_q8_1(const uint8_t* row, int64_t b, XQ8_1& x) {
  const BlockQ8_1* blk = reinterpret_cast<const BlockQ8_1*>(row) + b;
  x.q = loadu256(blk->qs);
  x.d = _mm256_set1_ps(h2f(blk->d));
  x.s = h2f(blk->s);
}
inline __m256 dot_affine(const AffineW& w, const XQ8_1& x, __m256 acc) {
  const __m256i p = _mm256_maddubs_epi16(w.q, x.q);
  acc = _mm256_fmadd_ps(_mm256_mul_ps(w.d, x.d), _mm256_cvtepi32_ps(sum_pairs16(p)), acc);
  return _mm256_add_ps(acc, _mm256_setr_ps(w.m * x.s, 0, 0, 0, 0, 0, 0, 0));
}

struct Q4_1 : QuantBase {
  using W = AffineW;
  using X = XQ8_1;
  static void load_w(const uint8_t* row, int64_t b, W& w) {
    const BlockQ4_1* blk = reinterpret_cast<const BlockQ4_1*>(row) + b;
    w.q = unpack_nibbles16(blk->qs);
    w.d = _mm256_set1_ps(h2f(blk->d));
    w.m = h2f(blk->m);
  }
  static void load_x(const uint8_t* row, int64_t b, X& x) { load_x_q8_1(row, b, x); }
  static Acc dot(const W& w, const X& x, Acc acc) { return dot_affine(w, x, acc); }
};

// Q8_A (x = d q + m, q int8, f32 d and m): Q8_0's sign trick for the int8 x int8 dot, the
// min term as Q4_1's.
struct Q8_A : QuantBase {
  struct W {
    __m256i q;
    __m256i aq;
    __m256 d;
    float m;
  };
  using X = XQ8_1;
  static void load_w(const uint8_t* row, int64_t b, W& w) {
    const BlockQ8_A* blk = reinterpret_cast<const BlockQ8_A*>(row) + b;
    w.q = loadu256(blk->qs);
    w.aq = _mm256_abs_epi8(w.q);
    w.d = _mm256_set1_ps(blk->d);
    w.m = blk->m;
  }
  static void load_x(const uint8_t* row, int64_t b, X& x) { load_x_q8_1(row, b, x); }
  static Acc dot(const W& w, const X& x, Acc acc) {
    const __m256i p = _mm256_maddubs_epi16(w.aq, _mm256_sign_epi8(x.q, w.q));
    acc = _mm256_fmadd_ps(_mm256_mul_ps(w.d, x.d), _mm256_cvtepi32_ps(sum_pairs16(p)), acc);
    return _mm256_add_ps(acc, _mm256_setr_ps(w.m * x.s, 0, 0, 0, 0, 0, 0, 0));
  }
};

struct Q5_1 : QuantBase {
  using W = AffineW;
  using X = XQ8_1;
  static void load_w(const uint8_t* row, int64_t b, W& w) {
    const BlockQ5_1* blk = reinterpret_cast<const BlockQ5_1*>(row) + b;
    uint32_t qh;
    __builtin_memcpy(&qh, blk->qh, 4);
    w.q = _mm256_or_si256(unpack_nibbles16(blk->qs), bits_to_0x10(qh));
    w.d = _mm256_set1_ps(h2f(blk->d));
    w.m = h2f(blk->m);
  }
  static void load_x(const uint8_t* row, int64_t b, X& x) { load_x_q8_1(row, b, x); }
  static Acc dot(const W& w, const X& x, Acc acc) { return dot_affine(w, x, acc); }
};

}  // namespace

namespace {
// Prefill path for centred types (Q4_0, Q5_0) and IQ4_NL (offset 0): unpack a panel of
// weight rows once into Q8_0 blocks (q - offset as int8, the same half scale) and run the
// Q8_0 tiles over all activation rows. Each block's int32 lane sums are the same
// integers either way and the float ops per block are identical (fma(d_w*d_x, lanes,
// acc), then hsum), so results are bitwise equal to the unpack-per-tile path (batch
// invariance holds).
template <class T, int kOffset>
void gemm_repacked(int64_t K, const void* w, size_t w_stride, int64_t n_rows, const void* xq,
                   size_t xq_stride, int64_t m, float* y, int64_t ldy) {
  constexpr int64_t kPanel = 16;
  const int64_t nb = K / kQK;
  const size_t q8_stride = static_cast<size_t>(nb) * sizeof(BlockQ8_0);
  thread_local std::vector<BlockQ8_0> panel;
  if (panel.size() < static_cast<size_t>(kPanel * nb)) panel.resize(static_cast<size_t>(kPanel * nb));
  const auto* wb = static_cast<const uint8_t*>(w);
  const __m256i off = _mm256_set1_epi8(kOffset);
  for (int64_t r0 = 0; r0 < n_rows; r0 += kPanel) {
    const int64_t nr = std::min<int64_t>(kPanel, n_rows - r0);
    for (int64_t r = 0; r < nr; ++r) {
      const uint8_t* row = wb + static_cast<size_t>(r0 + r) * w_stride;
      for (int64_t b = 0; b < nb; ++b) {
        typename T::W u;
        T::load_w(row, b, u);
        BlockQ8_0& dst = panel[static_cast<size_t>(r * nb + b)];
        dst.d = reinterpret_cast<const typename T::Block*>(row)[b].d;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst.qs), _mm256_sub_epi8(u.q, off));
      }
    }
    gemm_tiled<Q8_0, 4, 2, 4>(K, panel.data(), q8_stride, nr, xq, xq_stride, m, y + r0, ldy);
  }
}
}  // namespace

// Small m (2..kSmallMLegacy: speculative verify windows, small batches): one weight row per
// tile against up to 8 activation rows, so each weight block is unpacked once per row
// and used for every column. Same T::dot sequence per element as every other path.
constexpr int64_t kSmallMLegacy = 8;

SPECULA_AVX2_GEMM(gemm_q4_0) {
  if (m > kSmallMLegacy) return gemm_repacked<Q4_0, 8>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
  if (m > 1) return gemm_tiled<Q4_0, 4, 1, 8>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
  gemm_tiled<Q4_0, 4, 2, 4>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
}
SPECULA_AVX2_GEMM(gemm_q5_0) {
  if (m > kSmallMLegacy) return gemm_repacked<Q5_0, 16>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
  if (m > 1) return gemm_tiled<Q5_0, 4, 1, 8>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
  gemm_tiled<Q5_0, 4, 2, 4>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
}
SPECULA_AVX2_GEMM(gemm_q8_0) {
  if (m > 1 && m <= kSmallMLegacy) return gemm_tiled<Q8_0, 4, 1, 8>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
  gemm_tiled<Q8_0, 4, 2, 4>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
}
SPECULA_AVX2_GEMM(gemm_iq4_nl) {
  if (m > kSmallMLegacy) return gemm_repacked<IQ4_NL, 0>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
  if (m > 1) return gemm_tiled<IQ4_NL, 4, 1, 8>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
  gemm_tiled<IQ4_NL, 4, 2, 4>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
}
SPECULA_AVX2_GEMM(gemm_q4_1) { gemm_tiled<Q4_1, 4, 2, 4>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy); }
SPECULA_AVX2_GEMM(gemm_q8_a) {
  if (m > 1 && m <= kSmallMLegacy) return gemm_tiled<Q8_A, 4, 1, 8>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
  gemm_tiled<Q8_A, 4, 2, 4>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
}
SPECULA_AVX2_GEMM(gemm_q5_1) { gemm_tiled<Q5_1, 4, 2, 4>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy); }

}  // namespace specula::kernels::avx2
