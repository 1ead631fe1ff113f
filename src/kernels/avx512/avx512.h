// kernels/avx512/avx512.h — internal header of the AVX-512 (F/BW/VL/DQ + VNNI) kernels:
// entry points wired by table.cpp. Only for translation units compiled with the
// avx512 flags (CMakeLists.txt). Packed layouts and arithmetic: gemm_packed.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace specula::kernels::avx512 {

constexpr int kPackRows = 16;  // weight rows per packed group (one per 32-bit lane of a ZMM register)

// A weight type's packed form in this tier (kernels.h TypeKernels::packed_bytes / pack /
// gemm_packed), or all null when the tier has none for it: Q4_K, Q5_K, Q6_K, Q4_0, Q5_0, Q8_0.
struct PackedGemm {
  size_t (*bytes)(int64_t N, int64_t K) = nullptr;
  void (*pack)(const void* w, size_t w_stride, int64_t N, int64_t K, int64_t g0, int64_t g1, void* out) = nullptr;
  void (*gemm)(int64_t K, const void* packed, int64_t r0, int64_t n_rows, const void* xq, size_t xq_stride,
               int64_t m, float* y, int64_t ldy) = nullptr;
};
PackedGemm packed_gemm(DType t);

// Blocked attention (attention.cpp): bitwise the AVX2 kernels' results.
void pv_f32_rows(int64_t n, const float* v, int64_t v_stride, int64_t nq, const float* const* p, const int64_t* k0,
                 const int64_t* k1, float* const* y);
void qk_rows16(int64_t n, const float* k, int64_t nk, int64_t nq, const float* const* q, float* const* s);

}  // namespace specula::kernels::avx512
