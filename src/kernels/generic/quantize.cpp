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
#include "core/quant_blocks.h"

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

// --- Q4_K weights -----------------------------------------------------------------------------
namespace {

// Scale candidates (15 + 0.1 * step) / (max - lo) for step in [kQ4KSteps0, kQ4KSteps1].
constexpr int kQ4KSteps0 = -10, kQ4KSteps1 = 10;

// Best (a, b) for x ~ a*q - b over one sub-block of 32, q = clamp(round((x + b) / a), 0, 15),
// b >= 0, a >= 0: candidates of the scale around (max - lo) / 15, each refined by the
// least-squares (a, b) of its assignment; the lowest squared error wins.
void fit_sub_block(const float* x, float* a_out, float* b_out) {
  float lo = 0.0f, hi = x[0];
  for (int i = 0; i < 32; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  if (hi <= lo) {
    *a_out = 0.0f;
    *b_out = -lo;
    return;
  }
  float sx = 0, sx2 = 0;
  for (int i = 0; i < 32; ++i) sx += x[i], sx2 += x[i] * x[i];
  float best_err = INFINITY, best_a = (hi - lo) / 15.0f, best_b = -lo;
  for (int step = kQ4KSteps0; step <= kQ4KSteps1; ++step) {
    const float iscale = (15.0f + 0.1f * static_cast<float>(step)) / (hi - lo);
    float sq = 0, sq2 = 0, sqx = 0;
    for (int i = 0; i < 32; ++i) {
      const float q = static_cast<float>(std::min(15, static_cast<int>(iscale * (x[i] - lo) + 0.5f)));
      sq += q;
      sq2 += q * q;
      sqx += q * x[i];
    }
    // minimize sum (a q + c - x)^2 (c = -b): the normal equations
    const double det = 32.0 * sq2 - static_cast<double>(sq) * sq;
    double a, c;
    if (det > 0) {
      a = (32.0 * sqx - static_cast<double>(sq) * sx) / det;
      c = (static_cast<double>(sq2) * sx - static_cast<double>(sq) * sqx) / det;
    } else {
      a = sq2 > 0 ? sqx / sq2 : 0;
      c = 0;
    }
    if (c > 0) {  // the min must be <= 0: refit the scale alone
      c = 0;
      a = sq2 > 0 ? sqx / sq2 : 0;
    }
    if (a < 0) continue;
    // sum (a q + c - x)^2 expanded (the q of this candidate, before rounding to the fit)
    const double err = a * a * sq2 + 2 * a * c * sq - 2 * a * sqx + 32.0 * c * c - 2 * c * sx + sx2;
    if (err < best_err) {
      best_err = static_cast<float>(err);
      best_a = static_cast<float>(a);
      best_b = static_cast<float>(-c);
    }
  }
  *a_out = best_a;
  *b_out = best_b;
}

}  // namespace

void quantize_row_q4_k(const float* x, void* y, int64_t n) {
  auto* blocks = static_cast<BlockQ4_K*>(y);
  for (int64_t bi = 0; bi < n / kQKK; ++bi, x += kQKK) {
    BlockQ4_K& blk = blocks[bi];
    float a[8], b[8], max_a = 0.0f, max_b = 0.0f;
    for (int s = 0; s < 8; ++s) {
      fit_sub_block(x + 32 * s, &a[s], &b[s]);
      max_a = std::max(max_a, a[s]);
      max_b = std::max(max_b, b[s]);
    }
    blk.d = fp32_to_fp16(max_a / 63.0f);
    blk.dmin = fp32_to_fp16(max_b / 63.0f);
    const float d = fp16_to_fp32(blk.d), dmin = fp16_to_fp32(blk.dmin);
    uint8_t sc[8], mn[8];
    for (int s = 0; s < 8; ++s) {
      sc[s] = static_cast<uint8_t>(d > 0 ? std::clamp(static_cast<int>(std::lround(a[s] / d)), 0, 63) : 0);
      mn[s] = static_cast<uint8_t>(dmin > 0 ? std::clamp(static_cast<int>(std::lround(b[s] / dmin)), 0, 63) : 0);
    }
    // 12 bytes: j < 4: scales[j] / scales[j + 4] low 6 bits = sc / m; j >= 4: scales[j + 4]
    // = sc low 4 | m low 4 << 4, their high 2 bits in bits 6-7 of scales[j - 4] / scales[j]
    // (the layout k_scale_min reads).
    std::memset(blk.scales, 0, sizeof(blk.scales));
    for (int j = 0; j < 4; ++j) {
      blk.scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
      blk.scales[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
      blk.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0F) | ((mn[j + 4] & 0x0F) << 4));
    }
    std::memset(blk.qs, 0, sizeof(blk.qs));
    for (int s = 0; s < 8; ++s) {
      const float dl = d * static_cast<float>(sc[s]), ml = dmin * static_cast<float>(mn[s]);
      const float idl = dl > 0 ? 1.0f / dl : 0.0f;
      for (int l = 0; l < 32; ++l) {
        const int q = std::clamp(static_cast<int>(std::lround((x[32 * s + l] + ml) * idl)), 0, 15);
        blk.qs[32 * (s / 2) + l] |= static_cast<uint8_t>(q << (4 * (s % 2)));
      }
    }
  }
}

void quantize_row_q5_0(const float* x, void* y, int64_t n) {
  auto* blocks = static_cast<BlockQ5_0*>(y);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    // The value of largest magnitude maps to -16 (the end of the range with room for it):
    // d = max / -16, q = clamp(round(x / d), -16, 15) + 16.
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK; ++j)
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]), max = x[j];
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = fp32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = std::clamp(static_cast<int>(std::lround(x[j] * id)), -16, 15) + 16;
      const int hi = std::clamp(static_cast<int>(std::lround(x[j + kQK / 2] * id)), -16, 15) + 16;
      blocks[b].qs[j] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
      qh |= static_cast<uint32_t>(lo >> 4) << j;
      qh |= static_cast<uint32_t>(hi >> 4) << (j + kQK / 2);
    }
    std::memcpy(blocks[b].qh, &qh, sizeof(qh));
  }
}

}  // namespace specula::kernels::generic
