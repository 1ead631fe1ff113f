// kernels/avx2/gemm_float.cpp — AVX2 gemm for float weights (F32, F16, BF16) with
// F32 activations.
//
// Each output element keeps two 8-lane FMA accumulators over 16-element blocks
// (lanes k % 16), reduced as hsum(a0 + a1); the K % 16 tail is added afterwards in
// index order in scalar float. Weights are widened exactly (F16C, BF16 << 16). The
// generic reference accumulates in double, so results agree to float rounding, not
// bitwise. Tiling and batch invariance: avx2.h. Does not handle quantized types.
#include "core/fp16.h"
#include "kernels/avx2/avx2.h"

namespace specula::kernels::avx2 {
namespace {

struct Acc2 {
  __m256 a0, a1;
};

template <class Derived>
struct FloatBase {
  using Acc = Acc2;
  struct W {
    __m256 v0, v1;
  };
  struct X {
    __m256 v0, v1;
  };
  static constexpr int kBlock = 16;
  static Acc zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static void load_x(const uint8_t* row, int64_t b, X& x) {
    const float* p = reinterpret_cast<const float*>(row) + 16 * b;
    x.v0 = _mm256_loadu_ps(p);
    x.v1 = _mm256_loadu_ps(p + 8);
  }
  static Acc dot(const W& w, const X& x, Acc acc) {
    return {_mm256_fmadd_ps(w.v0, x.v0, acc.a0), _mm256_fmadd_ps(w.v1, x.v1, acc.a1)};
  }
  static float finish(Acc acc, const uint8_t* wrow, const uint8_t* xrow, int64_t K) {
    float s = hsum(_mm256_add_ps(acc.a0, acc.a1));
    const float* x = reinterpret_cast<const float*>(xrow);
    for (int64_t k = K / 16 * 16; k < K; ++k) s += Derived::scalar(wrow, k) * x[k];
    return s;
  }
};

struct F32 : FloatBase<F32> {
  static void load_w(const uint8_t* row, int64_t b, W& w) {
    const float* p = reinterpret_cast<const float*>(row) + 16 * b;
    w.v0 = _mm256_loadu_ps(p);
    w.v1 = _mm256_loadu_ps(p + 8);
  }
  static float scalar(const uint8_t* row, int64_t k) { return reinterpret_cast<const float*>(row)[k]; }
};

struct F16 : FloatBase<F16> {
  static void load_w(const uint8_t* row, int64_t b, W& w) {
    const __m256i h = loadu256(reinterpret_cast<const uint16_t*>(row) + 16 * b);
    w.v0 = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    w.v1 = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
  }
  static float scalar(const uint8_t* row, int64_t k) {
    return h2f(reinterpret_cast<const uint16_t*>(row)[k]);
  }
};

struct BF16 : FloatBase<BF16> {
  static void load_w(const uint8_t* row, int64_t b, W& w) {
    const __m256i h = loadu256(reinterpret_cast<const uint16_t*>(row) + 16 * b);
    w.v0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h)), 16));
    w.v1 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1)), 16));
  }
  static float scalar(const uint8_t* row, int64_t k) {
    return bf16_to_fp32(reinterpret_cast<const uint16_t*>(row)[k]);
  }
};

}  // namespace

SPECULA_AVX2_GEMM(gemm_f32) { gemm_tiled<F32, 4, 2, 3>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy); }
SPECULA_AVX2_GEMM(gemm_f16) { gemm_tiled<F16, 4, 2, 3>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy); }
SPECULA_AVX2_GEMM(gemm_bf16) { gemm_tiled<BF16, 4, 2, 3>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy); }

}  // namespace specula::kernels::avx2
