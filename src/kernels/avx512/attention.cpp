// kernels/avx512/attention.cpp — AVX-512 forms of the blocked attention kernels
// (kernels.h: pv_f32_rows, qk_rows16). Each output element gets exactly the FMA
// sequence of the AVX2 kernels (the same fused multiply-adds and adds per element, in
// the same order, only more lanes per instruction), so the avx2 and avx512 tiers give
// bitwise equal attention.
#include <immintrin.h>

// GCC 12's AVX-512 shuffle intrinsics start from _mm512_undefined_ps() and warn about it
// under -Wmaybe-uninitialized (a false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <cmath>
#include <cstdint>

#include "kernels/avx512/avx512.h"

namespace specula::kernels::avx512 {

void pv_f32_rows(int64_t n, const float* v, int64_t v_stride, int64_t nq, const float* const* p, const int64_t* k0,
                 const int64_t* k1, float* const* y) {
  const int64_t n64 = n / 64 * 64, n16 = n / 16 * 16;
  for (int64_t q = 0; q < nq; ++q) {
    const float* pq = p[q];  // pq[k - kb] for k in [kb, ke)
    float* yq = y[q];
    const int64_t kb = k0[q], ke = k1[q];
    int64_t i = 0;
    for (; i < n64; i += 64) {
      __m512 a0 = _mm512_loadu_ps(yq + i), a1 = _mm512_loadu_ps(yq + i + 16), a2 = _mm512_loadu_ps(yq + i + 32),
             a3 = _mm512_loadu_ps(yq + i + 48);
      for (int64_t k = kb; k < ke; ++k) {
        const float* vk = v + k * v_stride + i;
        const __m512 pk = _mm512_set1_ps(pq[k - kb]);
        a0 = _mm512_fmadd_ps(pk, _mm512_loadu_ps(vk), a0);
        a1 = _mm512_fmadd_ps(pk, _mm512_loadu_ps(vk + 16), a1);
        a2 = _mm512_fmadd_ps(pk, _mm512_loadu_ps(vk + 32), a2);
        a3 = _mm512_fmadd_ps(pk, _mm512_loadu_ps(vk + 48), a3);
      }
      _mm512_storeu_ps(yq + i, a0);
      _mm512_storeu_ps(yq + i + 16, a1);
      _mm512_storeu_ps(yq + i + 32, a2);
      _mm512_storeu_ps(yq + i + 48, a3);
    }
    for (; i < n16; i += 16) {
      __m512 a0 = _mm512_loadu_ps(yq + i);
      for (int64_t k = kb; k < ke; ++k) a0 = _mm512_fmadd_ps(_mm512_set1_ps(pq[k - kb]), _mm512_loadu_ps(v + k * v_stride + i), a0);
      _mm512_storeu_ps(yq + i, a0);
    }
    for (; i < n; ++i) {
      float a0 = yq[i];
      for (int64_t k = kb; k < ke; ++k) a0 = std::fma(pq[k - kb], v[k * v_stride + i], a0);
      yq[i] = a0;
    }
  }
}

void qk_rows16(int64_t n, const float* k, int64_t nk, int64_t nq, const float* const* q, float* const* s) {
  // Per query, one 16-lane accumulator per key: lane l of key j's accumulator is the
  // chain over d = 16t + l, which is the AVX2 dot's two 8-lane accumulators (acc0 lanes
  // l < 8, acc1 lanes l - 8) side by side. The sixteen accumulators are then reduced
  // together, each key by the AVX2 dot's own tree — (acc0 + acc1), the 128-bit halves,
  // the pairs, the last pair — with shuffles that move two keys per instruction; then
  // the scalar tail. No transpose of the keys, and the keys are read where they lie.
  // Key rows past nk read row 0 (their lanes are never stored).
  const float* kr[16];
  for (int64_t j = 0; j < 16; ++j) kr[j] = k + (j < nk ? j : 0) * n;
  const int64_t n16 = n / 16 * 16;
  const __mmask16 mask = static_cast<__mmask16>((1u << nk) - 1);
  // E's lane 4c + m holds key c + 4m; this puts key j in lane j.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  for (int64_t i = 0; i < nq; ++i) {
    const float* qi = q[i];
    __m512 A[16];
    for (int j = 0; j < 16; ++j) A[j] = _mm512_setzero_ps();
    for (int64_t t = 0; t < n16; t += 16) {
      const __m512 qv = _mm512_loadu_ps(qi + t);
      for (int j = 0; j < 16; ++j) A[j] = _mm512_fmadd_ps(_mm512_loadu_ps(kr[j] + t), qv, A[j]);
    }
    // (acc0 + acc1): B[p] lanes 0-7 key 2p, lanes 8-15 key 2p + 1.
    __m512 B[8];
    for (int p = 0; p < 8; ++p)
      B[p] = _mm512_add_ps(_mm512_shuffle_f32x4(A[2 * p], A[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_f32x4(A[2 * p], A[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    // 128-bit halves: C[c] quad m holds key 4c + m's four partial sums.
    __m512 C[4];
    for (int c = 0; c < 4; ++c)
      C[c] = _mm512_add_ps(_mm512_shuffle_f32x4(B[2 * c], B[2 * c + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_f32x4(B[2 * c], B[2 * c + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    // Pairs: D[d] quad m = [key 8d + m: h0 + h2, h1 + h3, key 8d + 4 + m: h0 + h2, h1 + h3].
    __m512 D[2];
    for (int d = 0; d < 2; ++d)
      D[d] = _mm512_add_ps(_mm512_shuffle_ps(C[2 * d], C[2 * d + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_ps(C[2 * d], C[2 * d + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    // The last pair: E quad m = [key m, key 4 + m, key 8 + m, key 12 + m].
    const __m512 E = _mm512_add_ps(_mm512_shuffle_ps(D[0], D[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(D[0], D[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 sum = _mm512_permutexvar_ps(order, E);
    if (n16 == n) {
      _mm512_mask_storeu_ps(s[i], mask, sum);
      continue;
    }
    alignas(64) float out[16];
    _mm512_store_ps(out, sum);
    for (int64_t j = 0; j < nk; ++j) {
      float acc = out[j];
      for (int64_t d = n16; d < n; ++d) acc = std::fma(kr[j][d], qi[d], acc);
      s[i][j] = acc;
    }
  }
}

}  // namespace specula::kernels::avx512
