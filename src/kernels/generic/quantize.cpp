// kernels/generic/quantize.cpp — reference quantizers for activation rows:
// F32 (copy), Q8_0, Q8_1 and Q8_K.
//
// Follows ggml's reference quantizers (`quantize_row_q8_0_ref`, `_q8_1_ref`,
// `_q8_K_ref` in ggml-quants.c; Q8_0 is also gguf-py's `Q8_0.quantize_blocks`, which
// is bit-exact with it):
//   Q8_0: d = max|x| / 127, q = roundf(x / d) (ties away from zero), d stored as fp16.
//   Q8_1: as Q8_0, plus s = fp16(d * sum(q)) with d the unrounded float scale.
//   Q8_K: take the element with the largest |x| (first one on ties), iscale =
//         -127 / that element, q = min(127, nearest(iscale * x)) with ties to even
//         (ggml's `nearest_int`), d = 1 / iscale as float; bsums[g] = sum of the 16
//         q of group g.
//   Q4_0: take the element with the largest |x| (first one on ties), d = that / -8,
//         q = min(15, (int8)(x / d + 8.5)) (truncation), d stored as fp16 — ggml's
//         `quantize_row_q4_0_ref`; used for the q4_0 KV cache, not for weights.
// Does not quantize weights (specula only loads pre-quantized weights).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "kernels/generic/generic.h"
#include "kernels/quant_blocks.h"

namespace specula::kernels::generic {

void quantize_row_f32(const float* x, void* y, int64_t n) {
  std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
}

namespace {
float abs_max(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  return amax;
}
}  // namespace

void quantize_row_q8_0(const float* x, void* y, int64_t n) {
  auto* blocks = static_cast<BlockQ8_0*>(y);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const float d = abs_max(x, kQK) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) blocks[b].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
  }
}

void quantize_row_q4_0(const float* x, void* y, int64_t n) {
  auto* blocks = static_cast<BlockQ4_0*>(y);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + kQK / 2] * id + 8.5f)));
      blocks[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quantize_row_q8_1(const float* x, void* y, int64_t n) {
  auto* blocks = static_cast<BlockQ8_1*>(y);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const float d = abs_max(x, kQK) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      const int q = static_cast<int>(std::roundf(x[j] * id));
      blocks[b].qs[j] = static_cast<int8_t>(q);
      sum += q;
    }
    blocks[b].d = fp32_to_fp16(d);
    blocks[b].s = fp32_to_fp16(static_cast<float>(sum) * d);
  }
}

void quantize_row_q8_k(const float* x, void* y, int64_t n) {
  auto* blocks = static_cast<BlockQ8_K*>(y);
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    BlockQ8_K& blk = blocks[b];
    float amax = 0.0f, max = 0.0f;  // max: the signed element with the largest |x|
    for (int j = 0; j < kQKK; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&blk, 0, sizeof(blk));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQKK; ++j) {
      const int q = static_cast<int>(std::nearbyint(iscale * x[j]));  // ties to even
      blk.qs[j] = static_cast<int8_t>(q < 127 ? q : 127);
    }
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += blk.qs[16 * g + l];
      blk.bsums[g] = static_cast<int16_t>(sum);
    }
    blk.d = 1.0f / iscale;
  }
}

}  // namespace specula::kernels::generic
