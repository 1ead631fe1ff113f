// kernels/quant_blocks.h — on-disk block layouts of GGML quantized types.
//
// Source: the GGUF/GGML format as documented in ggml's `ggml-common.h` and the
// `gguf` Python package's reference dequantizers (gguf/quants.py). All blocks are
// packed little-endian structs; `d`/`dmin` are IEEE half (uint16_t bits).
// QK = elements per block. Does not contain any math.
#pragma once

#include <cstdint>

namespace specula::kernels {

constexpr int kQK = 32;    // legacy block size
constexpr int kQKK = 256;  // K-quant super-block size
constexpr int kKScaleSize = 12;

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
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace specula::kernels
