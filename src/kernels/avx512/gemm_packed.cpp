// kernels/avx512/gemm_packed.cpp — the packed-weight gemms (kernels/packed/packed_gemm.inc:
// layouts, arithmetic, tiles) on AVX-512: V is one ZMM register of 16 lanes; VNNI
// vpdpbusd / vpdpwssd; 32 registers allow 2 x 4 (K-quant) and 2 x 6 (legacy) tiles and
// four decode streams.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
// GCC 12's AVX-512 conversion intrinsics start from an undefined vector (_mm512_undefined_*)
// and warn about it under -Wmaybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/packed/packed_gemm.h"
#include "core/quant_blocks.h"

namespace specula::kernels::avx512 {
namespace {

struct V {
  using I = __m512i;
  using F = __m512;
  static constexpr int kStreams = 4;
  static constexpr bool kFullRangeU8 = true;  // vpdpbusd: any unsigned weight byte
  static constexpr bool kI16Runs = false;     // vpdpbusd sums into int32 directly
  struct K45 { static constexpr int kRP = 2, kCP = 4, kCS = 8; };
  struct K6 { static constexpr int kRP = 1, kCP = 6, kCS = 4; };
  struct Q8 { static constexpr int kRP = 2, kCP = 6, kCS = 8; };
  struct Half { static constexpr int kRP = 2, kCP = 6, kCS = 8; };

  static I load(const void* p) { return _mm512_load_si512(p); }
  static I zero() { return _mm512_setzero_si512(); }
  template <int R, int C>
  static void zero_all(I (&v)[R][C]) {
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) v[r][c] = zero();
  }
  static F zero_f() { return _mm512_setzero_ps(); }
  static I set1_8(char x) { return _mm512_set1_epi8(x); }
  static I set1_32(int x) { return _mm512_set1_epi32(x); }
  static I bcast32(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
  }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_(I a, I b) { return _mm512_or_si512(a, b); }
  static I srli16(I a, unsigned n) { return _mm512_srli_epi16(a, n); }
  static I slli16(I a, unsigned n) { return _mm512_slli_epi16(a, n); }
  static I srai32(I a, unsigned n) { return _mm512_srai_epi32(a, n); }
  static I slli32(I a, unsigned n) { return _mm512_slli_epi32(a, n); }
  static I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I mullo(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static I dpbusd(I acc, I a, I b) { return _mm512_dpbusd_epi32(acc, a, b); }
  static I dpwssd(I acc, I a, I b) { return _mm512_dpwssd_epi32(acc, a, b); }
  static I u8_to_32(const void* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))); }
  static I u8_to_16(const void* p) { return _mm512_cvtepu8_epi16(_mm256_loadu_si256(static_cast<const __m256i*>(p))); }
  static I s8_to_16(const void* p) { return _mm512_cvtepi8_epi16(_mm256_loadu_si256(static_cast<const __m256i*>(p))); }
  static F half_to_f(const void* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p))); }
  static F bf16_to_f(const void* p) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p))), 16));
  }
  static F set1_ps(float x) { return _mm512_set1_ps(x); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static F to_f(I a) { return _mm512_cvtepi32_ps(a); }
  static void store_rows(float* y, int64_t valid, F v) {
    const __mmask16 mask = valid >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << valid) - 1);
    _mm512_mask_storeu_ps(y, mask, v);
  }
};

#include "kernels/packed/packed_gemm.inc"

}  // namespace

PackedGemm packed_gemm(DType t) { return packed_gemm_of(t); }

}  // namespace specula::kernels::avx512
