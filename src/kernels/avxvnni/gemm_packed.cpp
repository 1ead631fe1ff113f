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

struct V {
  struct I {
    __m256i lo, hi;
  };
  struct F {
    __m256 lo, hi;
  };
  static constexpr int kStreams = 2;
  struct K45 { static constexpr int kRP = 1, kCP = 2, kCS = 2; };
  struct K6 { static constexpr int kRP = 1, kCP = 1, kCS = 1; };
  struct Q8 { static constexpr int kRP = 1, kCP = 3, kCS = 3; };
  struct Half { static constexpr int kRP = 1, kCP = 3, kCS = 3; };

  static I load(const void* p) {
    const auto* q = static_cast<const __m256i*>(p);
    return {_mm256_load_si256(q), _mm256_load_si256(q + 1)};
  }
  static I zero() { return {_mm256_setzero_si256(), _mm256_setzero_si256()}; }
  template <int R, int C>
  static void zero_all(I (&v)[R][C]) {
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) v[r][c] = zero();
  }
  static F zero_f() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static I set1_8(char x) { return {_mm256_set1_epi8(x), _mm256_set1_epi8(x)}; }
  static I set1_32(int x) { return {_mm256_set1_epi32(x), _mm256_set1_epi32(x)}; }
  static I bcast32(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return set1_32(v);
  }
  static I and_(I a, I b) { return {_mm256_and_si256(a.lo, b.lo), _mm256_and_si256(a.hi, b.hi)}; }
  static I or_(I a, I b) { return {_mm256_or_si256(a.lo, b.lo), _mm256_or_si256(a.hi, b.hi)}; }
  static I srli16(I a, int n) { return {_mm256_srli_epi16(a.lo, n), _mm256_srli_epi16(a.hi, n)}; }
  static I slli16(I a, int n) { return {_mm256_slli_epi16(a.lo, n), _mm256_slli_epi16(a.hi, n)}; }
  static I srai32(I a, int n) { return {_mm256_srai_epi32(a.lo, n), _mm256_srai_epi32(a.hi, n)}; }
  static I slli32(I a, int n) { return {_mm256_slli_epi32(a.lo, n), _mm256_slli_epi32(a.hi, n)}; }
  static I add(I a, I b) { return {_mm256_add_epi32(a.lo, b.lo), _mm256_add_epi32(a.hi, b.hi)}; }
  static I sub(I a, I b) { return {_mm256_sub_epi32(a.lo, b.lo), _mm256_sub_epi32(a.hi, b.hi)}; }
  static I mullo(I a, I b) { return {_mm256_mullo_epi32(a.lo, b.lo), _mm256_mullo_epi32(a.hi, b.hi)}; }
  static I dpbusd(I acc, I a, I b) {
    return {_mm256_dpbusd_avx_epi32(acc.lo, a.lo, b.lo), _mm256_dpbusd_avx_epi32(acc.hi, a.hi, b.hi)};
  }
  static I dpwssd(I acc, I a, I b) {
    return {_mm256_dpwssd_avx_epi32(acc.lo, a.lo, b.lo), _mm256_dpwssd_avx_epi32(acc.hi, a.hi, b.hi)};
  }
  static I u8_to_32(const void* p) {
    const auto* b = static_cast<const uint8_t*>(p);
    return {_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b))),
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 8)))};
  }
  static I u8_to_16(const void* p) {
    const auto* b = static_cast<const __m128i*>(p);
    return {_mm256_cvtepu8_epi16(_mm_loadu_si128(b)), _mm256_cvtepu8_epi16(_mm_loadu_si128(b + 1))};
  }
  static I s8_to_16(const void* p) {
    const auto* b = static_cast<const __m128i*>(p);
    return {_mm256_cvtepi8_epi16(_mm_loadu_si128(b)), _mm256_cvtepi8_epi16(_mm_loadu_si128(b + 1))};
  }
  static F half_to_f(const void* p) {
    const auto* b = static_cast<const __m128i*>(p);
    return {_mm256_cvtph_ps(_mm_loadu_si128(b)), _mm256_cvtph_ps(_mm_loadu_si128(b + 1))};
  }
  static F bf16_to_f(const void* p) {
    const auto* b = static_cast<const __m128i*>(p);
    return {_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(b)), 16)),
            _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(b + 1)), 16))};
  }
  static F set1_ps(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
  static F mul(F a, F b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
  static F fmadd(F a, F b, F c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
  static F fnmadd(F a, F b, F c) { return {_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi)}; }
  static F to_f(I a) { return {_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)}; }
  static void store_rows(float* y, int64_t valid, F v) {
    if (valid >= 16) {
      _mm256_storeu_ps(y, v.lo);
      _mm256_storeu_ps(y + 8, v.hi);
      return;
    }
    alignas(32) float t[16];
    _mm256_store_ps(t, v.lo);
    _mm256_store_ps(t + 8, v.hi);
    std::memcpy(y, t, sizeof(float) * static_cast<size_t>(valid));
  }
};

#include "kernels/packed/packed_gemm.inc"

}  // namespace

PackedGemm packed_gemm(DType t) { return packed_gemm_of(t); }

}  // namespace specula::kernels::avxvnni
