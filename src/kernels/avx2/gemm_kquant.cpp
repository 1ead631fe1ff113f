// kernels/avx2/gemm_kquant.cpp — AVX2 gemm for the 256-element super-block weight types
// with Q8_K activations: the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS.
//
// Per super-block: unsigned weight quants (Q2_K 0..3, Q3_K 0..7, Q4_K/Q5_K 0..31, Q6_K
// 0..63) times the signed activations with maddubs, weighted by the sub-block scales with
// madd, summed exactly in int32; the mins (Q2_K/Q4_K/Q5_K) and the Q3_K -4 / Q6_K -32
// centring are applied through the activation bsums, also in int32. IQ4_XS looks its
// 4-bit indices up in the codebook (signed int8 levels) and multiplies |level| by the
// activation with the level's sign (the sign trick). Then one FMA by d_w*d_x (and one by
// -dmin_w*d_x for the mins) into an 8-lane float accumulator. Block formulas as in
// llama.cpp's ggml_vec_dot_*_q8_K (facts only). Tiling and batch invariance: avx2.h and
// the notes below. Does not quantize activations (convert.cpp).
#include "kernels/avx2/avx2.h"
#include "core/quant_blocks.h"

#include <type_traits>

namespace specula::kernels::avx2 {
namespace {

struct KBase {
  using Acc = __m256;
  using X = const BlockQ8_K*;
  static constexpr int kBlock = kQKK;
  static Acc zero() { return _mm256_setzero_ps(); }
  static float finish(Acc acc, const uint8_t*, const uint8_t*, int64_t) { return hsum(acc); }
  static void load_x(const uint8_t* row, int64_t b, X& x) {
    x = reinterpret_cast<const BlockQ8_K*>(row) + b;
  }
};

// Unpacked Q4_K/Q5_K super-block.
struct W45 {
  __m256i q[8];   // sub-block s: 32 unsigned quants
  __m256i sc[8];  // sub-block s scale broadcast as int16
  __m256i mins;   // 16 int16: min of sub-block g/2 (pairs with bsums[g])
  float d, dmin;
};

inline void unpack_scales_mins(const uint8_t* s, W45& w) {
  alignas(32) int16_t mins[16];
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    if (j < 4) {
      sc = s[j] & 63;
      m = s[j + 4] & 63;
    } else {
      sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
      m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
    w.sc[j] = _mm256_set1_epi16(static_cast<int16_t>(sc));
    mins[2 * j] = mins[2 * j + 1] = static_cast<int16_t>(m);
  }
  w.mins = _mm256_load_si256(reinterpret_cast<const __m256i*>(mins));
}

inline __m256 dot45(const W45& w, const BlockQ8_K* x, __m256 acc) {
  __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
  for (int j = 0; j < 8; j += 2) {
    const __m256i p0 = _mm256_maddubs_epi16(w.q[j], loadu256(x->qs + 32 * j));
    const __m256i p1 = _mm256_maddubs_epi16(w.q[j + 1], loadu256(x->qs + 32 * j + 32));
    s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(p0, w.sc[j]));
    s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(p1, w.sc[j + 1]));
  }
  const __m256i sumi = _mm256_add_epi32(s0, s1);
  const __m256i summ = _mm256_madd_epi16(loadu256(x->bsums), w.mins);
  acc = _mm256_fmadd_ps(_mm256_set1_ps(w.d * x->d), _mm256_cvtepi32_ps(sumi), acc);
  return _mm256_fnmadd_ps(_mm256_set1_ps(w.dmin * x->d), _mm256_cvtepi32_ps(summ), acc);
}

struct Q4K : KBase {
  using W = W45;
  static void load_w(const uint8_t* row, int64_t b, W& w) {
    const BlockQ4_K* blk = reinterpret_cast<const BlockQ4_K*>(row) + b;
    w.d = h2f(blk->d);
    w.dmin = h2f(blk->dmin);
    unpack_scales_mins(blk->scales, w);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int p = 0; p < 4; ++p) {
      const __m256i raw = loadu256(blk->qs + 32 * p);
      w.q[2 * p] = _mm256_and_si256(raw, m4);
      w.q[2 * p + 1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
    }
  }
  static Acc dot(const W& w, const X& x, Acc acc) { return dot45(w, x, acc); }
};

struct Q5K : KBase {
  using W = W45;
  static void load_w(const uint8_t* row, int64_t b, W& w) {
    const BlockQ5_K* blk = reinterpret_cast<const BlockQ5_K*>(row) + b;
    w.d = h2f(blk->d);
    w.dmin = h2f(blk->dmin);
    unpack_scales_mins(blk->scales, w);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i bit = _mm256_set1_epi8(0x10);
    __m256i hb = loadu256(blk->qh);  // bit s of byte l -> sub-block s, element l
    for (int p = 0; p < 4; ++p) {
      const __m256i raw = loadu256(blk->qs + 32 * p);
      const __m256i h_lo = _mm256_and_si256(_mm256_slli_epi16(hb, 4), bit);  // bit 2p
      const __m256i h_hi = _mm256_and_si256(_mm256_slli_epi16(hb, 3), bit);  // bit 2p+1
      w.q[2 * p] = _mm256_or_si256(_mm256_and_si256(raw, m4), h_lo);
      w.q[2 * p + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4), h_hi);
      hb = _mm256_srli_epi16(hb, 2);
    }
  }
  static Acc dot(const W& w, const X& x, Acc acc) { return dot45(w, x, acc); }
};

struct Q6K : KBase {
  struct W {
    __m256i q[8];   // elements 32t..32t+31 as unsigned 0..63
    __m256i sc[8];  // int16: scales[2t] in the low 128 bits, scales[2t+1] in the high
    __m256i sc16;   // int16: scales[0..15]
    float d;
  };
  static void load_w(const uint8_t* row, int64_t b, W& w) {
    const BlockQ6_K* blk = reinterpret_cast<const BlockQ6_K*>(row) + b;
    w.d = h2f(blk->d);
    const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales));
    w.sc16 = _mm256_cvtepi8_epi16(s8);
    alignas(32) int16_t s[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(s), w.sc16);
    for (int t = 0; t < 8; ++t) {
      w.sc[t] = _mm256_set_m128i(_mm_set1_epi16(s[2 * t + 1]), _mm_set1_epi16(s[2 * t]));
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i m30 = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; ++h) {
      const __m256i a = loadu256(blk->ql + 64 * h);
      const __m256i c = loadu256(blk->ql + 64 * h + 32);
      const __m256i hb = loadu256(blk->qh + 32 * h);
      w.q[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(a, m4),
                                       _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
      w.q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(c, m4),
                                       _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
      w.q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4),
                                       _mm256_and_si256(hb, m30));
      w.q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4),
                                       _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
    }
  }
  static Acc dot(const W& w, const X& x, Acc acc) {
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
    for (int t = 0; t < 8; t += 2) {
      const __m256i p0 = _mm256_maddubs_epi16(w.q[t], loadu256(x->qs + 32 * t));
      const __m256i p1 = _mm256_maddubs_epi16(w.q[t + 1], loadu256(x->qs + 32 * t + 32));
      s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(p0, w.sc[t]));
      s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(p1, w.sc[t + 1]));
    }
    // Centring: sum_g scales[g] * 32 * bsums[g].
    const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(loadu256(x->bsums), w.sc16), 5);
    const __m256i sumi = _mm256_sub_epi32(_mm256_add_epi32(s0, s1), off);
    return _mm256_fmadd_ps(_mm256_set1_ps(w.d * x->d), _mm256_cvtepi32_ps(sumi), acc);
  }
};

// ---- decode and small m: one super-block unpacked in registers, C activation columns ----
//
// Used for m <= kSmallMK (decode, speculative verify windows, small batches). Each weight
// super-block is unpacked once per pass and applied to up to 6 activation rows, instead
// of once per (row, column) pair (tile<> with C > 1 spills the 17-register unpacked block)
// or through a memory panel (gemm_panel). Per output element the int32 lane sums are the
// same integers as dot45 / Q6K::dot (exact integer adds in another order) and the float
// operations per block are the same (fma by d_w*d_x, fnmadd by dmin_w*d_x; hsum at the
// end), so results are bitwise equal to the panel path (batch invariance).

// The 6-bit scales and mins of a Q4_K/Q5_K super-block (12 packed bytes, layout of the
// GGUF K-quant format) as 16 bytes: sc[0..8) then m[0..8).
//   j < 4:  sc = s[j] & 63,                          m = s[j+4] & 63
//   j >= 4: sc = (s[j+4] & 15) | (s[j-4] >> 6) << 4, m = (s[j+4] >> 4) | (s[j] >> 6) << 4
inline __m128i k4_scales_mins(const uint8_t* s) {
  uint32_t w0, w1, w2;
  __builtin_memcpy(&w0, s, 4);
  __builtin_memcpy(&w1, s + 4, 4);
  __builtin_memcpy(&w2, s + 8, 4);
  constexpr uint32_t kLow6 = 0x3F3F3F3Fu, kLow4 = 0x0F0F0F0Fu, kLow2 = 0x03030303u;
  const uint32_t sc_lo = w0 & kLow6, m_lo = w1 & kLow6;
  const uint32_t sc_hi = (w2 & kLow4) | (((w0 >> 6) & kLow2) << 4);
  const uint32_t m_hi = ((w2 >> 4) & kLow4) | (((w1 >> 6) & kLow2) << 4);
  return _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi), static_cast<int>(m_lo),
                        static_cast<int>(m_hi));
}

// Shuffle mask: int16 word j of each 128-bit lane broadcast to the whole lane.
inline __m256i word_broadcast(int j) { return _mm256_set1_epi16(static_cast<int16_t>(((2 * j + 1) << 8) | (2 * j))); }
// Shuffle mask: word j in the low lane, word j + 1 in the high lane (Q6_K sub-block pairs).
inline __m256i word_pair(int j) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(((2 * j + 3) << 8) | (2 * j + 2))),
                          _mm_set1_epi16(static_cast<int16_t>(((2 * j + 1) << 8) | (2 * j))));
}

// Q4_K (kHigh = false) / Q5_K (kHigh = true) super-block against C activation blocks.
template <bool kHigh, int C>
inline void k45_block(const uint8_t* blk_bytes, const BlockQ8_K* const* x, __m256* acc) {
  using Blk = std::conditional_t<kHigh, BlockQ5_K, BlockQ4_K>;
  const Blk* blk = reinterpret_cast<const Blk*>(blk_bytes);
  const __m128i sm = k4_scales_mins(blk->scales);
  const __m256i sm16 = _mm256_cvtepu8_epi16(sm);
  const __m256i scales = _mm256_permute2x128_si256(sm16, sm16, 0x00);  // sc[0..8) in both lanes
  // mins[2j] = mins[2j+1] = m_j (pairs with bsums[2j], bsums[2j+1]).
  const __m256i mins = _mm256_cvtepu8_epi16(
      _mm_shuffle_epi8(sm, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15)));
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256i s[C];
  for (int c = 0; c < C; ++c) s[c] = _mm256_setzero_si256();
  [[maybe_unused]] __m256i hb;
  if constexpr (kHigh) hb = loadu256(blk->qh);  // bit s of byte l -> sub-block s, element l
  for (int p = 0; p < 4; ++p) {
    const __m256i raw = loadu256(blk->qs + 32 * p);
    __m256i qa = _mm256_and_si256(raw, m4);
    __m256i qb = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
    if constexpr (kHigh) {
      const __m256i bit = _mm256_set1_epi8(0x10);
      qa = _mm256_or_si256(qa, _mm256_and_si256(_mm256_slli_epi16(hb, 4), bit));
      qb = _mm256_or_si256(qb, _mm256_and_si256(_mm256_slli_epi16(hb, 3), bit));
      hb = _mm256_srli_epi16(hb, 2);
    }
    const __m256i sa = _mm256_shuffle_epi8(scales, word_broadcast(2 * p));
    const __m256i sb = _mm256_shuffle_epi8(scales, word_broadcast(2 * p + 1));
    for (int c = 0; c < C; ++c) {
      const __m256i pa = _mm256_madd_epi16(_mm256_maddubs_epi16(qa, loadu256(x[c]->qs + 64 * p)), sa);
      const __m256i pb = _mm256_madd_epi16(_mm256_maddubs_epi16(qb, loadu256(x[c]->qs + 64 * p + 32)), sb);
      s[c] = _mm256_add_epi32(s[c], _mm256_add_epi32(pa, pb));
    }
  }
  const float d = h2f(blk->d), dmin = h2f(blk->dmin);
  for (int c = 0; c < C; ++c) {
    const __m256i summ = _mm256_madd_epi16(loadu256(x[c]->bsums), mins);
    acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[c]->d), _mm256_cvtepi32_ps(s[c]), acc[c]);
    acc[c] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * x[c]->d), _mm256_cvtepi32_ps(summ), acc[c]);
  }
}

// Q6_K super-block against C activation blocks.
template <int C>
inline void k6_block(const uint8_t* blk_bytes, const BlockQ8_K* const* x, __m256* acc) {
  const BlockQ6_K* blk = reinterpret_cast<const BlockQ6_K*>(blk_bytes);
  const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales)));
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  __m256i s[C];
  for (int c = 0; c < C; ++c) s[c] = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    // scales[8h .. 8h+8) as int16 in both lanes; sub-block t = 4h + k uses words 2k, 2k+1.
    const __m256i half = h == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00)
                                : _mm256_permute2x128_si256(sc16, sc16, 0x11);
    const uint8_t* ql = blk->ql + 64 * h;
    const uint8_t* qh = blk->qh + 32 * h;
    for (int k = 0; k < 4; ++k) {
      // Sub-block t = 4h + k: low nibbles of ql[0..32) (k = 0), ql[32..64) (k = 1), their
      // high nibbles (k = 2, 3); high bits 2k..2k+1 of qh.
      const __m256i lo = loadu256(ql + 32 * (k & 1));
      const __m256i nib = (k < 2) ? _mm256_and_si256(lo, m4) : _mm256_and_si256(_mm256_srli_epi16(lo, 4), m4);
      const __m256i hbits = loadu256(qh);
      __m256i hi;
      switch (k) {
        case 0: hi = _mm256_slli_epi16(hbits, 4); break;
        case 1: hi = _mm256_slli_epi16(hbits, 2); break;
        case 2: hi = hbits; break;
        default: hi = _mm256_srli_epi16(hbits, 2); break;
      }
      const __m256i q = _mm256_or_si256(nib, _mm256_and_si256(hi, m30));
      const __m256i sc = _mm256_shuffle_epi8(half, word_pair(2 * k));
      const int t = 4 * h + k;
      for (int c = 0; c < C; ++c)
        s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(_mm256_maddubs_epi16(q, loadu256(x[c]->qs + 32 * t)), sc));
    }
  }
  const float d = h2f(blk->d);
  for (int c = 0; c < C; ++c) {
    // Centring: sum_g scales[g] * 32 * bsums[g].
    const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(loadu256(x[c]->bsums), sc16), 5);
    acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[c]->d), _mm256_cvtepi32_ps(_mm256_sub_epi32(s[c], off)), acc[c]);
  }
}

// Q2_K super-block against C activation blocks. 16 sub-blocks of 16; the register for
// elements 32t..32t+31 (t = 4h + j) holds bits 2j..2j+1 of qs[32h..32h+32), and its two
// 128-bit lanes belong to sub-blocks 2t and 2t+1 (scales in the low nibbles, mins in the
// high nibbles of scales[]).
template <int C>
inline void q2k_block(const uint8_t* blk_bytes, const BlockQ8_K* const* x, __m256* acc) {
  const BlockQ2_K* blk = reinterpret_cast<const BlockQ2_K*>(blk_bytes);
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales));
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(packed, m4));
  const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
  const __m256i m3 = _mm256_set1_epi8(3);
  __m256i s[C];
  for (int c = 0; c < C; ++c) s[c] = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    // scales[8h .. 8h+8) as int16 in both lanes; chunk t = 4h + j uses words 2j, 2j+1.
    const __m256i half = h == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00)
                                : _mm256_permute2x128_si256(sc16, sc16, 0x11);
    __m256i raw = loadu256(blk->qs + 32 * h);
    for (int j = 0; j < 4; ++j) {
      const __m256i q = _mm256_and_si256(raw, m3);
      raw = _mm256_srli_epi16(raw, 2);
      const __m256i sc = _mm256_shuffle_epi8(half, word_pair(2 * j));
      const int t = 4 * h + j;
      for (int c = 0; c < C; ++c)
        s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(_mm256_maddubs_epi16(q, loadu256(x[c]->qs + 32 * t)), sc));
    }
  }
  const float d = h2f(blk->d), dmin = h2f(blk->dmin);
  for (int c = 0; c < C; ++c) {
    const __m256i summ = _mm256_madd_epi16(loadu256(x[c]->bsums), mins);  // sum_s m_s * bsums[s]
    acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[c]->d), _mm256_cvtepi32_ps(s[c]), acc[c]);
    acc[c] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * x[c]->d), _mm256_cvtepi32_ps(summ), acc[c]);
  }
}

// The sixteen 6-bit Q3_K scales minus 32, as int8 (12 packed bytes): scale s has its low
// 4 bits in nibble s / 8 of byte s % 8 and its high 2 bits at bit 2 * (s / 4) of byte
// 8 + s % 4. Word k of the result holds scales 4k..4k+3.
inline __m128i q3k_scales(const uint8_t* p) {
  uint32_t a0, a1, a2;
  __builtin_memcpy(&a0, p, 4);
  __builtin_memcpy(&a1, p + 4, 4);
  __builtin_memcpy(&a2, p + 8, 4);
  constexpr uint32_t kLow4 = 0x0F0F0F0Fu, kLow2 = 0x03030303u;
  const uint32_t w0 = (a0 & kLow4) | ((a2 & kLow2) << 4);
  const uint32_t w1 = (a1 & kLow4) | (((a2 >> 2) & kLow2) << 4);
  const uint32_t w2 = ((a0 >> 4) & kLow4) | (((a2 >> 4) & kLow2) << 4);
  const uint32_t w3 = ((a1 >> 4) & kLow4) | (((a2 >> 6) & kLow2) << 4);
  const __m128i v = _mm_setr_epi32(static_cast<int>(w0), static_cast<int>(w1), static_cast<int>(w2),
                                   static_cast<int>(w3));
  return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

// Q3_K super-block against C activation blocks: the Q2_K layout for the low 2 bits plus
// bit 4h + j of hmask[l] as bit 2, giving q + 4 in 0..7; the -4 is applied as
// 4 * sum_s sc_s * bsums[s].
template <int C>
inline void q3k_block(const uint8_t* blk_bytes, const BlockQ8_K* const* x, __m256* acc) {
  const BlockQ3_K* blk = reinterpret_cast<const BlockQ3_K*>(blk_bytes);
  const __m256i sc16 = _mm256_cvtepi8_epi16(q3k_scales(blk->scales));
  const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  __m256i s[C];
  for (int c = 0; c < C; ++c) s[c] = _mm256_setzero_si256();
  __m256i hb = loadu256(blk->hmask);  // bit t of byte l: element 32t + l
  for (int h = 0; h < 2; ++h) {
    const __m256i half = h == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00)
                                : _mm256_permute2x128_si256(sc16, sc16, 0x11);
    __m256i raw = loadu256(blk->qs + 32 * h);
    for (int j = 0; j < 4; ++j) {
      const __m256i q = _mm256_or_si256(_mm256_and_si256(raw, m3), _mm256_slli_epi16(_mm256_and_si256(hb, one), 2));
      raw = _mm256_srli_epi16(raw, 2);
      hb = _mm256_srli_epi16(hb, 1);
      const __m256i sc = _mm256_shuffle_epi8(half, word_pair(2 * j));
      const int t = 4 * h + j;
      for (int c = 0; c < C; ++c)
        s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(_mm256_maddubs_epi16(q, loadu256(x[c]->qs + 32 * t)), sc));
    }
  }
  const float d = h2f(blk->d);
  for (int c = 0; c < C; ++c) {
    const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(loadu256(x[c]->bsums), sc16), 2);
    acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[c]->d), _mm256_cvtepi32_ps(_mm256_sub_epi32(s[c], off)), acc[c]);
  }
}

// The eight 6-bit IQ4_XS scales minus 32 as int16, in both 128-bit lanes: the low 4 bits
// of scale s are nibble s of the 32-bit scales_l, the high 2 bits are bits 2s..2s+1 of
// scales_h (moved to the top of word s by a multiply, then shifted down).
inline __m256i iq4xs_scales(uint16_t scales_h, const uint8_t* scales_l) {
  uint32_t l;
  __builtin_memcpy(&l, scales_l, 4);
  const __m128i lb = _mm_cvtsi32_si128(static_cast<int>(l));
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(lb, m4), _mm_and_si128(_mm_srli_epi16(lb, 4), m4));
  const __m128i lo = _mm_cvtepu8_epi16(nib);
  const __m128i hmul = _mm_setr_epi16(1 << 14, 1 << 12, 1 << 10, 1 << 8, 1 << 6, 1 << 4, 1 << 2, 1);
  const __m128i hi = _mm_srli_epi16(_mm_mullo_epi16(_mm_set1_epi16(static_cast<int16_t>(scales_h)), hmul), 14);
  const __m128i ls = _mm_sub_epi16(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi16(32));
  return _mm256_broadcastsi128_si256(ls);
}

// IQ4_XS super-block against C activation blocks: sub-block s (32 elements) is an IQ4_NL
// nibble block at qs[16s..16s+16); levels are signed, so |level| * (x with the level's
// sign) goes through maddubs (|level| <= 127: no int16 saturation).
template <int C>
inline void iq4xs_block(const uint8_t* blk_bytes, const BlockQ8_K* const* x, __m256* acc) {
  const BlockIQ4_XS* blk = reinterpret_cast<const BlockIQ4_XS*>(blk_bytes);
  const __m256i scales = iq4xs_scales(blk->scales_h, blk->scales_l);
  const __m256i codebook = iq4_codebook();
  __m256i s[C];
  for (int c = 0; c < C; ++c) s[c] = _mm256_setzero_si256();
  for (int sb = 0; sb < kQKK / 32; ++sb) {
    const __m256i q = _mm256_shuffle_epi8(codebook, unpack_nibbles16(blk->qs + 16 * sb));
    const __m256i aq = _mm256_abs_epi8(q);
    const __m256i sc = _mm256_shuffle_epi8(scales, word_broadcast(sb));
    for (int c = 0; c < C; ++c) {
      const __m256i p = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(loadu256(x[c]->qs + 32 * sb), q));
      s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(p, sc));
    }
  }
  const float d = h2f(blk->d);
  for (int c = 0; c < C; ++c)
    acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[c]->d), _mm256_cvtepi32_ps(s[c]), acc[c]);
}

struct K2Cols {
  static constexpr size_t kBytes = sizeof(BlockQ2_K);
  template <int C> static void block(const uint8_t* w, const BlockQ8_K* const* x, __m256* acc) { q2k_block<C>(w, x, acc); }
};
struct K3Cols {
  static constexpr size_t kBytes = sizeof(BlockQ3_K);
  template <int C> static void block(const uint8_t* w, const BlockQ8_K* const* x, __m256* acc) { q3k_block<C>(w, x, acc); }
};
struct IQ4XSCols {
  static constexpr size_t kBytes = sizeof(BlockIQ4_XS);
  template <int C> static void block(const uint8_t* w, const BlockQ8_K* const* x, __m256* acc) { iq4xs_block<C>(w, x, acc); }
};
struct K4Cols {
  static constexpr size_t kBytes = sizeof(BlockQ4_K);
  template <int C> static void block(const uint8_t* w, const BlockQ8_K* const* x, __m256* acc) { k45_block<false, C>(w, x, acc); }
};
struct K5Cols {
  static constexpr size_t kBytes = sizeof(BlockQ5_K);
  template <int C> static void block(const uint8_t* w, const BlockQ8_K* const* x, __m256* acc) { k45_block<true, C>(w, x, acc); }
};
struct K6Cols {
  static constexpr size_t kBytes = sizeof(BlockQ6_K);
  template <int C> static void block(const uint8_t* w, const BlockQ8_K* const* x, __m256* acc) { k6_block<C>(w, x, acc); }
};

// One weight row against activation rows [i0, i0 + C).
template <class T, int C>
inline void k_row_cols(int64_t nb, const uint8_t* wrow, const uint8_t* xb, size_t xs, int64_t i0, float* y,
                       int64_t ldy) {
  __m256 acc[C];
  const BlockQ8_K* x[C];
  for (int c = 0; c < C; ++c) {
    acc[c] = _mm256_setzero_ps();
    x[c] = reinterpret_cast<const BlockQ8_K*>(xb + static_cast<size_t>(i0 + c) * xs);
  }
  for (int64_t b = 0; b < nb; ++b) {
    T::template block<C>(wrow + static_cast<size_t>(b) * T::kBytes, x, acc);
    for (int c = 0; c < C; ++c) ++x[c];
  }
  for (int c = 0; c < C; ++c) y[(i0 + c) * ldy] = hsum(acc[c]);
}

constexpr int64_t kSmallMK = 8;

template <class T>
void gemm_k_small(int64_t K, const void* w, size_t w_stride, int64_t n_rows, const void* xq, size_t xq_stride,
                  int64_t m, float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(xq);
  const int64_t nb = K / kQKK;
  if (m == 1) {
    // Decode: four rows from four stretches of the range per pass (four sequential
    // memory streams per thread keep more requests in flight); one result per row.
    constexpr int64_t kStreams = 4;
    const int64_t q = n_rows / kStreams;
    const BlockQ8_K* x0 = reinterpret_cast<const BlockQ8_K*>(xb);
    for (int64_t i = 0; i < q; ++i) {
      __m256 acc[kStreams];
      const uint8_t* rows[kStreams];
      for (int64_t r = 0; r < kStreams; ++r) {
        acc[r] = _mm256_setzero_ps();
        rows[r] = wb + static_cast<size_t>(i + r * q) * w_stride;
      }
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ8_K* xblk = x0 + b;
        for (int64_t r = 0; r < kStreams; ++r)
          T::template block<1>(rows[r] + static_cast<size_t>(b) * T::kBytes, &xblk, &acc[r]);
      }
      for (int64_t r = 0; r < kStreams; ++r) y[i + r * q] = hsum(acc[r]);
    }
    for (int64_t r = q * kStreams; r < n_rows; ++r) k_row_cols<T, 1>(nb, wb + static_cast<size_t>(r) * w_stride, xb, xq_stride, 0, y + r, ldy);
    return;
  }
  // Column groups: up to 6 rows in one pass (more spills registers), else groups of 4.
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* wrow = wb + static_cast<size_t>(r) * w_stride;
    int64_t i0 = 0;
    while (i0 < m) {
      const int64_t left = m - i0;
      const int nc = static_cast<int>(left <= 6 ? left : 4);
      switch (nc) {
        case 6: k_row_cols<T, 6>(nb, wrow, xb, xq_stride, i0, y + r, ldy); break;
        case 5: k_row_cols<T, 5>(nb, wrow, xb, xq_stride, i0, y + r, ldy); break;
        case 4: k_row_cols<T, 4>(nb, wrow, xb, xq_stride, i0, y + r, ldy); break;
        case 3: k_row_cols<T, 3>(nb, wrow, xb, xq_stride, i0, y + r, ldy); break;
        case 2: k_row_cols<T, 2>(nb, wrow, xb, xq_stride, i0, y + r, ldy); break;
        default: k_row_cols<T, 1>(nb, wrow, xb, xq_stride, i0, y + r, ldy); break;
      }
      i0 += nc;
    }
  }
}

// Prefill for the types without an unpacked-panel form (Q2_K, Q3_K, IQ4_XS): the
// register kernels of gemm_k_small over a panel of kRows weight rows (a few KiB, kept in
// L1) and groups of 4 activation rows (tail 1..3), activation group outer, so each
// activation group is read from memory once per panel. Unpacking a block again per
// group costs less than the group's dot products for these few-bit types. Per output
// element the same block<C> operations run in the same order as at small m, so results
// are bitwise equal to gemm_k_small (batch invariance).
template <class T>
void gemm_k_rows(int64_t K, const void* w, size_t w_stride, int64_t n_rows, const void* xq, size_t xq_stride,
                 int64_t m, float* y, int64_t ldy) {
  constexpr int64_t kRows = 8;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(xq);
  const int64_t nb = K / kQKK;
  for (int64_t r0 = 0; r0 < n_rows; r0 += kRows) {
    const int64_t r1 = std::min(n_rows, r0 + kRows);
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
      const int nc = static_cast<int>(std::min<int64_t>(4, m - i0));
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* wrow = wb + static_cast<size_t>(r) * w_stride;
        switch (nc) {
          case 4: k_row_cols<T, 4>(nb, wrow, xb, xq_stride, i0, y + r, ldy); break;
          case 3: k_row_cols<T, 3>(nb, wrow, xb, xq_stride, i0, y + r, ldy); break;
          case 2: k_row_cols<T, 2>(nb, wrow, xb, xq_stride, i0, y + r, ldy); break;
          default: k_row_cols<T, 1>(nb, wrow, xb, xq_stride, i0, y + r, ldy); break;
        }
      }
    }
  }
}

}  // namespace

// m > kSmallMK (prefill): unpack each row panel once (gemm_panel); else registers.
SPECULA_AVX2_GEMM(gemm_q4_k) {
  if (m > kSmallMK) return gemm_panel<Q4K>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
  gemm_k_small<K4Cols>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
}
SPECULA_AVX2_GEMM(gemm_q5_k) {
  if (m > kSmallMK) return gemm_panel<Q5K>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
  gemm_k_small<K5Cols>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
}
SPECULA_AVX2_GEMM(gemm_q6_k) {
  if (m > kSmallMK) return gemm_panel<Q6K>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
  gemm_k_small<K6Cols>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
}

SPECULA_AVX2_GEMM(gemm_q2_k) {
  if (m > kSmallMK) return gemm_k_rows<K2Cols>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
  gemm_k_small<K2Cols>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
}
SPECULA_AVX2_GEMM(gemm_q3_k) {
  if (m > kSmallMK) return gemm_k_rows<K3Cols>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
  gemm_k_small<K3Cols>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
}
SPECULA_AVX2_GEMM(gemm_iq4_xs) {
  if (m > kSmallMK) return gemm_k_rows<IQ4XSCols>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
  gemm_k_small<IQ4XSCols>(K, w, w_stride, n_rows, xq, xq_stride, m, y, ldy);
}

}  // namespace specula::kernels::avx2
