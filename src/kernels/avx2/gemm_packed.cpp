// kernels/avx2/gemm_packed.cpp — the packed-weight gemms (kernels/packed/packed_gemm.inc) for
// AVX2 machines without VNNI (Zen 2/3, Haswell..Comet Lake): V is a pair of YMM registers
// holding the 16 lanes, as in the avxvnni tier, and vpdpbusd / vpdpwssd are emulated exactly:
//   dpbusd(acc, u, s) = acc + madd_epi16(maddubs_epi16(u, s), 1)
//   dpwssd(acc, a, b) = acc + madd_epi16(a, b)
// vpmaddubsw saturates a pair's int16 sum, so the emulation is exact only while
// |u0 s0 + u1 s1| <= 32767: true for the weight bytes of Q4_K/Q5_K (0..31), Q6_K (0..63) and
// Q4_0/Q4_1 nibbles (0..15) against activation bytes in -128..127 (at most 63 * 128 * 2 =
// 16128), not for the legacy byte form (Q5_0/Q8_0 stored as v + 128, up to 255), which this
// tier leaves to the AVX2 row kernels (packed_gemm_of returns no entry for it). Every lane's
// int32 sums are therefore the VNNI tiers' and the results bitwise equal to theirs. Runs of
// products into one accumulator (packed_gemm.inc's RunT) sum up to 8 / 4 / 2 vpmaddubsw results
// (Q4_K and nibbles / Q5_K / Q6_K) in int16 before one vpmaddwd: exact by the same bound. In
// the K-quant tiles that vpmaddwd multiplies by the sub-block's scale (dup16) instead of 1, so
// no vpmulld and no int32 sum per sub-block (the VNNI tiers' form) are needed: the integer
// result is the same. Measured single-thread on an AVX2-only EPYC (specula_bench_kernels, Qwen
// 1.5B shapes, idle machine): Q4_K [8960 x 1536] m = 1 0.86 ms vs 1.21 ms for the AVX2 row
// kernel, m = 64 / 512 1.55x / 1.57x its speed; Q6_K [1536 x 8960] at parity (m = 1 1.38 vs
// 1.38 ms, m = 512 412 vs 414 ms).
// 16 YMM registers: the avxvnni tier's tile shapes, except Q6_K prefill (three columns).
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

namespace specula::kernels::avx2 {
namespace {

#include "kernels/packed/ymm_pair.inc"

struct V : YmmPair {
  static constexpr int kStreams = 2;
  static constexpr bool kFullRangeU8 = false;  // dpbusd exact only for weight bytes <= 127
  static constexpr bool kI16Runs = true;       // runs of vpmaddubsw summed in int16, widened once
  struct K45 { static constexpr int kRP = 1, kCP = 2, kCS = 2; };
  struct K6 { static constexpr int kRP = 1, kCP = 3, kCS = 1; };
  struct Q8 { static constexpr int kRP = 1, kCP = 3, kCS = 3; };
  struct Half { static constexpr int kRP = 1, kCP = 3, kCS = 3; };

  static __m256i dp4(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
  }
  static I dpbusd(I acc, I a, I b) {
    return {_mm256_add_epi32(acc.lo, dp4(a.lo, b.lo)), _mm256_add_epi32(acc.hi, dp4(a.hi, b.hi))};
  }
  static I dpbusd16(I p, I a, I b) {
    return {_mm256_add_epi16(p.lo, _mm256_maddubs_epi16(a.lo, b.lo)),
            _mm256_add_epi16(p.hi, _mm256_maddubs_epi16(a.hi, b.hi))};
  }
  static I widen16(I acc, I p) {
    const __m256i one = _mm256_set1_epi16(1);
    return {_mm256_add_epi32(acc.lo, _mm256_madd_epi16(p.lo, one)),
            _mm256_add_epi32(acc.hi, _mm256_madd_epi16(p.hi, one))};
  }
  // Lane r's even (odd = 0) or odd (odd = 1) int16 half copied into both halves.
  static I dup16(I a, int odd) {
    if (odd) return {_mm256_shufflehi_epi16(_mm256_shufflelo_epi16(a.lo, 0xF5), 0xF5),
                     _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(a.hi, 0xF5), 0xF5)};
    return {_mm256_shufflehi_epi16(_mm256_shufflelo_epi16(a.lo, 0xA0), 0xA0),
            _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(a.hi, 0xA0), 0xA0)};
  }
  static I dpwssd(I acc, I a, I b) {
    return {_mm256_add_epi32(acc.lo, _mm256_madd_epi16(a.lo, b.lo)),
            _mm256_add_epi32(acc.hi, _mm256_madd_epi16(a.hi, b.hi))};
  }
};

#include "kernels/packed/packed_gemm.inc"

}  // namespace

PackedGemm packed_gemm(DType t) { return packed_gemm_of(t); }

}  // namespace specula::kernels::avx2
