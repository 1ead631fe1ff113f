// core/quant_blocks.h — on-disk block layouts of GGML quantized types.
//
// Source: the GGUF/GGML format as documented in ggml's `ggml-common.h` and the
// `gguf` Python package's reference dequantizers (gguf/quants.py). All blocks are
// packed little-endian structs; `d`/`dmin` are IEEE half (uint16_t bits).
// QK = elements per block; kIQ4NLValues is the IQ4 codebook (a layout constant).
// Does not contain any math.
#pragma once

#include <cstdint>

namespace specula {

constexpr int kQK = 32;    // legacy block size
constexpr int kQKK = 256;  // K-quant super-block size
constexpr int kKScaleSize = 12;

// The 16 non-linear levels of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl).
constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

#pragma pack(push, 1)
struct BlockQ4_0 {  // x = d * (q - 8), q in [0,15]; qs[j] low nibble = elem j, high = elem j+16
  uint16_t d;
  uint8_t qs[kQK / 2];
};
struct BlockQ4_1 {  // x = d * q + m
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
struct BlockQ8_A {  // x = d * q + m, q int8 (specula's affine 8-bit; MLX 8-bit weights)
  float d;
  float m;
  int8_t qs[kQK];
};
struct BlockQ5_0 {  // x = d * (q - 16); q = nibble | (bit j of qh) << 4 (elem j), bit j+16 for elem j+16
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {  // x = d * q + m
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {  // x = d * q
  uint16_t d;
  int8_t qs[kQK];
};
struct BlockQ8_1 {  // activations: x = d * q; s = d * sum(q)
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK];
};
struct BlockQ2_K {  // 16 sub-blocks of 16: x = d*(sc & 15)*q - dmin*(sc >> 4), q in [0,3]
  uint8_t scales[kQKK / 16];  // sub-block s: scale in the low nibble, min in the high
  uint8_t qs[kQKK / 4];       // element 128h + 32j + l: bits 2j..2j+1 of qs[32h + l]
  uint16_t d;
  uint16_t dmin;
};
struct BlockQ3_K {  // 16 sub-blocks of 16: x = d*(sc - 32)*q, q in [-4,3]
  uint8_t hmask[kQKK / 8];  // element 128h + 32j + l: q += 4 iff bit 4h+j of hmask[l] is set
  uint8_t qs[kQKK / 4];     // low 2 bits of q + 4, packed as in Q2_K
  uint8_t scales[12];       // 16 6-bit scales: low 4 bits nibble s/8 of scales[s%8],
                            // high 2 bits bits 2(s/4).. of scales[8 + s%4]
  uint16_t d;
};
struct BlockQ4_K {  // 8 sub-blocks of 32: x = d*sc*q - dmin*m; 6-bit sc/m packed in scales
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qs[kQKK / 2];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
struct BlockQ6_K {  // 16 sub-blocks of 16: x = d * sc * (q - 32)
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
struct BlockIQ4_NL {  // x = d * kIQ4NLValues[q]; qs[j] low nibble = elem j, high = elem j+16
  uint16_t d;
  uint8_t qs[kQK / 2];
};
struct BlockIQ4_XS {  // 8 sub-blocks of 32: x = d * (ls - 32) * kIQ4NLValues[q]
  uint16_t d;
  uint16_t scales_h;              // sub-block s: bits 4..5 of ls in bits 2s..2s+1
  uint8_t scales_l[kQKK / 64];    // sub-block s: bits 0..3 of ls in nibble s%2 of scales_l[s/2]
  uint8_t qs[kQKK / 2];           // sub-block s as an IQ4_NL block's qs (qs[16s .. 16s+16))
};
struct BlockQ8_K {  // activations for K-quant dot products; d is float
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];  // sum of each group of 16 qs
};
#pragma pack(pop)

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ8_A) == 40);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);

}  // namespace specula
