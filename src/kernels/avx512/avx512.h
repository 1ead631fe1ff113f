// kernels/avx512/avx512.h — entry points of the AVX-512 (F/BW/VL/DQ + VNNI) kernels that
// dispatch.cpp wires into the avx512 table (on top of the AVX2 table): the blocked
// attention kernels here and the packed gemms (kernels/packed/packed_gemm.h). Plain
// declarations: any translation unit may include it; only call them on a capable CPU.
#pragma once

#include <cstdint>

#include "kernels/packed/packed_gemm.h"

namespace specula::kernels::avx512 {

// Blocked attention (attention.cpp): bitwise the AVX2 kernels' results.
void pv_f32_rows(int64_t n, const float* v, int64_t v_stride, int64_t nq, const float* const* p, const int64_t* k0,
                 const int64_t* k1, float* const* y);
void qk_rows16(int64_t n, const float* k, int64_t nk, int64_t nq, const float* const* q, float* const* s);

}  // namespace specula::kernels::avx512
