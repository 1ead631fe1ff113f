// kernels/avxvnni/gemm_packed.cpp — the packed-weight gemms (kernels/packed/packed_gemm.inc)
// for AVX2 machines with AVX-VNNI (VEX vpdpbusd / vpdpwssd on 256 bits; no AVX-512): V is
// a pair of YMM registers holding the 16 lanes (rows 0-7, rows 8-15 of a group), so the
// packed layout and every lane's operations are the avx512 tier's and the results are
// bitwise equal to it. 16 YMM registers: smaller tiles and two decode streams.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/packed/packed_gemm.h"
#include "core/quant_blocks.h"

namespace specula::kernels::avxvnni {
namespace {

#include "kernels/packed/ymm_pair.inc"

struct V : YmmPair {
  static constexpr int kStreams = 2;
  static constexpr bool kFullRangeU8 = true;  // vpdpbusd: any unsigned weight byte
  static constexpr bool kI16Runs = false;     // vpdpbusd sums into int32 directly
  struct K45 { static constexpr int kRP = 1, kCP = 2, kCS = 2; };
  struct K6 { static constexpr int kRP = 1, kCP = 1, kCS = 1; };
  struct Q8 { static constexpr int kRP = 1, kCP = 3, kCS = 3; };
  struct Half { static constexpr int kRP = 1, kCP = 3, kCS = 3; };

  static I dpbusd(I acc, I a, I b) {
    return {_mm256_dpbusd_avx_epi32(acc.lo, a.lo, b.lo), _mm256_dpbusd_avx_epi32(acc.hi, a.hi, b.hi)};
  }
  static I dpwssd(I acc, I a, I b) {
    return {_mm256_dpwssd_avx_epi32(acc.lo, a.lo, b.lo), _mm256_dpwssd_avx_epi32(acc.hi, a.hi, b.hi)};
  }
};

#include "kernels/packed/packed_gemm.inc"

}  // namespace

PackedGemm packed_gemm(DType t) { return packed_gemm_of(t); }

}  // namespace specula::kernels::avxvnni
