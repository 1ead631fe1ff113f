// kernels/avx512/attention.cpp — AVX-512 forms of the blocked attention kernels
// (kernels.h: pv_f32_rows, qk_rows16). Each output element gets exactly the FMA
// sequence of the AVX2 kernels (the same fused multiply-adds and adds per element, in
// the same order, only more lanes per instruction), so the avx2 and avx512 tiers give
// bitwise equal attention.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/avx512/avx512.h"

namespace specula::kernels::avx2 {
void qk_rows16(int64_t n, const float* k, int64_t nk, int64_t nq, const float* const* q, float* const* s);
}  // namespace specula::kernels::avx2

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
  // Keys in lanes: kt[d][j] = k[j][d] (lanes past nk zero), on the stack (no allocation,
  // and no std:: container instantiated in this AVX-512 translation unit, whose weak
  // symbols the linker could hand to code running on a CPU without AVX-512). Per query,
  // sixteen chains p[l] over d = 16t + l reproduce the AVX2 dot's two 8-lane accumulators
  // (acc0 lanes l < 8, acc1 lanes l - 8), then its reduction: (acc0 + acc1), the 128-bit
  // halves, the pairs, the last pair; then the scalar tail. Longer rows than the buffer
  // holds go to the AVX2 kernel, which gives the same bits.
  constexpr int64_t kMaxN = 512;
  if (n > kMaxN) return avx2::qk_rows16(n, k, nk, nq, q, s);
  alignas(64) float kt[16 * kMaxN];
  for (int64_t d = 0; d < n; ++d) {
    for (int64_t j = 0; j < nk; ++j) kt[d * 16 + j] = k[j * n + d];
    for (int64_t j = nk; j < 16; ++j) kt[d * 16 + j] = 0.0f;
  }
  const int64_t n16 = n / 16 * 16;
  const __mmask16 mask = static_cast<__mmask16>((1u << nk) - 1);
  for (int64_t i = 0; i < nq; ++i) {
    const float* qi = q[i];
    __m512 p[16];
    for (int l = 0; l < 16; ++l) p[l] = _mm512_setzero_ps();
    for (int64_t t = 0; t < n16; t += 16)
      for (int l = 0; l < 16; ++l)
        p[l] = _mm512_fmadd_ps(_mm512_loadu_ps(kt + (t + l) * 16), _mm512_set1_ps(qi[t + l]), p[l]);
    __m512 v[8];
    for (int l = 0; l < 8; ++l) v[l] = _mm512_add_ps(p[l], p[l + 8]);
    __m512 h[4];
    for (int l = 0; l < 4; ++l) h[l] = _mm512_add_ps(v[l], v[l + 4]);
    const __m512 a0 = _mm512_add_ps(h[0], h[2]), a1 = _mm512_add_ps(h[1], h[3]);
    __m512 sum = _mm512_add_ps(a0, a1);
    for (int64_t d = n16; d < n; ++d) sum = _mm512_fmadd_ps(_mm512_loadu_ps(kt + d * 16), _mm512_set1_ps(qi[d]), sum);
    _mm512_mask_storeu_ps(s[i], mask, sum);
  }
}

}  // namespace specula::kernels::avx512
