// kernels/avx512/gemm_packed.cpp — AVX-512 VNNI gemms on repacked weights: Q4_K, Q5_K and
// Q6_K (Q8_K activations) and the legacy Q4_0 / Q5_0 / Q8_0 (Q8_0 activations).
//
// Layout (this tier's own, made at load by pack_*): rows go in groups of 16; a group's
// super-blocks follow one another along K. In each packed super-block, a 64-byte chunk
// holds the same 4 consecutive columns of the 16 rows (row r in bytes 4r..4r+3), so one
// `vpdpbusd` multiplies 4 columns of 16 rows by 4 activation bytes broadcast to every
// lane: 16 outputs in the lanes of one register, no horizontal sums, no shuffles. The
// bytes are the GGUF block's own bytes regrouped (nibble pairs stay paired), with the
// 6-bit Q4_K scales/mins unpacked to bytes; a packed group is 2.8% (Q4_K) / 1% (Q6_K)
// larger than the 16 rows it holds.
//
// Arithmetic per output element y[i, r] (the same for every tile shape, m and thread
// split, so results are batch invariant; K-quant block formulas as in the GGUF format /
// llama.cpp's ggml_vec_dot_q*_K_q8_K, facts only):
//   Q4_K (Q5_K: the quant's fifth bit ORed in): per super-block b, exact int32 A = sum_j sc_j * sum_{k in j} q_k x_k and
//         Mn = sum_j m_j * (x bsum over sub-block j), then
//         acc = fma(float(A), d_r * d_x, acc); acc = fnma(float(Mn), dmin_r * d_x, acc).
//   Q6_K: exact int32 A = sum_j sc_j * sum_{k in j} q_k x_k - 32 * sum_j sc_j * bsum_j,
//         then acc = fma(float(A), d_r * d_x, acc).
//   Q4_0/Q5_0/Q8_0: packed as signed bytes v (Q4_0 q-8, Q5_0 q-16, Q8_0 q) stored as
//         v + 128, two 32-blocks per packed unit; per block the exact int32
//         A = sum (v_k + 128) x_k - 128 * sum x_k, then acc = fma(float(A), d_r * d_x, acc).
// (unsigned weight quants times signed activation bytes: vpdpbusd; sub-block scales by
// vpmulld; min / centring terms from the activation bsums by vpdpwssd.)
// Does not thread (ops::matmul splits rows in multiples of 16) and never allocates.
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

#include "kernels/avx512/avx512.h"
#include "kernels/quant_blocks.h"

namespace specula::kernels::avx512 {
namespace {

constexpr int kRows = kPackRows;

// One packed Q4_K super-block of 16 rows.
struct alignas(64) PackQ4K {
  uint16_t d[kRows];       // fp16 d of each row
  uint16_t dmin[kRows];    // fp16 dmin
  uint8_t sc[8][kRows];    // sub-block scale j of row r (6 bits)
  uint8_t mn[4][kRows][2]; // (min 2i, min 2i+1) of row r
  uint8_t qs[4][8][64];    // [p][t]: row r's qs bytes 32p + 4t .. +3 (low nibble: sub-block 2p, high: 2p+1)
};
static_assert(sizeof(PackQ4K) == 2368, "packed Q4_K layout");

// One packed Q5_K super-block of 16 rows: the Q4_K form of its low 4 bits plus the fifth bits.
struct alignas(64) PackQ5K {
  PackQ4K k4;
  uint8_t qh[8][64];  // [t]: row r's qh bytes 4t .. +3 (bit j: element 32j + 4t + i)
};
static_assert(sizeof(PackQ5K) == 2880, "packed Q5_K layout");
inline const PackQ4K& k4_of(const PackQ4K& p) { return p; }
inline const PackQ4K& k4_of(const PackQ5K& p) { return p.k4; }

// One packed Q6_K super-block of 16 rows.
struct alignas(64) PackQ6K {
  int8_t sc[8][kRows][2];     // (scale 2i, scale 2i+1) of row r
  uint8_t ql[2][2][8][64];    // [h][s][u]: row r's ql bytes 64h + 32s + 4u .. +3
  uint8_t qh[2][8][64];       // [h][u]: row r's qh bytes 32h + 4u .. +3
  uint16_t d[kRows];          // fp16 d
  uint8_t pad[32];
};
static_assert(sizeof(PackQ6K) == 3392, "packed Q6_K layout");

// Decode streams weights from memory once: prefetch kAhead super-blocks ahead in each of
// the tile's group streams (a prefetch past the end of the buffer is harmless).
constexpr int kAhead = 1;
template <int RG, class Pack>
inline void prefetch_ahead(const Pack* const* wg, int64_t b) {
  for (int g = 0; g < RG; ++g) {
    const char* p = reinterpret_cast<const char*>(wg[g] + b + kAhead);
    for (size_t o = 0; o < sizeof(Pack); o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
  }
}

template <int RG, int C>
inline void zero(__m512i (&v)[RG][C]) {
  for (int g = 0; g < RG; ++g)
    for (int c = 0; c < C; ++c) v[g][c] = _mm512_setzero_si512();
}

inline __m512i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// ---- packing ----

// Row l of a packed Q4_K-form block from a Q4_K or Q5_K block (same d, dmin, scales, qs).
template <class Block>
void fill_k4(const Block& s, int l, PackQ4K& p) {
  p.d[l] = s.d;
  p.dmin[l] = s.dmin;
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    if (j < 4) {
      sc = s.scales[j] & 63;
      m = s.scales[j + 4] & 63;
    } else {
      sc = (s.scales[j + 4] & 0x0F) | ((s.scales[j - 4] >> 6) << 4);
      m = (s.scales[j + 4] >> 4) | ((s.scales[j] >> 6) << 4);
    }
    p.sc[j][l] = static_cast<uint8_t>(sc);
    p.mn[j / 2][l][j % 2] = static_cast<uint8_t>(m);
  }
  for (int q = 0; q < 4; ++q)
    for (int t = 0; t < 8; ++t) std::memcpy(&p.qs[q][t][4 * l], s.qs + 32 * q + 4 * t, 4);
}

// Packs group g (rows 16g .. 16g+15 of N): zeroes its n_units packed units, then
// fill(row's blocks, lane l, units) for every row that exists.
template <class Block, class Pack, class Fill>
void pack_rows16(const uint8_t* w, size_t w_stride, int64_t N, int64_t n_units, int64_t g, Pack* out, Fill fill) {
  std::memset(static_cast<void*>(out), 0, sizeof(Pack) * static_cast<size_t>(n_units));
  for (int l = 0; l < kRows; ++l) {
    const int64_t row = g * kRows + l;
    if (row >= N) break;
    fill(reinterpret_cast<const Block*>(w + static_cast<size_t>(row) * w_stride), l, out);
  }
}

void pack_q4_k_group(const uint8_t* w, size_t w_stride, int64_t N, int64_t K, int64_t g, PackQ4K* out) {
  const int64_t nb = K / kQKK;
  pack_rows16<BlockQ4_K>(w, w_stride, N, nb, g, out, [nb](const BlockQ4_K* src, int l, PackQ4K* o) {
    for (int64_t b = 0; b < nb; ++b) fill_k4(src[b], l, o[b]);
  });
}

void pack_q5_k_group(const uint8_t* w, size_t w_stride, int64_t N, int64_t K, int64_t g, PackQ5K* out) {
  const int64_t nb = K / kQKK;
  pack_rows16<BlockQ5_K>(w, w_stride, N, nb, g, out, [nb](const BlockQ5_K* src, int l, PackQ5K* o) {
    for (int64_t b = 0; b < nb; ++b) {
      fill_k4(src[b], l, o[b].k4);
      for (int t = 0; t < 8; ++t) std::memcpy(&o[b].qh[t][4 * l], src[b].qh + 4 * t, 4);
    }
  });
}

void pack_q6_k_group(const uint8_t* w, size_t w_stride, int64_t N, int64_t K, int64_t g, PackQ6K* out) {
  const int64_t nb = K / kQKK;
  pack_rows16<BlockQ6_K>(w, w_stride, N, nb, g, out, [nb](const BlockQ6_K* src, int l, PackQ6K* o) {
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ6_K& s = src[b];
      PackQ6K& p = o[b];
      p.d[l] = s.d;
      for (int i = 0; i < 8; ++i) {
        p.sc[i][l][0] = s.scales[2 * i];
        p.sc[i][l][1] = s.scales[2 * i + 1];
      }
      for (int h = 0; h < 2; ++h)
        for (int u = 0; u < 8; ++u) {
          for (int s2 = 0; s2 < 2; ++s2) std::memcpy(&p.ql[h][s2][u][4 * l], s.ql + 64 * h + 32 * s2 + 4 * u, 4);
          std::memcpy(&p.qh[h][u][4 * l], s.qh + 32 * h + 4 * u, 4);
        }
    }
  });
}

// ---- tiles: RG groups of 16 rows x C activation rows; acc[g * C + c] ----

// Q4_K (kHigh false) and Q5_K (kHigh true: the fifth bit of sub-block j is bit j of qh).
template <bool kHigh, int RG, int C>
struct K45Tile {
  using Pack = std::conditional_t<kHigh, PackQ5K, PackQ4K>;
  using X = BlockQ8_K;
  static size_t group_bytes(int64_t K) { return sizeof(Pack) * static_cast<size_t>(K / kQKK); }
  static inline void run(const Pack* const* wg, int64_t K, const X* const* x, __m512* acc) {
    const int64_t nb = K / kQKK;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; ++b) {
      if constexpr (C == 1) prefetch_ahead<RG>(wg, b);
      __m512i A[RG][C];
      zero(A);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const int p = j >> 1, hi = j & 1;
        __m512i is[RG][C];
        zero(is);
#pragma GCC unroll 8
        for (int t = 0; t < 8; ++t) {
          __m512i q[RG];
          for (int g = 0; g < RG; ++g) {
            const __m512i v = _mm512_load_si512(k4_of(wg[g][b]).qs[p][t]);
            q[g] = hi ? _mm512_and_si512(_mm512_srli_epi16(v, 4), m4) : _mm512_and_si512(v, m4);
            if constexpr (kHigh) {
              const __m512i h = _mm512_load_si512(wg[g][b].qh[t]);
              const __m512i bit = j <= 4 ? _mm512_slli_epi16(h, 4 - j) : _mm512_srli_epi16(h, j - 4);
              q[g] = _mm512_or_si512(q[g], _mm512_and_si512(bit, _mm512_set1_epi8(0x10)));
            }
          }
          for (int c = 0; c < C; ++c) {
            const __m512i xb = bcast32(x[c][b].qs + 64 * p + 32 * hi + 4 * t);
            for (int g = 0; g < RG; ++g) is[g][c] = _mm512_dpbusd_epi32(is[g][c], q[g], xb);
          }
        }
        for (int g = 0; g < RG; ++g) {
          const __m512i scv = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(k4_of(wg[g][b]).sc[j])));
          for (int c = 0; c < C; ++c) A[g][c] = _mm512_add_epi32(A[g][c], _mm512_mullo_epi32(is[g][c], scv));
        }
      }
      // Sub-block sums of the activations, paired for vpdpwssd: (bsum32 2i, bsum32 2i+1).
      int32_t bp[C][4];
      for (int c = 0; c < C; ++c) {
        const int16_t* bs = x[c][b].bsums;
        for (int i = 0; i < 4; ++i) {
          const int s0 = bs[4 * i] + bs[4 * i + 1], s1 = bs[4 * i + 2] + bs[4 * i + 3];
          bp[c][i] = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(s0)) |
                                          (static_cast<uint32_t>(static_cast<uint16_t>(s1)) << 16));
        }
      }
      for (int g = 0; g < RG; ++g) {
        const PackQ4K& w = k4_of(wg[g][b]);
        const __m512 dv = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(w.d)));
        const __m512 dmv = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(w.dmin)));
        __m512i mn[4];
        for (int i = 0; i < 4; ++i) mn[i] = _mm512_cvtepu8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(w.mn[i])));
        for (int c = 0; c < C; ++c) {
          __m512i M = _mm512_setzero_si512();
          for (int i = 0; i < 4; ++i) M = _mm512_dpwssd_epi32(M, mn[i], _mm512_set1_epi32(bp[c][i]));
          const __m512 dx = _mm512_set1_ps(x[c][b].d);
          __m512& a = acc[g * C + c];
          a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(A[g][c]), _mm512_mul_ps(dv, dx), a);
          a = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(dmv, dx), a);
        }
      }
    }
  }
};

template <int RG, int C>
using Q4KTile = K45Tile<false, RG, C>;
template <int RG, int C>
using Q5KTile = K45Tile<true, RG, C>;

template <int RG, int C>
struct Q6KTile {
  using Pack = PackQ6K;
  using X = BlockQ8_K;
  static size_t group_bytes(int64_t K) { return sizeof(Pack) * static_cast<size_t>(K / kQKK); }
  static inline void run(const Pack* const* wg, int64_t K, const X* const* x, __m512* acc) {
    const int64_t nb = K / kQKK;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    for (int64_t b = 0; b < nb; ++b) {
      if constexpr (C == 1) prefetch_ahead<RG>(wg, b);
      __m512i A[RG][C];
      zero(A);
      for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 2
        for (int half = 0; half < 2; ++half) {
          // Sub-blocks j = 8h + 2s + half for quarters s = 0..3 (columns 128h + 32s + 16 half ..).
          __m512i is[4][RG][C];
          for (int s = 0; s < 4; ++s)
            for (int g = 0; g < RG; ++g)
              for (int c = 0; c < C; ++c) is[s][g][c] = _mm512_setzero_si512();
#pragma GCC unroll 4
          for (int uu = 0; uu < 4; ++uu) {
            const int u = 4 * half + uu;
            __m512i q[4][RG];
            for (int g = 0; g < RG; ++g) {
              const __m512i l0 = _mm512_load_si512(wg[g][b].ql[h][0][u]);
              const __m512i l1 = _mm512_load_si512(wg[g][b].ql[h][1][u]);
              const __m512i hb = _mm512_load_si512(wg[g][b].qh[h][u]);
              q[0][g] = _mm512_or_si512(_mm512_and_si512(l0, m4), _mm512_and_si512(_mm512_slli_epi16(hb, 4), m30));
              q[1][g] = _mm512_or_si512(_mm512_and_si512(l1, m4), _mm512_and_si512(_mm512_slli_epi16(hb, 2), m30));
              q[2][g] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4), _mm512_and_si512(hb, m30));
              q[3][g] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m4),
                                        _mm512_and_si512(_mm512_srli_epi16(hb, 2), m30));
            }
            for (int c = 0; c < C; ++c)
              for (int s = 0; s < 4; ++s) {
                const __m512i xb = bcast32(x[c][b].qs + 128 * h + 32 * s + 4 * u);
                for (int g = 0; g < RG; ++g) is[s][g][c] = _mm512_dpbusd_epi32(is[s][g][c], q[s][g], xb);
              }
          }
          for (int s = 0; s < 4; ++s) {
            const int j = 8 * h + 2 * s + half;
            for (int g = 0; g < RG; ++g) {
              const __m512i pr = _mm512_cvtepi8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(wg[g][b].sc[j >> 1])));
              const __m512i scv = (j & 1) ? _mm512_srai_epi32(pr, 16) : _mm512_srai_epi32(_mm512_slli_epi32(pr, 16), 16);
              for (int c = 0; c < C; ++c) A[g][c] = _mm512_add_epi32(A[g][c], _mm512_mullo_epi32(is[s][g][c], scv));
            }
          }
        }
      }
      for (int g = 0; g < RG; ++g) {
        const Pack& w = wg[g][b];
        const __m512 dv = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(w.d)));
        for (int c = 0; c < C; ++c) {
          // Centring: 32 * sum_j sc_j * bsums_j.
          __m512i cn = _mm512_setzero_si512();
          for (int i = 0; i < 8; ++i)
            cn = _mm512_dpwssd_epi32(cn, _mm512_cvtepi8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(w.sc[i]))),
                                     bcast32(x[c][b].bsums + 2 * i));
          const __m512i v = _mm512_sub_epi32(A[g][c], _mm512_slli_epi32(cn, 5));
          __m512& a = acc[g * C + c];
          a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(dv, _mm512_set1_ps(x[c][b].d)), a);
        }
      }
    }
  }
};

// One packed unit of the legacy types: two 32-blocks of 16 rows, values as v + 128.
struct alignas(64) PackQ8 {
  uint16_t d[2][kRows];   // fp16 d of block 2u + h, row r
  uint8_t qs[2][8][64];   // [h][t]: row r's values 4t .. 4t+3 of block 2u + h, plus 128
};
static_assert(sizeof(PackQ8) == 1088, "packed legacy layout");

// Value j (0..31) of a legacy block as a signed byte.
template <class Block>
inline int legacy_value(const Block& b, int j);
template <>
inline int legacy_value(const BlockQ8_0& b, int j) { return b.qs[j]; }
template <>
inline int legacy_value(const BlockQ4_0& b, int j) { return ((b.qs[j & 15] >> (j < 16 ? 0 : 4)) & 0x0F) - 8; }
template <>
inline int legacy_value(const BlockQ5_0& b, int j) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  return (((b.qs[j & 15] >> (j < 16 ? 0 : 4)) & 0x0F) | (((qh >> j) & 1u) << 4)) - 16;
}

template <class Block>
void pack_legacy_group(const uint8_t* w, size_t w_stride, int64_t N, int64_t K, int64_t g, PackQ8* out) {
  const int64_t nblk = K / kQK;
  pack_rows16<Block>(w, w_stride, N, (nblk + 1) / 2, g, out, [nblk](const Block* src, int l, PackQ8* o) {
    for (int64_t b = 0; b < nblk; ++b) {
      PackQ8& p = o[b / 2];
      const int h = static_cast<int>(b % 2);
      p.d[h][l] = src[b].d;
      for (int j = 0; j < kQK; ++j) p.qs[h][j / 4][4 * l + j % 4] = static_cast<uint8_t>(legacy_value(src[b], j) + 128);
    }
  });
}

template <int RG, int C>
struct Q8Tile {
  using Pack = PackQ8;
  using X = BlockQ8_0;
  static size_t group_bytes(int64_t K) { return sizeof(Pack) * static_cast<size_t>((K / kQK + 1) / 2); }
  static inline void run(const Pack* const* wg, int64_t K, const X* const* x, __m512* acc) {
    const int64_t nblk = K / kQK;
    for (int64_t b = 0; b < nblk; ++b) {
      const int64_t u = b >> 1;
      const int h = static_cast<int>(b & 1);
      if (C == 1 && h == 0) prefetch_ahead<RG>(wg, u);
      __m512i is[RG][C];
      zero(is);
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) {
        __m512i q[RG];
        for (int g = 0; g < RG; ++g) q[g] = _mm512_load_si512(wg[g][u].qs[h][t]);
        for (int c = 0; c < C; ++c) {
          const __m512i xb = bcast32(x[c][b].qs + 4 * t);
          for (int g = 0; g < RG; ++g) is[g][c] = _mm512_dpbusd_epi32(is[g][c], q[g], xb);
        }
      }
      // 128 * sum of the activation block (the +128 of the stored weights).
      __m512i corr[C];
      for (int c = 0; c < C; ++c) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[c][b].qs));
        const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(xv, _mm256_set1_epi8(static_cast<char>(0x80))),
                                            _mm256_setzero_si256());
        const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
        const int sum = static_cast<int>(_mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1)) - 128 * kQK;
        corr[c] = _mm512_set1_epi32(128 * sum);
      }
      for (int g = 0; g < RG; ++g) {
        const __m512 dv = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(wg[g][u].d[h])));
        for (int c = 0; c < C; ++c) {
          const __m512 dx = _mm512_set1_ps(_cvtsh_ss(x[c][b].d));
          __m512& a = acc[g * C + c];
          a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(is[g][c], corr[c])), _mm512_mul_ps(dv, dx), a);
        }
      }
    }
  }
};

// ---- driver ----

template <template <int, int> class Tile, int RG, int C>
inline void run_tile(const uint8_t* base, size_t group_bytes, const int64_t* groups, int64_t K, const uint8_t* xb,
                     size_t xs, int64_t i0, int64_t n_rows, float* y, int64_t ldy) {
  using Pack = typename Tile<1, 1>::Pack;
  using X = typename Tile<1, 1>::X;
  const Pack* wg[RG];
  const X* x[C];
  __m512 acc[RG * C];
  for (int g = 0; g < RG; ++g) wg[g] = reinterpret_cast<const Pack*>(base + static_cast<size_t>(groups[g]) * group_bytes);
  for (int c = 0; c < C; ++c) x[c] = reinterpret_cast<const X*>(xb + static_cast<size_t>(i0 + c) * xs);
  for (int k = 0; k < RG * C; ++k) acc[k] = _mm512_setzero_ps();
  Tile<RG, C>::run(wg, K, x, acc);
  for (int g = 0; g < RG; ++g) {
    const int64_t r = groups[g] * kRows;
    const int64_t valid = std::min<int64_t>(kRows, n_rows - r);
    const __mmask16 mask = valid >= kRows ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << valid) - 1);
    for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(y + (i0 + c) * ldy + r, mask, acc[g * C + c]);
  }
}

// Runs Tile<rg, c> for runtime rg <= RG, c <= C.
template <template <int, int> class Tile, int RG, int C>
inline void run_tile_rc(int rg, int c, const uint8_t* base, size_t group_bytes, const int64_t* groups, int64_t K,
                        const uint8_t* xb, size_t xs, int64_t i0, int64_t n_rows, float* y, int64_t ldy) {
  if constexpr (RG > 1) {
    if (rg < RG) return run_tile_rc<Tile, RG - 1, C>(rg, c, base, group_bytes, groups, K, xb, xs, i0, n_rows, y, ldy);
  }
  if constexpr (C > 1) {
    if (c < C) return run_tile_rc<Tile, RG, C - 1>(rg, c, base, group_bytes, groups, K, xb, xs, i0, n_rows, y, ldy);
  }
  run_tile<Tile, RG, C>(base, group_bytes, groups, K, xb, xs, i0, n_rows, y, ldy);
}

// RP x CP: prefill tile; CS: widest tile for 2 <= m <= 8 (one group).
template <template <int, int> class Tile, int RP, int CP, int CS>
void gemm_packed_driver(int64_t K, const void* packed, int64_t r0, int64_t n_rows, const void* xq, size_t xq_stride,
                        int64_t m, float* y, int64_t ldy) {
  const size_t group_bytes = Tile<1, 1>::group_bytes(K);
  const uint8_t* base = static_cast<const uint8_t*>(packed) + static_cast<size_t>(r0 / kRows) * group_bytes;
  const auto* xb = static_cast<const uint8_t*>(xq);
  const int64_t ng = (n_rows + kRows - 1) / kRows;
  if (m == 1) {
    // Decode: four groups from four stretches of the range per pass (four sequential
    // memory streams per thread keep more requests in flight).
    const int64_t q = ng / 4;
    for (int64_t i = 0; i < q; ++i) {
      const int64_t groups[4] = {i, i + q, i + 2 * q, i + 3 * q};
      run_tile<Tile, 4, 1>(base, group_bytes, groups, K, xb, xq_stride, 0, n_rows, y, ldy);
    }
    for (int64_t g = 4 * q; g < ng; ++g) run_tile<Tile, 1, 1>(base, group_bytes, &g, K, xb, xq_stride, 0, n_rows, y, ldy);
    return;
  }
  if (m <= 8) {
    for (int64_t g = 0; g < ng; ++g)
      for (int64_t i0 = 0; i0 < m; i0 += CS) {
        const int c = static_cast<int>(std::min<int64_t>(CS, m - i0));
        run_tile_rc<Tile, 1, CS>(1, c, base, group_bytes, &g, K, xb, xq_stride, i0, n_rows, y, ldy);
      }
    return;
  }
  constexpr int64_t MC = 64;
  for (int64_t i0 = 0; i0 < m; i0 += MC) {
    const int64_t i1 = std::min<int64_t>(m, i0 + MC);
    for (int64_t g0 = 0; g0 < ng; g0 += RP) {
      int64_t groups[RP];
      const int rg = static_cast<int>(std::min<int64_t>(RP, ng - g0));
      for (int g = 0; g < rg; ++g) groups[g] = g0 + g;
      for (int64_t i = i0; i < i1; i += CP) {
        const int c = static_cast<int>(std::min<int64_t>(CP, i1 - i));
        run_tile_rc<Tile, RP, CP>(rg, c, base, group_bytes, groups, K, xb, xq_stride, i, n_rows, y, ldy);
      }
    }
  }
}

// The three table entries of one packed type: size, packing (groups [g0, g1), each by
// kGroup at its offset) and the gemm (driver with tile RP x CP for prefill, CS for m <= 8).
template <template <int, int> class Tile, int RP, int CP, int CS, auto kGroup>
struct Entries {
  using Pack = typename Tile<1, 1>::Pack;
  static size_t bytes(int64_t N, int64_t K) {
    return static_cast<size_t>((N + kRows - 1) / kRows) * Tile<1, 1>::group_bytes(K);
  }
  static void pack(const void* w, size_t w_stride, int64_t N, int64_t K, int64_t g0, int64_t g1, void* out) {
    const size_t gb = Tile<1, 1>::group_bytes(K);
    for (int64_t g = g0; g < g1; ++g)
      kGroup(static_cast<const uint8_t*>(w), w_stride, N, K, g,
             reinterpret_cast<Pack*>(static_cast<uint8_t*>(out) + static_cast<size_t>(g) * gb));
  }
  static void gemm(int64_t K, const void* packed, int64_t r0, int64_t n_rows, const void* xq, size_t xq_stride,
                   int64_t m, float* y, int64_t ldy) {
    gemm_packed_driver<Tile, RP, CP, CS>(K, packed, r0, n_rows, xq, xq_stride, m, y, ldy);
  }
  static constexpr PackedGemm entries() { return PackedGemm{bytes, pack, gemm}; }
};

}  // namespace

PackedGemm packed_gemm(DType t) {
  switch (t) {
    case DType::Q4_K: return Entries<Q4KTile, 2, 4, 8, pack_q4_k_group>::entries();
    case DType::Q5_K: return Entries<Q5KTile, 2, 4, 8, pack_q5_k_group>::entries();
    case DType::Q6_K: return Entries<Q6KTile, 1, 6, 4, pack_q6_k_group>::entries();
    case DType::Q4_0: return Entries<Q8Tile, 2, 6, 8, pack_legacy_group<BlockQ4_0>>::entries();
    case DType::Q5_0: return Entries<Q8Tile, 2, 6, 8, pack_legacy_group<BlockQ5_0>>::entries();
    case DType::Q8_0: return Entries<Q8Tile, 2, 6, 8, pack_legacy_group<BlockQ8_0>>::entries();
    default: return PackedGemm{};
  }
}

}  // namespace specula::kernels::avx512
