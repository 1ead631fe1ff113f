// kernels/avx2/attention.cpp — AVX2/FMA/F16C attention and activation helpers:
// half·f32 dot, half axpy, gated GELU-tanh and softmax numerators with a vector exp.
// exp: Cody-Waite range reduction x = n*ln2 + r, |r| <= ln2/2, then a degree-6
// polynomial for e^r (relative error ~2e-7), scaled by 2^n through the exponent bits.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/fp16.h"

namespace specula::kernels::avx2 {
namespace {

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

inline __m256 exp_ps(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-87.3365478515625f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
  const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 res = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(underflow, res);
}

}  // namespace

float dot_f16_f32(int64_t n, const uint16_t* a, const float* b) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    const __m256 a1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i + 8)));
    acc0 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(a1, _mm256_loadu_ps(b + i + 8), acc1);
  }
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s = std::fma(fp16_to_fp32(a[i]), b[i], s);
  return s;
}

void axpy_f16_f32(int64_t n, float alpha, const uint16_t* x, float* y) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, xv, _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] = std::fma(alpha, fp16_to_fp32(x[i]), y[i]);
}

// The half row is converted to f32 once (exact), then each query runs the same FMA
// sequence as dot_f16_f32 / axpy_f16_f32 over the converted values.
namespace {
constexpr int64_t kMultiMax = 512;  // longest row converted on the stack; longer rows loop
// out[0, n8) = a[0, n8) as f32; n8 a multiple of 8, out 32-byte aligned.
inline void half_to_f32(const uint16_t* a, int64_t n8, float* out) {
  for (int64_t i = 0; i < n8; i += 8)
    _mm256_store_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i))));
}
}  // namespace

void dot_f16_f32_multi(int64_t n, const uint16_t* a, int64_t nq, const float* const* b, float* s) {
  if (n > kMultiMax) {
    for (int64_t q = 0; q < nq; ++q) s[q] = dot_f16_f32(n, a, b[q]);
    return;
  }
  alignas(32) float af[kMultiMax];
  const int64_t n16 = n / 16 * 16;
  half_to_f32(a, n16, af);
  for (int64_t q = 0; q < nq; ++q) {
    const float* bq = b[q];
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t i = 0; i < n16; i += 16) {
      acc0 = _mm256_fmadd_ps(_mm256_load_ps(af + i), _mm256_loadu_ps(bq + i), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_load_ps(af + i + 8), _mm256_loadu_ps(bq + i + 8), acc1);
    }
    float sum = hsum(_mm256_add_ps(acc0, acc1));
    for (int64_t i = n16; i < n; ++i) sum = std::fma(fp16_to_fp32(a[i]), bq[i], sum);
    s[q] = sum;
  }
}

void axpy_f16_f32_multi(int64_t n, const float* alpha, const uint16_t* x, int64_t nq, float* const* y) {
  if (n > kMultiMax) {
    for (int64_t q = 0; q < nq; ++q) axpy_f16_f32(n, alpha[q], x, y[q]);
    return;
  }
  alignas(32) float xf[kMultiMax];
  const int64_t n8 = n / 8 * 8;
  half_to_f32(x, n8, xf);
  for (int64_t q = 0; q < nq; ++q) {
    const __m256 va = _mm256_set1_ps(alpha[q]);
    float* yq = y[q];
    for (int64_t i = 0; i < n8; i += 8)
      _mm256_storeu_ps(yq + i, _mm256_fmadd_ps(va, _mm256_load_ps(xf + i), _mm256_loadu_ps(yq + i)));
    for (int64_t i = n8; i < n; ++i) yq[i] = std::fma(alpha[q], fp16_to_fp32(x[i]), yq[i]);
  }
}

// f32 rows: the loops of dot_f16_f32 / axpy_f16_f32 (and of their multi forms, which
// equal them) over values that are already f32. Tails use explicit fma in every one of
// these kernels, so the result never depends on whether the compiler vectorized a tail.
void dot_f32_multi(int64_t n, const float* a, int64_t nq, const float* const* b, float* s) {
  const int64_t n16 = n / 16 * 16;
  int64_t q = 0;
  // Four queries at a time: eight independent FMA chains hide the FMA latency; each
  // query's own operations are those of the one-query loop below.
  for (; q + 4 <= nq; q += 4) {
    __m256 acc0[4], acc1[4];
    for (int k = 0; k < 4; ++k) acc0[k] = acc1[k] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n16; i += 16) {
      const __m256 a0 = _mm256_loadu_ps(a + i), a1 = _mm256_loadu_ps(a + i + 8);
      for (int k = 0; k < 4; ++k) {
        acc0[k] = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b[q + k] + i), acc0[k]);
        acc1[k] = _mm256_fmadd_ps(a1, _mm256_loadu_ps(b[q + k] + i + 8), acc1[k]);
      }
    }
    for (int k = 0; k < 4; ++k) {
      float sum = hsum(_mm256_add_ps(acc0[k], acc1[k]));
      for (int64_t i = n16; i < n; ++i) sum = std::fma(a[i], b[q + k][i], sum);
      s[q + k] = sum;
    }
  }
  for (; q < nq; ++q) {
    const float* bq = b[q];
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t i = 0; i < n16; i += 16) {
      acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(bq + i), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(bq + i + 8), acc1);
    }
    float sum = hsum(_mm256_add_ps(acc0, acc1));
    for (int64_t i = n16; i < n; ++i) sum = std::fma(a[i], bq[i], sum);
    s[q] = sum;
  }
}

void axpy_f32_multi(int64_t n, const float* alpha, const float* x, int64_t nq, float* const* y) {
  const int64_t n8 = n / 8 * 8;
  for (int64_t q = 0; q < nq; ++q) {
    const __m256 va = _mm256_set1_ps(alpha[q]);
    float* yq = y[q];
    for (int64_t i = 0; i < n8; i += 8)
      _mm256_storeu_ps(yq + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(yq + i)));
    for (int64_t i = n8; i < n; ++i) yq[i] = std::fma(alpha[q], x[i], yq[i]);
  }
}

void pv_f32_rows(int64_t n, const float* v, int64_t v_stride, int64_t nq, const float* const* p, const int64_t* k0,
                 const int64_t* k1, float* const* y) {
  const int64_t n32 = n / 32 * 32, n8 = n / 8 * 8;
  for (int64_t q = 0; q < nq; ++q) {
    const float* pq = p[q];  // pq[k - kb] for k in [kb, ke)
    float* yq = y[q];
    const int64_t kb = k0[q], ke = k1[q];
    int64_t i = 0;
    for (; i < n32; i += 32) {
      __m256 a0 = _mm256_loadu_ps(yq + i), a1 = _mm256_loadu_ps(yq + i + 8), a2 = _mm256_loadu_ps(yq + i + 16),
             a3 = _mm256_loadu_ps(yq + i + 24);
      for (int64_t k = kb; k < ke; ++k) {
        const float* vk = v + k * v_stride + i;
        const __m256 pk = _mm256_set1_ps(pq[k - kb]);
        a0 = _mm256_fmadd_ps(pk, _mm256_loadu_ps(vk), a0);
        a1 = _mm256_fmadd_ps(pk, _mm256_loadu_ps(vk + 8), a1);
        a2 = _mm256_fmadd_ps(pk, _mm256_loadu_ps(vk + 16), a2);
        a3 = _mm256_fmadd_ps(pk, _mm256_loadu_ps(vk + 24), a3);
      }
      _mm256_storeu_ps(yq + i, a0);
      _mm256_storeu_ps(yq + i + 8, a1);
      _mm256_storeu_ps(yq + i + 16, a2);
      _mm256_storeu_ps(yq + i + 24, a3);
    }
    for (; i < n8; i += 8) {
      __m256 a0 = _mm256_loadu_ps(yq + i);
      for (int64_t k = kb; k < ke; ++k) a0 = _mm256_fmadd_ps(_mm256_set1_ps(pq[k - kb]), _mm256_loadu_ps(v + k * v_stride + i), a0);
      _mm256_storeu_ps(yq + i, a0);
    }
    for (; i < n; ++i) {
      float a0 = yq[i];
      for (int64_t k = kb; k < ke; ++k) a0 = std::fma(pq[k - kb], v[k * v_stride + i], a0);
      yq[i] = a0;
    }
  }
}

void qk_rows16(int64_t n, const float* k, int64_t nk, int64_t nq, const float* const* q, float* const* s) {
  float sj[64];
  for (int64_t j = 0; j < nk; ++j)
    for (int64_t i0 = 0; i0 < nq; i0 += 64) {
      const int64_t m = std::min<int64_t>(64, nq - i0);
      dot_f32_multi(n, k + j * n, m, q + i0, sj);
      for (int64_t i = 0; i < m; ++i) s[i0 + i][j] = sj[i];
    }
}

void gelu_tanh_mul(int64_t n, const float* gate, const float* up, float* out) {
  // tanh(u) = 1 - 2 / (exp(2u) + 1); 0.5*g*(1+tanh(u)) = g - g / (exp(2u) + 1)
  const __m256 c0 = _mm256_set1_ps(2.0f * 0.79788456080286535588f);
  const __m256 c1 = _mm256_set1_ps(2.0f * 0.79788456080286535588f * 0.044715f);
  const __m256 one = _mm256_set1_ps(1.0f);
  const auto eight = [&](const float* gp, const float* upp, float* op) {
    const __m256 g = _mm256_loadu_ps(gp);
    const __m256 g2 = _mm256_mul_ps(g, g);
    const __m256 two_u = _mm256_mul_ps(g, _mm256_fmadd_ps(c1, g2, c0));
    const __m256 e = exp_ps(two_u);
    const __m256 gl = _mm256_sub_ps(g, _mm256_div_ps(g, _mm256_add_ps(e, one)));
    _mm256_storeu_ps(op, _mm256_mul_ps(gl, _mm256_loadu_ps(upp)));
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) eight(gate + i, up + i, out + i);
  if (i < n) {
    // The tail through the same vector formula (padded), so an element's result does not
    // depend on where a call's range starts or ends (batch and thread-split invariance).
    alignas(32) float g8[8] = {}, u8[8] = {}, o8[8];
    std::copy(gate + i, gate + n, g8);
    std::copy(up + i, up + n, u8);
    eight(g8, u8, o8);
    std::copy(o8, o8 + (n - i), out + i);
  }
}

void scale_round_f16(int64_t n, float alpha, float* x) {
  const __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(x + i), a), _MM_FROUND_TO_NEAREST_INT)));
  for (; i < n; ++i) x[i] = _cvtsh_ss(_cvtss_sh(x[i] * alpha, _MM_FROUND_TO_NEAREST_INT));
}

float exp_sub_sum(int64_t n, float max, float* x) {
  const __m256 m = _mm256_set1_ps(max);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float s = hsum(acc);
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    s += x[i];
  }
  return s;
}

}  // namespace specula::kernels::avx2
