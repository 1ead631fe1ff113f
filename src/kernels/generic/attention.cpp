// kernels/generic/attention.cpp — reference attention/activation helpers: half·f32 dot,
// half axpy (and their f32-row multi-query forms), gated GELU-tanh and softmax numerators. Plain loops; the AVX2 versions are
// tested against these.
#include <cmath>
#include <cstdint>

#include "core/fp16.h"

namespace specula::kernels::generic {

float dot_f16_f32(int64_t n, const uint16_t* a, const float* b) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += fp16_to_fp32(a[i]) * b[i];
  return s;
}

void axpy_f16_f32(int64_t n, float alpha, const uint16_t* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * fp16_to_fp32(x[i]);
}

void dot_f16_f32_multi(int64_t n, const uint16_t* a, int64_t nq, const float* const* b, float* s) {
  for (int64_t i = 0; i < nq; ++i) s[i] = dot_f16_f32(n, a, b[i]);
}

void axpy_f16_f32_multi(int64_t n, const float* alpha, const uint16_t* x, int64_t nq, float* const* y) {
  for (int64_t i = 0; i < nq; ++i) axpy_f16_f32(n, alpha[i], x, y[i]);
}

void dot_f32_multi(int64_t n, const float* a, int64_t nq, const float* const* b, float* s) {
  for (int64_t q = 0; q < nq; ++q) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += a[i] * b[q][i];
    s[q] = sum;
  }
}

void axpy_f32_multi(int64_t n, const float* alpha, const float* x, int64_t nq, float* const* y) {
  for (int64_t q = 0; q < nq; ++q)
    for (int64_t i = 0; i < n; ++i) y[q][i] += alpha[q] * x[i];
}

void pv_f32_rows(int64_t n, const float* v, int64_t v_stride, int64_t nq, const float* const* p, const int64_t* k0,
                 const int64_t* k1, float* const* y) {
  for (int64_t q = 0; q < nq; ++q)
    for (int64_t k = k0[q]; k < k1[q]; ++k) axpy_f32_multi(n, p[q] + (k - k0[q]), v + k * v_stride, 1, y + q);
}

void qk_rows16(int64_t n, const float* k, int64_t nk, int64_t nq, const float* const* q, float* const* s) {
  for (int64_t j = 0; j < nk; ++j)
    for (int64_t i = 0; i < nq; ++i) dot_f32_multi(n, k + j * n, 1, q + i, s[i] + j);
}

void gelu_tanh_mul(int64_t n, const float* gate, const float* up, float* out) {
  constexpr float kSqrt2OverPi = 0.79788456080286535588f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float t = std::tanh(kSqrt2OverPi * (g + 0.044715f * g * g * g));
    out[i] = 0.5f * g * (1.0f + t) * up[i];
  }
}

void scale_round_f16(int64_t n, float alpha, float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] = fp16_to_fp32(fp32_to_fp16(x[i] * alpha));
}

float exp_sub_sum(int64_t n, float max, float* x) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    s += x[i];
  }
  return s;
}

}  // namespace specula::kernels::generic
