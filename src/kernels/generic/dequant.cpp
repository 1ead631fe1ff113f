// kernels/generic/dequant.cpp — reference row dequantizers for every type specula
// loads or uses as an activation (F32, F16, BF16, Q4_0..Q8_1, Q2_K..Q6_K, Q8_K, IQ4_NL,
// IQ4_XS).
//
// Each loop follows the block layout in core/quant_blocks.h and computes the
// float32 operations in the same order as gguf-py's `gguf/quants.py` reference
// dequantizers (e.g. Q4_K: (d*sc)*q - dmin*m), so results match it bit for bit.
// ggml's `dequantize_row_*` in ggml-quants.c use the same order.
// Does not vectorize, thread or validate n (callers pass a multiple of the block size).
#include <cstring>

#include "core/fp16.h"
#include "kernels/generic/generic.h"
#include "core/quant_blocks.h"

namespace specula::kernels::generic {

void dequantize_row_f32(const void* x, float* y, int64_t n) {
  std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
}

void dequantize_row_f16(const void* x, float* y, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(x);
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(h[i]);
}

void dequantize_row_bf16(const void* x, float* y, int64_t n) {
  const auto* b = static_cast<const uint16_t*>(x);
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(b[i]);
}

void dequantize_row_q4_0(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_0*>(x);
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const BlockQ4_0& blk = blocks[b];
    const float d = fp16_to_fp32(blk.d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (blk.qs[j] & 0x0F) - 8;  // element j
      const int hi = (blk.qs[j] >> 4) - 8;    // element j + 16
      y[j] = d * static_cast<float>(lo);
      y[j + kQK / 2] = d * static_cast<float>(hi);
    }
  }
}

void dequantize_row_q4_1(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_1*>(x);
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const BlockQ4_1& blk = blocks[b];
    const float d = fp16_to_fp32(blk.d);
    const float m = fp16_to_fp32(blk.m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>(blk.qs[j] & 0x0F) + m;
      y[j + kQK / 2] = d * static_cast<float>(blk.qs[j] >> 4) + m;
    }
  }
}

void dequantize_row_q8_a(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_A*>(x);
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK)
    for (int j = 0; j < kQK; ++j) y[j] = blocks[b].d * static_cast<float>(blocks[b].qs[j]) + blocks[b].m;
}

namespace {
// Bit j of the little-endian 32-bit qh word of a Q5 block: the 5th bit of element j.
inline uint32_t load_qh(const uint8_t qh[4]) {
  return static_cast<uint32_t>(qh[0]) | (static_cast<uint32_t>(qh[1]) << 8) |
         (static_cast<uint32_t>(qh[2]) << 16) | (static_cast<uint32_t>(qh[3]) << 24);
}
}  // namespace

void dequantize_row_q5_0(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_0*>(x);
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const BlockQ5_0& blk = blocks[b];
    const float d = fp16_to_fp32(blk.d);
    const uint32_t qh = load_qh(blk.qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = static_cast<int>((blk.qs[j] & 0x0F) | (((qh >> j) & 1u) << 4)) - 16;
      const int hi = static_cast<int>((blk.qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16;
      y[j] = d * static_cast<float>(lo);
      y[j + kQK / 2] = d * static_cast<float>(hi);
    }
  }
}

void dequantize_row_q5_1(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_1*>(x);
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const BlockQ5_1& blk = blocks[b];
    const float d = fp16_to_fp32(blk.d);
    const float m = fp16_to_fp32(blk.m);
    const uint32_t qh = load_qh(blk.qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const uint32_t lo = (blk.qs[j] & 0x0Fu) | (((qh >> j) & 1u) << 4);
      const uint32_t hi = (blk.qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4);
      y[j] = d * static_cast<float>(lo) + m;
      y[j + kQK / 2] = d * static_cast<float>(hi) + m;
    }
  }
}

void dequantize_row_q8_0(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_0*>(x);
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(blocks[b].qs[j]) * d;
  }
}

void dequantize_row_q8_1(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_1*>(x);
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(blocks[b].qs[j]) * d;
  }
}

// Q4_K / Q5_K: 12 bytes hold eight 6-bit scales and eight 6-bit mins.
// Sub-blocks 0..3: scale = scales[j] & 63, min = scales[j+4] & 63.
// Sub-blocks 4..7: the low 4 bits come from scales[j+4] (scale: low nibble, min: high
// nibble), the high 2 bits from the top bits of scales[j-4] (scale) / scales[j] (min).
void k_scale_min(const uint8_t scales[kKScaleSize], int j, int* sc, int* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4);
    *m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

void dequantize_row_q2_k(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ2_K*>(x);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ2_K& blk = blocks[b];
    const float d = fp16_to_fp32(blk.d);
    const float dmin = fp16_to_fp32(blk.dmin);
    // Sub-block s (16 elements): scale in the low nibble of scales[s], min in the high.
    for (int s = 0; s < kQKK / 16; ++s, y += 16) {
      int q[16];
      q2_k_sub_block(blk.qs, s, q);
      const float dl = d * static_cast<float>(blk.scales[s] & 0x0F);
      const float ml = dmin * static_cast<float>(blk.scales[s] >> 4);
      for (int l = 0; l < 16; ++l) y[l] = dl * static_cast<float>(q[l]) - ml;
    }
  }
}

void dequantize_row_q3_k(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ3_K*>(x);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ3_K& blk = blocks[b];
    const float d = fp16_to_fp32(blk.d);
    for (int s = 0; s < kQKK / 16; ++s, y += 16) {
      int q[16];
      q3_k_sub_block(blk.hmask, blk.qs, s, q);
      const float dl = d * static_cast<float>(q3_k_scale(blk.scales, s) - 32);
      for (int l = 0; l < 16; ++l) y[l] = dl * static_cast<float>(q[l]);
    }
  }
}

void dequantize_row_q4_k(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_K*>(x);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ4_K& blk = blocks[b];
    const float d = fp16_to_fp32(blk.d);
    const float dmin = fp16_to_fp32(blk.dmin);
    // Sub-block s (32 elements): nibble (s % 2) of qs[32 * (s / 2) + l].
    for (int s = 0; s < 8; ++s, y += 32) {
      int sc, m;
      k_scale_min(blk.scales, s, &sc, &m);
      const float dl = d * static_cast<float>(sc);
      const float ml = dmin * static_cast<float>(m);
      const uint8_t* q = blk.qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      for (int l = 0; l < 32; ++l) y[l] = dl * static_cast<float>((q[l] >> shift) & 0x0F) - ml;
    }
  }
}

void dequantize_row_q5_k(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_K*>(x);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ5_K& blk = blocks[b];
    const float d = fp16_to_fp32(blk.d);
    const float dmin = fp16_to_fp32(blk.dmin);
    // Sub-block s: low 4 bits as in Q4_K, 5th bit = bit s of qh[l].
    for (int s = 0; s < 8; ++s, y += 32) {
      int sc, m;
      k_scale_min(blk.scales, s, &sc, &m);
      const float dl = d * static_cast<float>(sc);
      const float ml = dmin * static_cast<float>(m);
      const uint8_t* q = blk.qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 0x0F) | (((blk.qh[l] >> s) & 1) << 4);
        y[l] = dl * static_cast<float>(v) - ml;
      }
    }
  }
}

void dequantize_row_q6_k(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ6_K*>(x);
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    const BlockQ6_K& blk = blocks[b];
    const float d = fp16_to_fp32(blk.d);
    // Element e = 128*h + r (h = half, r in [0,128)):
    //   low 4 bits:  nibble (r / 64) of ql[64*h + r % 64]
    //   high 2 bits: bits 2*(r / 32).. of qh[32*h + r % 32]
    //   scale:       scales[e / 16]
    for (int e = 0; e < kQKK; ++e) {
      const int h = e / 128, r = e % 128;
      const int lo = (blk.ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
      const int hi = (blk.qh[32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
      const int q = (lo | (hi << 4)) - 32;
      const float dl = d * static_cast<float>(blk.scales[e / 16]);
      y[e] = dl * static_cast<float>(q);
    }
  }
}

void dequantize_row_q8_k(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_K*>(x);
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    for (int j = 0; j < kQKK; ++j) y[j] = blocks[b].d * static_cast<float>(blocks[b].qs[j]);
  }
}

void dequantize_row_iq4_nl(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockIQ4_NL*>(x);
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>(kIQ4NLValues[blocks[b].qs[j] & 0x0F]);
      y[j + kQK / 2] = d * static_cast<float>(kIQ4NLValues[blocks[b].qs[j] >> 4]);
    }
  }
}

void dequantize_row_iq4_xs(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const BlockIQ4_XS*>(x);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockIQ4_XS& blk = blocks[b];
    const float d = fp16_to_fp32(blk.d);
    // Sub-block s (32 elements): an IQ4_NL-style nibble pair layout over qs[16s .. 16s+16).
    for (int s = 0; s < kQKK / 32; ++s, y += 32) {
      const float dl = d * static_cast<float>(iq4_xs_scale(blk.scales_h, blk.scales_l, s) - 32);
      const uint8_t* q = blk.qs + 16 * s;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(kIQ4NLValues[q[j] & 0x0F]);
        y[j + 16] = dl * static_cast<float>(kIQ4NLValues[q[j] >> 4]);
      }
    }
  }
}

}  // namespace specula::kernels::generic
