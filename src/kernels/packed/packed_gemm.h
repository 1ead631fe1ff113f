// kernels/packed/packed_gemm.h — the packed-weight gemms of the avx512, avxvnni and avx2 tiers
// (packed_gemm.inc, compiled once per ISA): a weight type's size / pack / gemm entries for
// kernels.h's TypeKernels (packed_bytes, pack, gemm_packed), 16 weight rows per group.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace specula::kernels {

constexpr int kPackRows = 16;  // weight rows per packed group (one per 32-bit lane of 64 bytes)

struct PackedGemm {
  size_t (*bytes)(int64_t N, int64_t K) = nullptr;
  void (*pack)(const void* w, size_t w_stride, int64_t N, int64_t K, int64_t g0, int64_t g1, void* out) = nullptr;
  using Gemm = void (*)(int64_t K, const void* packed, int64_t r0, int64_t n_rows, const void* xq, size_t xq_stride,
                       int64_t m, float* y, int64_t ldy);
  // The same results either way (prefetches change no arithmetic); they differ only in how
  // the m = 1 (decode) tile reads the weights: `gemm` leaves the streams to the hardware
  // prefetchers, `gemm_prefetch` prefetches one super-block ahead in each stream. Which is
  // faster depends on the CPU (kernels/dispatch.cpp chooses; packed_gemm.inc has the figures).
  Gemm gemm = nullptr;
  Gemm gemm_prefetch = nullptr;
};

// The packed form of weight type t in each tier, or all null (types: Q4_K, Q5_K, Q6_K,
// Q4_0, Q4_1, Q5_0, Q8_0, F16, BF16). Only call a tier's function on a CPU that runs it.
namespace avx512 {
PackedGemm packed_gemm(DType t);
}
namespace avxvnni {
PackedGemm packed_gemm(DType t);
}
namespace avx2 {
PackedGemm packed_gemm(DType t);  // no Q5_0 / Q8_0 (kernels/avx2/gemm_packed.cpp)
}

}  // namespace specula::kernels
