// kernels/avx2/avx2.h — internal header of the AVX2/FMA/F16C kernels: the per-type
// entry points wired by table.cpp, small vector helpers, and the tiled gemm driver.
//
// Gemm design (integer dot products as in llama.cpp's AVX2 `ggml_vec_dot_*`):
// a type's traits `T` say how to unpack one weight block (`T::load_w`), how to load
// one activation block (`T::load_x`) and how to fold their product into a float
// accumulator (`T::dot`). `tile<T, R, C>` unpacks each weight block of R rows once
// and reuses it for C activation rows (register tiling for prefill). Every output
// element owns one accumulator updated block by block by the same `T::dot` and
// reduced by the same `T::finish`, so its value is independent of R, C, the tile it
// falls in and M (batch invariance); tile shapes only change speed.
// Only for translation units compiled with -mavx2 -mfma -mf16c. Does not thread
// (callers split n_rows) and never allocates.
#pragma once

// Exact-match code (activation quantizers, dequantizers) relies on mul and add not
// being fused behind our back; GCC fuses vector intrinsics under its C++ default
// -ffp-contract=fast. FMAs we want are written explicitly.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/quant_blocks.h"

namespace specula::kernels::avx2 {

// ---- entry points (convert.cpp, gemm_*.cpp, vector.cpp) ----
void quantize_row_f32(const float* x, void* y, int64_t n);
void quantize_row_q8_0(const float* x, void* y, int64_t n);
void quantize_row_q8_1(const float* x, void* y, int64_t n);
void quantize_row_q8_k(const float* x, void* y, int64_t n);

void dequantize_row_f32(const void* x, float* y, int64_t n);
void dequantize_row_f16(const void* x, float* y, int64_t n);
void dequantize_row_bf16(const void* x, float* y, int64_t n);
void dequantize_row_q4_0(const void* x, float* y, int64_t n);
void dequantize_row_q4_1(const void* x, float* y, int64_t n);
void dequantize_row_q5_0(const void* x, float* y, int64_t n);
void dequantize_row_q5_1(const void* x, float* y, int64_t n);
void dequantize_row_q8_0(const void* x, float* y, int64_t n);
void dequantize_row_q8_1(const void* x, float* y, int64_t n);
void dequantize_row_q2_k(const void* x, float* y, int64_t n);
void dequantize_row_q3_k(const void* x, float* y, int64_t n);
void dequantize_row_q4_k(const void* x, float* y, int64_t n);
void dequantize_row_q5_k(const void* x, float* y, int64_t n);
void dequantize_row_q6_k(const void* x, float* y, int64_t n);
void dequantize_row_q8_k(const void* x, float* y, int64_t n);
void dequantize_row_iq4_nl(const void* x, float* y, int64_t n);
void dequantize_row_iq4_xs(const void* x, float* y, int64_t n);

#define SPECULA_AVX2_GEMM(name)                                                               \
  void name(int64_t K, const void* w, size_t w_stride, int64_t n_rows, const void* xq,       \
            size_t xq_stride, int64_t m, float* y, int64_t ldy)
SPECULA_AVX2_GEMM(gemm_f32);
SPECULA_AVX2_GEMM(gemm_f16);
SPECULA_AVX2_GEMM(gemm_bf16);
SPECULA_AVX2_GEMM(gemm_q4_0);
SPECULA_AVX2_GEMM(gemm_q4_1);
SPECULA_AVX2_GEMM(gemm_q8_a);
SPECULA_AVX2_GEMM(gemm_q5_0);
SPECULA_AVX2_GEMM(gemm_q5_1);
SPECULA_AVX2_GEMM(gemm_q8_0);
SPECULA_AVX2_GEMM(gemm_q2_k);
SPECULA_AVX2_GEMM(gemm_q3_k);
SPECULA_AVX2_GEMM(gemm_q4_k);
SPECULA_AVX2_GEMM(gemm_q5_k);
SPECULA_AVX2_GEMM(gemm_q6_k);
SPECULA_AVX2_GEMM(gemm_iq4_nl);
SPECULA_AVX2_GEMM(gemm_iq4_xs);

float dot_f32(int64_t n, const float* a, const float* b);
void axpy_f32(int64_t n, float alpha, const float* x, float* y);
void scale_f32(int64_t n, float alpha, float* y);

// ---- helpers ----
inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

// Horizontal sum in a fixed order: (lo + hi) pairwise, then lanes.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256i loadu256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// 16 bytes of packed nibbles -> 32 bytes: low nibbles in bytes 0..15, high in 16..31.
inline __m256i unpack_nibbles16(const uint8_t* qs) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
  return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

// Bit j of a 32-bit word -> byte j = 0x10 if set, 0 otherwise.
inline __m256i bits_to_0x10(uint32_t bits) {
  const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000LL, 0x0101010101010101LL,
                                          0x0202020202020202LL, 0x0303030303030303LL);
  __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf);
  const __m256i mask = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  v = _mm256_cmpeq_epi8(_mm256_and_si256(v, mask), mask);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

// The IQ4 codebook (kIQ4NLValues) in both 128-bit lanes: _mm256_shuffle_epi8(codebook,
// indices 0..15) maps 4-bit indices to the int8 levels.
inline __m256i iq4_codebook() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
}

// Sum of adjacent int16 pairs as 8 int32.
inline __m256i sum_pairs16(__m256i p) { return _mm256_madd_epi16(p, _mm256_set1_epi16(1)); }

// ---- tiled gemm driver ----
struct GemmArgs {
  int64_t K;
  const uint8_t* w;  // first weight row of the tile
  size_t ws;
  const uint8_t* x;  // first activation row of the tile
  size_t xs;
  float* y;  // y[c * ldy + r * ys]
  int64_t ldy;
  int64_t ys = 1;
};

template <class T, int R, int C>
inline void tile(const GemmArgs& a) {
  typename T::Acc acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = T::zero();
  const int64_t nb = a.K / T::kBlock;
  if constexpr (C == 1) {
    // One activation row (decode): unpack and use each weight block at once, so only
    // one unpacked block is live (holding R of them spills YMM registers).
    for (int64_t b = 0; b < nb; ++b) {
      typename T::X xu;
      T::load_x(a.x, b, xu);
      for (int r = 0; r < R; ++r) {
        typename T::W wu;
        T::load_w(a.w + static_cast<size_t>(r) * a.ws, b, wu);
        acc[r][0] = T::dot(wu, xu, acc[r][0]);
      }
    }
  } else {
  for (int64_t b = 0; b < nb; ++b) {
    typename T::W wu[R];
    for (int r = 0; r < R; ++r) T::load_w(a.w + static_cast<size_t>(r) * a.ws, b, wu[r]);
    for (int c = 0; c < C; ++c) {
      typename T::X xu;
      T::load_x(a.x + static_cast<size_t>(c) * a.xs, b, xu);
      for (int r = 0; r < R; ++r) acc[r][c] = T::dot(wu[r], xu, acc[r][c]);
    }
  }
  }
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r)
      a.y[c * a.ldy + r * a.ys] = T::finish(acc[r][c], a.w + static_cast<size_t>(r) * a.ws,
                                     a.x + static_cast<size_t>(c) * a.xs, a.K);
}

// Runs tile<T, r, c> for runtime r <= R, c <= C.
template <class T, int R, int C>
inline void tile_rc(int r, int c, const GemmArgs& a) {
  if constexpr (R > 1) {
    if (r < R) return tile_rc<T, R - 1, C>(r, c, a);
  }
  if constexpr (C > 1) {
    if (c < C) return tile_rc<T, R, C - 1>(r, c, a);
  }
  tile<T, R, C>(a);
}

// RD: weight rows per tile at m == 1 (decode); RP x CP: tile for m > 1;
// MC: activation rows per cache block in prefill.
template <class T, int RD, int RP, int CP, int MC = 64>
void gemm_tiled(int64_t K, const void* w, size_t w_stride, int64_t n_rows, const void* xq,
                size_t xq_stride, int64_t m, float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(xq);
  if (m == 1) {
    // Decode streams the weights once. The RD rows of a tile come from RD separate
    // stretches of the row range (RD sequential streams per thread), which keeps more
    // memory requests in flight than one stream; the per-row result does not change.
    const int64_t q = n_rows / RD;
    for (int64_t i = 0; i < q; ++i) {
      GemmArgs a{K, wb + static_cast<size_t>(i) * w_stride, static_cast<size_t>(q) * w_stride, xb, xq_stride,
                 y + i, ldy, q};
      tile<T, RD, 1>(a);
    }
    for (int64_t r0 = q * RD; r0 < n_rows; ++r0) {
      const GemmArgs a{K, wb + static_cast<size_t>(r0) * w_stride, w_stride, xb, xq_stride, y + r0, ldy};
      tile<T, 1, 1>(a);
    }
    return;
  }
  for (int64_t i0 = 0; i0 < m; i0 += MC) {
    const int64_t i1 = std::min<int64_t>(m, i0 + MC);
    for (int64_t r0 = 0; r0 < n_rows; r0 += RP) {
      const int nr = static_cast<int>(std::min<int64_t>(RP, n_rows - r0));
      for (int64_t i = i0; i < i1; i += CP) {
        const int nc = static_cast<int>(std::min<int64_t>(CP, i1 - i));
        const GemmArgs a{K, wb + static_cast<size_t>(r0) * w_stride, w_stride,
                         xb + static_cast<size_t>(i) * xq_stride, xq_stride, y + i * ldy + r0,
                         ldy};
        tile_rc<T, RP, CP>(nr, nc, a);
      }
    }
  }
}

// Prefill for types whose weight unpack is costly (K-quants): unpack a panel of kPanel
// rows x all blocks once into a thread-local buffer, then run every activation row
// against it, CP at a time. Per output element the sequence of T::dot calls over the
// blocks and T::finish is the same as in tile<>, so results are bitwise identical to
// the other paths (batch invariance holds).
template <class T, int CP = 4, int64_t kPanel = 8>
void gemm_panel(int64_t K, const void* w, size_t w_stride, int64_t n_rows, const void* xq,
                size_t xq_stride, int64_t m, float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(xq);
  const int64_t nb = K / T::kBlock;
  thread_local std::vector<typename T::W> panel;
  if (panel.size() < static_cast<size_t>(kPanel * nb)) panel.resize(static_cast<size_t>(kPanel * nb));
  for (int64_t r0 = 0; r0 < n_rows; r0 += kPanel) {
    const int64_t nr = std::min<int64_t>(kPanel, n_rows - r0);
    for (int64_t r = 0; r < nr; ++r)
      for (int64_t b = 0; b < nb; ++b)
        T::load_w(wb + static_cast<size_t>(r0 + r) * w_stride, b, panel[static_cast<size_t>(r * nb + b)]);
    for (int64_t i0 = 0; i0 < m; i0 += CP) {
      const int nc = static_cast<int>(std::min<int64_t>(CP, m - i0));
      for (int64_t r = 0; r < nr; ++r) {
        typename T::Acc acc[CP];
        for (int c = 0; c < CP; ++c) acc[c] = T::zero();
        const typename T::W* wr = panel.data() + r * nb;
        for (int64_t b = 0; b < nb; ++b) {
          for (int c = 0; c < nc; ++c) {
            typename T::X xu;
            T::load_x(xb + static_cast<size_t>(i0 + c) * xq_stride, b, xu);
            acc[c] = T::dot(wr[b], xu, acc[c]);
          }
        }
        for (int c = 0; c < nc; ++c)
          y[(i0 + c) * ldy + r0 + r] = T::finish(acc[c], wb + static_cast<size_t>(r0 + r) * w_stride,
                                                 xb + static_cast<size_t>(i0 + c) * xq_stride, K);
      }
    }
  }
}

}  // namespace specula::kernels::avx2
