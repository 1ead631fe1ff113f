// kernels/avx2/convert.cpp — AVX2 activation quantizers (F32 copy, Q8_0, Q8_1, Q8_K)
// and row dequantizers for every type of the kernel table (Q2_K, Q3_K and Q6_K as scalar
// loops: they are only used for single rows, e.g. an embedding lookup).
//
// Results are bit-identical to the generic reference (kernels/generic/quantize.cpp,
// dequant.cpp): the same float operations in the same order — Q8_0/Q8_1:
// d = max|x| / 127, id = 1/d, q = roundf(x * id) (ties away from zero, done here as
// trunc plus a ±1 correction, which is exact); Q8_K: iscale = -127 / (first element of
// largest |x|), q = min(127, nearbyint(iscale * x)) (ties to even), d = 1 / iscale.
// fp16 stores use core/fp16.h. Does not quantize weights.
#include "kernels/avx2/avx2.h"

#include <cstring>

#include "core/fp16.h"
#include "core/quant_blocks.h"

namespace specula::kernels::avx2 {
namespace {

// A function, not a global: no AVX instruction may run at static-init time.
inline __m256 abs_mask() { return _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)); }

inline float abs_max32(const float* x) {
  __m256 m = _mm256_and_ps(_mm256_loadu_ps(x), abs_mask());
  for (int i = 8; i < 32; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask()));
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// roundf (ties away from zero), exact: t = trunc(v); v - t is exact; step by ±1.
inline __m256 round_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_sub_ps(v, t);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 up = _mm256_and_ps(_mm256_cmp_ps(r, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one);
  const __m256 dn = _mm256_and_ps(_mm256_cmp_ps(r, _mm256_set1_ps(-0.5f), _CMP_LE_OQ), one);
  return _mm256_sub_ps(_mm256_add_ps(t, up), dn);
}

// 4 x 8 int32 -> 32 int8 in order (saturating; callers' values are in range).
inline __m256i pack32(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b);  // a0-3 b0-3 a4-7 b4-7
  const __m256i cd = _mm256_packs_epi32(c, d);
  const __m256i abcd = _mm256_packs_epi16(ab, cd);  // a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7
  return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// x[32] -> q[32] with q = roundf(x * id); returns the 32 quants packed.
inline __m256i quantize32_away(const float* x, float id) {
  const __m256 vid = _mm256_set1_ps(id);
  __m256i q[4];
  for (int i = 0; i < 4; ++i) {
    q[i] = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), vid)));
  }
  return pack32(q[0], q[1], q[2], q[3]);
}

inline int sum_i8x32(__m256i q) {
  const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
  return _mm_cvtsi128_si32(t);
}

}  // namespace

void quantize_row_f32(const float* x, void* y, int64_t n) {
  std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
}

void quantize_row_q8_0(const float* x, void* y, int64_t n) {
  auto* blocks = static_cast<BlockQ8_0*>(y);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const float d = abs_max32(x) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = fp32_to_fp16(d);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(blocks[b].qs), quantize32_away(x, id));
  }
}

void quantize_row_q8_1(const float* x, void* y, int64_t n) {
  auto* blocks = static_cast<BlockQ8_1*>(y);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const float d = abs_max32(x) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m256i q = quantize32_away(x, id);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(blocks[b].qs), q);
    blocks[b].d = fp32_to_fp16(d);
    blocks[b].s = fp32_to_fp16(static_cast<float>(sum_i8x32(q)) * d);
  }
}

void quantize_row_q8_k(const float* x, void* y, int64_t n) {
  auto* blocks = static_cast<BlockQ8_K*>(y);
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    BlockQ8_K& blk = blocks[b];
    float amax = 0.0f;
    for (int i = 0; i < kQKK; i += 32) amax = std::max(amax, abs_max32(x + i));
    if (amax == 0.0f) {
      std::memset(&blk, 0, sizeof(blk));
      continue;
    }
    // The first element whose |x| equals the maximum (the reference's strict '>' scan).
    const __m256 va = _mm256_set1_ps(amax);
    int first = 0;
    for (int i = 0; i < kQKK; i += 8) {
      const int mask = _mm256_movemask_ps(
          _mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask()), va, _CMP_EQ_OQ));
      if (mask != 0) {
        first = i + __builtin_ctz(static_cast<unsigned>(mask));
        break;
      }
    }
    const float iscale = -127.0f / x[first];
    const __m256 vs = _mm256_set1_ps(iscale);
    for (int i = 0; i < kQKK; i += 32) {
      __m256i q[4];
      for (int j = 0; j < 4; ++j) {
        q[j] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(vs, _mm256_loadu_ps(x + i + 8 * j)),
                                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      }
      // Saturating packs clamp at 127 (the reference's min(127, q)); q >= -127 here.
      const __m256i p = pack32(q[0], q[1], q[2], q[3]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk.qs + i), p);
      // bsums: two groups of 16.
      const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), p),
                                          _mm256_set1_epi16(1));  // 8 sums of 4
      const __m128i lo = _mm256_castsi256_si128(s), hi = _mm256_extracti128_si256(s, 1);
      const __m128i h = _mm_hadd_epi32(lo, hi);  // lo01 lo23 hi01 hi23
      const __m128i g = _mm_hadd_epi32(h, h);    // lo hi lo hi
      blk.bsums[i / 16] = static_cast<int16_t>(_mm_cvtsi128_si32(g));
      blk.bsums[i / 16 + 1] = static_cast<int16_t>(_mm_extract_epi32(g, 1));
    }
    blk.d = 1.0f / iscale;
  }
}

// ---- dequantizers ----

void dequantize_row_f32(const void* x, float* y, int64_t n) {
  std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
}

void dequantize_row_f16(const void* x, float* y, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(x);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  }
  for (; i < n; ++i) y[i] = h2f(h[i]);
}

void dequantize_row_bf16(const void* x, float* y, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(x);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i)));
    _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
  }
  for (; i < n; ++i) y[i] = bf16_to_fp32(h[i]);
}

namespace {
// 32 int8 (as unsigned 0..63 minus offset, or signed) * d -> y[32].
inline void store_scaled(__m256i q, __m256 d, float* y) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  _mm256_storeu_ps(y + 0, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
  _mm256_storeu_ps(y + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
  _mm256_storeu_ps(y + 16, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
  _mm256_storeu_ps(y + 24, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
}
// y[32] = d * q + m (Q4_1/Q5_1: multiply then add, as the reference).
inline void store_affine(__m256i q, __m256 d, __m256 m, float* y) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int i = 0; i < 4; ++i) {
    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[i]));
    _mm256_storeu_ps(y + 8 * i, _mm256_add_ps(_mm256_mul_ps(d, v), m));
  }
}
}  // namespace

void dequantize_row_q4_0(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_0*>(x);
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const __m256i q = _mm256_sub_epi8(unpack_nibbles16(blocks[b].qs), _mm256_set1_epi8(8));
    store_scaled(q, _mm256_set1_ps(h2f(blocks[b].d)), y);
  }
}

void dequantize_row_q4_1(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_1*>(x);
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    store_affine(unpack_nibbles16(blocks[b].qs), _mm256_set1_ps(h2f(blocks[b].d)),
                 _mm256_set1_ps(h2f(blocks[b].m)), y);
  }
}

void dequantize_row_q5_0(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_0*>(x);
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    uint32_t qh;
    std::memcpy(&qh, blocks[b].qh, 4);
    const __m256i q = _mm256_sub_epi8(_mm256_or_si256(unpack_nibbles16(blocks[b].qs), bits_to_0x10(qh)),
                                      _mm256_set1_epi8(16));
    store_scaled(q, _mm256_set1_ps(h2f(blocks[b].d)), y);
  }
}

void dequantize_row_q5_1(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_1*>(x);
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    uint32_t qh;
    std::memcpy(&qh, blocks[b].qh, 4);
    store_affine(_mm256_or_si256(unpack_nibbles16(blocks[b].qs), bits_to_0x10(qh)),
                 _mm256_set1_ps(h2f(blocks[b].d)), _mm256_set1_ps(h2f(blocks[b].m)), y);
  }
}

void dequantize_row_q8_0(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_0*>(x);
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    store_scaled(loadu256(blocks[b].qs), _mm256_set1_ps(h2f(blocks[b].d)), y);
  }
}

void dequantize_row_q8_1(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_1*>(x);
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    store_scaled(loadu256(blocks[b].qs), _mm256_set1_ps(h2f(blocks[b].d)), y);
  }
}

namespace {
inline void k_scale_min(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}
// y[32] = dl * q - ml for unsigned q.
inline void store_k(__m256i q, float dl, float ml, float* y) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  const __m256 vd = _mm256_set1_ps(dl), vm = _mm256_set1_ps(ml);
  for (int i = 0; i < 4; ++i) {
    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[i]));
    _mm256_storeu_ps(y + 8 * i, _mm256_sub_ps(_mm256_mul_ps(vd, v), vm));
  }
}
}  // namespace

void dequantize_row_q4_k(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_K*>(x);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ4_K& blk = blocks[b];
    const float d = h2f(blk.d), dmin = h2f(blk.dmin);
    for (int s = 0; s < 8; ++s, y += 32) {
      int sc, m;
      k_scale_min(blk.scales, s, &sc, &m);
      __m256i q = loadu256(blk.qs + 32 * (s / 2));
      if (s % 2) q = _mm256_srli_epi16(q, 4);
      store_k(_mm256_and_si256(q, m4), d * static_cast<float>(sc), dmin * static_cast<float>(m), y);
    }
  }
}

void dequantize_row_q5_k(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_K*>(x);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ5_K& blk = blocks[b];
    const float d = h2f(blk.d), dmin = h2f(blk.dmin);
    const __m256i hb = loadu256(blk.qh);
    for (int s = 0; s < 8; ++s, y += 32) {
      int sc, m;
      k_scale_min(blk.scales, s, &sc, &m);
      __m256i q = loadu256(blk.qs + 32 * (s / 2));
      if (s % 2) q = _mm256_srli_epi16(q, 4);
      const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << s));
      const __m256i h = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit),
                                         _mm256_set1_epi8(0x10));
      store_k(_mm256_or_si256(_mm256_and_si256(q, m4), h), d * static_cast<float>(sc),
              dmin * static_cast<float>(m), y);
    }
  }
}

void dequantize_row_q6_k(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ6_K*>(x);
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    const BlockQ6_K& blk = blocks[b];
    const float d = h2f(blk.d);
    for (int e = 0; e < kQKK; ++e) {
      const int h = e / 128, r = e % 128;
      const int lo = (blk.ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
      const int hi = (blk.qh[32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
      const float dl = d * static_cast<float>(blk.scales[e / 16]);
      y[e] = dl * static_cast<float>((lo | (hi << 4)) - 32);
    }
  }
}

void dequantize_row_q8_k(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_K*>(x);
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    const __m256 d = _mm256_set1_ps(blocks[b].d);
    for (int i = 0; i < kQKK; i += 32) store_scaled(loadu256(blocks[b].qs + i), d, y + i);
  }
}

void dequantize_row_q2_k(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ2_K*>(x);
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    const BlockQ2_K& blk = blocks[b];
    const float d = h2f(blk.d), dmin = h2f(blk.dmin);
    for (int e = 0; e < kQKK; ++e) {
      const int q = (blk.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      const uint8_t sc = blk.scales[e / 16];
      const float dl = d * static_cast<float>(sc & 0x0F), ml = dmin * static_cast<float>(sc >> 4);
      y[e] = dl * static_cast<float>(q) - ml;
    }
  }
}

void dequantize_row_q3_k(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ3_K*>(x);
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    const BlockQ3_K& blk = blocks[b];
    const float d = h2f(blk.d);
    for (int e = 0; e < kQKK; ++e) {
      const int t = e / 32, l = e % 32, s = e / 16;  // t = 4h + j
      const int lo = (blk.qs[32 * (t / 4) + l] >> (2 * (t % 4))) & 3;
      const int q = lo - (((blk.hmask[l] >> t) & 1) ? 0 : 4);
      const int sc = ((blk.scales[s % 8] >> (4 * (s / 8))) & 0x0F) | (((blk.scales[8 + s % 4] >> (2 * (s / 4))) & 3) << 4);
      const float dl = d * static_cast<float>(sc - 32);
      y[e] = dl * static_cast<float>(q);
    }
  }
}

void dequantize_row_iq4_nl(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockIQ4_NL*>(x);
  const __m256i codebook = iq4_codebook();
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    store_scaled(_mm256_shuffle_epi8(codebook, unpack_nibbles16(blocks[b].qs)), _mm256_set1_ps(h2f(blocks[b].d)), y);
  }
}

void dequantize_row_iq4_xs(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockIQ4_XS*>(x);
  const __m256i codebook = iq4_codebook();
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockIQ4_XS& blk = blocks[b];
    const float d = h2f(blk.d);
    for (int s = 0; s < kQKK / 32; ++s, y += 32) {
      const int ls = ((blk.scales_l[s / 2] >> (4 * (s % 2))) & 0x0F) | (((blk.scales_h >> (2 * s)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      store_scaled(_mm256_shuffle_epi8(codebook, unpack_nibbles16(blk.qs + 16 * s)), _mm256_set1_ps(dl), y);
    }
  }
}

}  // namespace specula::kernels::avx2
