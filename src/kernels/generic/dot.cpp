// kernels/generic/dot.cpp — reference dot products of one weight row with one
// quantized activation row, used by the generic gemm (generic.h).
//
// As in llama.cpp's reference `ggml_vec_dot_*` functions, each block's products are
// summed exactly in int32, then folded into a float accumulator with the block's
// scales, blocks in order:
//   Q4_0/Q5_0/Q8_0 · Q8_0:  sum_b (d_w * d_x) * sum_j qw_j * qx_j           (qw centred)
//   Q4_1/Q5_1/Q8_A · Q8_1:  sum_b (d_w * d_x) * sum_j qw_j * qx_j + m_w * s_x
//   Q4_K/Q5_K · Q8_K:       sum_b (d_w * d_x) * sum_s sc_s * sum_l qw*qx
//                                 - (dmin_w * d_x) * sum_s m_s * (sum of qx in s, bsums)
//   Q6_K · Q8_K:            sum_b (d_w * d_x) * sum_s sc_s * sum_l (qw - 32) * qx
//   Q2_K · Q8_K:            as Q4_K over 16 sub-blocks of 16 (sc_s = low nibble, m_s =
//                           high nibble of scales[s]; bsums[s] pairs with sub-block s)
//   Q3_K · Q8_K:            sum_b (d_w * d_x) * sum_s (sc_s - 32) * sum_l qw * qx, qw in [-4,3]
//   IQ4_NL · Q8_0:          sum_b (d_w * d_x) * sum_j v[qw_j] * qx_j    (v: the IQ4 codebook)
//   IQ4_XS · Q8_K:          sum_b (d_w * d_x) * sum_s (ls_s - 32) * sum_l v[qw] * qx
//   F32/F16/BF16 · F32:     sum_j w_j * x_j accumulated in double, rounded once.
// The order of operations depends only on K, never on the row's position in a batch.
// Does not tile, vectorize or thread.
#include "core/fp16.h"
#include "kernels/generic/generic.h"
#include "core/quant_blocks.h"

namespace specula::kernels::generic {

float vec_dot_f32_f32(int64_t K, const void* w, const void* x) {
  const auto* a = static_cast<const float*>(w);
  const auto* b = static_cast<const float*>(x);
  double sum = 0.0;
  for (int64_t k = 0; k < K; ++k) sum += static_cast<double>(a[k]) * static_cast<double>(b[k]);
  return static_cast<float>(sum);
}

float vec_dot_f16_f32(int64_t K, const void* w, const void* x) {
  const auto* a = static_cast<const uint16_t*>(w);
  const auto* b = static_cast<const float*>(x);
  double sum = 0.0;
  for (int64_t k = 0; k < K; ++k) {
    sum += static_cast<double>(fp16_to_fp32(a[k])) * static_cast<double>(b[k]);
  }
  return static_cast<float>(sum);
}

float vec_dot_bf16_f32(int64_t K, const void* w, const void* x) {
  const auto* a = static_cast<const uint16_t*>(w);
  const auto* b = static_cast<const float*>(x);
  double sum = 0.0;
  for (int64_t k = 0; k < K; ++k) {
    sum += static_cast<double>(bf16_to_fp32(a[k])) * static_cast<double>(b[k]);
  }
  return static_cast<float>(sum);
}

namespace {
inline uint32_t load_qh(const uint8_t qh[4]) {
  return static_cast<uint32_t>(qh[0]) | (static_cast<uint32_t>(qh[1]) << 8) |
         (static_cast<uint32_t>(qh[2]) << 16) | (static_cast<uint32_t>(qh[3]) << 24);
}
}  // namespace

float vec_dot_q4_0_q8_0(int64_t K, const void* w, const void* x) {
  const auto* wb = static_cast<const BlockQ4_0*>(w);
  const auto* xb = static_cast<const BlockQ8_0*>(x);
  float sum = 0.0f;
  for (int64_t b = 0; b < K / kQK; ++b) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (wb[b].qs[j] & 0x0F) - 8;
      const int hi = (wb[b].qs[j] >> 4) - 8;
      sumi += lo * xb[b].qs[j] + hi * xb[b].qs[j + kQK / 2];
    }
    sum += (fp16_to_fp32(wb[b].d) * fp16_to_fp32(xb[b].d)) * static_cast<float>(sumi);
  }
  return sum;
}

float vec_dot_q4_1_q8_1(int64_t K, const void* w, const void* x) {
  const auto* wb = static_cast<const BlockQ4_1*>(w);
  const auto* xb = static_cast<const BlockQ8_1*>(x);
  float sum = 0.0f;
  for (int64_t b = 0; b < K / kQK; ++b) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += (wb[b].qs[j] & 0x0F) * xb[b].qs[j] + (wb[b].qs[j] >> 4) * xb[b].qs[j + kQK / 2];
    }
    sum += (fp16_to_fp32(wb[b].d) * fp16_to_fp32(xb[b].d)) * static_cast<float>(sumi) +
           fp16_to_fp32(wb[b].m) * fp16_to_fp32(xb[b].s);
  }
  return sum;
}

float vec_dot_q8_a_q8_1(int64_t K, const void* w, const void* x) {
  const auto* wb = static_cast<const BlockQ8_A*>(w);
  const auto* xb = static_cast<const BlockQ8_1*>(x);
  float sum = 0.0f;
  for (int64_t b = 0; b < K / kQK; ++b) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += wb[b].qs[j] * xb[b].qs[j];
    sum += (wb[b].d * fp16_to_fp32(xb[b].d)) * static_cast<float>(sumi) + wb[b].m * fp16_to_fp32(xb[b].s);
  }
  return sum;
}

float vec_dot_q5_0_q8_0(int64_t K, const void* w, const void* x) {
  const auto* wb = static_cast<const BlockQ5_0*>(w);
  const auto* xb = static_cast<const BlockQ8_0*>(x);
  float sum = 0.0f;
  for (int64_t b = 0; b < K / kQK; ++b) {
    const uint32_t qh = load_qh(wb[b].qh);
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = static_cast<int>((wb[b].qs[j] & 0x0Fu) | (((qh >> j) & 1u) << 4)) - 16;
      const int hi = static_cast<int>((wb[b].qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16;
      sumi += lo * xb[b].qs[j] + hi * xb[b].qs[j + kQK / 2];
    }
    sum += (fp16_to_fp32(wb[b].d) * fp16_to_fp32(xb[b].d)) * static_cast<float>(sumi);
  }
  return sum;
}

float vec_dot_q5_1_q8_1(int64_t K, const void* w, const void* x) {
  const auto* wb = static_cast<const BlockQ5_1*>(w);
  const auto* xb = static_cast<const BlockQ8_1*>(x);
  float sum = 0.0f;
  for (int64_t b = 0; b < K / kQK; ++b) {
    const uint32_t qh = load_qh(wb[b].qh);
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = static_cast<int>((wb[b].qs[j] & 0x0Fu) | (((qh >> j) & 1u) << 4));
      const int hi = static_cast<int>((wb[b].qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
      sumi += lo * xb[b].qs[j] + hi * xb[b].qs[j + kQK / 2];
    }
    sum += (fp16_to_fp32(wb[b].d) * fp16_to_fp32(xb[b].d)) * static_cast<float>(sumi) +
           fp16_to_fp32(wb[b].m) * fp16_to_fp32(xb[b].s);
  }
  return sum;
}

float vec_dot_q8_0_q8_0(int64_t K, const void* w, const void* x) {
  const auto* wb = static_cast<const BlockQ8_0*>(w);
  const auto* xb = static_cast<const BlockQ8_0*>(x);
  float sum = 0.0f;
  for (int64_t b = 0; b < K / kQK; ++b) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += wb[b].qs[j] * xb[b].qs[j];
    sum += (fp16_to_fp32(wb[b].d) * fp16_to_fp32(xb[b].d)) * static_cast<float>(sumi);
  }
  return sum;
}

float vec_dot_q2_k_q8_k(int64_t K, const void* w, const void* x) {
  const auto* wb = static_cast<const BlockQ2_K*>(w);
  const auto* xb = static_cast<const BlockQ8_K*>(x);
  float sum = 0.0f;
  for (int64_t b = 0; b < K / kQKK; ++b) {
    const BlockQ2_K& wq = wb[b];
    const BlockQ8_K& xq = xb[b];
    int sumi = 0;  // sum_s sc_s * sum_l q * qx
    int summ = 0;  // sum_s m_s * sum_l qx
    for (int s = 0; s < kQKK / 16; ++s) {
      int q[16];
      q2_k_sub_block(wq.qs, s, q);
      int dot = 0;
      for (int l = 0; l < 16; ++l) dot += q[l] * xq.qs[16 * s + l];
      sumi += (wq.scales[s] & 0x0F) * dot;
      summ += (wq.scales[s] >> 4) * xq.bsums[s];
    }
    const float d = fp16_to_fp32(wq.d) * xq.d;
    const float dmin = fp16_to_fp32(wq.dmin) * xq.d;
    sum += d * static_cast<float>(sumi) - dmin * static_cast<float>(summ);
  }
  return sum;
}

float vec_dot_q3_k_q8_k(int64_t K, const void* w, const void* x) {
  const auto* wb = static_cast<const BlockQ3_K*>(w);
  const auto* xb = static_cast<const BlockQ8_K*>(x);
  float sum = 0.0f;
  for (int64_t b = 0; b < K / kQKK; ++b) {
    const BlockQ3_K& wq = wb[b];
    const BlockQ8_K& xq = xb[b];
    int sumi = 0;
    for (int s = 0; s < kQKK / 16; ++s) {
      int q[16];
      q3_k_sub_block(wq.hmask, wq.qs, s, q);
      int dot = 0;
      for (int l = 0; l < 16; ++l) dot += q[l] * xq.qs[16 * s + l];
      sumi += (q3_k_scale(wq.scales, s) - 32) * dot;
    }
    sum += (fp16_to_fp32(wq.d) * xq.d) * static_cast<float>(sumi);
  }
  return sum;
}

float vec_dot_q4_k_q8_k(int64_t K, const void* w, const void* x) {
  const auto* wb = static_cast<const BlockQ4_K*>(w);
  const auto* xb = static_cast<const BlockQ8_K*>(x);
  float sum = 0.0f;
  for (int64_t b = 0; b < K / kQKK; ++b) {
    const BlockQ4_K& wq = wb[b];
    const BlockQ8_K& xq = xb[b];
    int sumi = 0;  // sum_s sc_s * sum_l q * qx
    int summ = 0;  // sum_s m_s * sum_l qx
    for (int s = 0; s < 8; ++s) {
      int sc, m;
      k_scale_min(wq.scales, s, &sc, &m);
      const uint8_t* q = wq.qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      int dot = 0;
      for (int l = 0; l < 32; ++l) dot += ((q[l] >> shift) & 0x0F) * xq.qs[32 * s + l];
      sumi += sc * dot;
      summ += m * (xq.bsums[2 * s] + xq.bsums[2 * s + 1]);
    }
    const float d = fp16_to_fp32(wq.d) * xq.d;
    const float dmin = fp16_to_fp32(wq.dmin) * xq.d;
    sum += d * static_cast<float>(sumi) - dmin * static_cast<float>(summ);
  }
  return sum;
}

float vec_dot_q5_k_q8_k(int64_t K, const void* w, const void* x) {
  const auto* wb = static_cast<const BlockQ5_K*>(w);
  const auto* xb = static_cast<const BlockQ8_K*>(x);
  float sum = 0.0f;
  for (int64_t b = 0; b < K / kQKK; ++b) {
    const BlockQ5_K& wq = wb[b];
    const BlockQ8_K& xq = xb[b];
    int sumi = 0;
    int summ = 0;
    for (int s = 0; s < 8; ++s) {
      int sc, m;
      k_scale_min(wq.scales, s, &sc, &m);
      const uint8_t* q = wq.qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      int dot = 0;
      for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 0x0F) | (((wq.qh[l] >> s) & 1) << 4);
        dot += v * xq.qs[32 * s + l];
      }
      sumi += sc * dot;
      summ += m * (xq.bsums[2 * s] + xq.bsums[2 * s + 1]);
    }
    const float d = fp16_to_fp32(wq.d) * xq.d;
    const float dmin = fp16_to_fp32(wq.dmin) * xq.d;
    sum += d * static_cast<float>(sumi) - dmin * static_cast<float>(summ);
  }
  return sum;
}

float vec_dot_q6_k_q8_k(int64_t K, const void* w, const void* x) {
  const auto* wb = static_cast<const BlockQ6_K*>(w);
  const auto* xb = static_cast<const BlockQ8_K*>(x);
  float sum = 0.0f;
  for (int64_t b = 0; b < K / kQKK; ++b) {
    const BlockQ6_K& wq = wb[b];
    const BlockQ8_K& xq = xb[b];
    int sumi = 0;
    for (int s = 0; s < kQKK / 16; ++s) {  // 16 sub-blocks of 16, scale wq.scales[s]
      int dot = 0;
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * s + l;
        const int h = e / 128, r = e % 128;
        const int lo = (wq.ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
        const int hi = (wq.qh[32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
        dot += ((lo | (hi << 4)) - 32) * xq.qs[e];
      }
      sumi += wq.scales[s] * dot;
    }
    sum += (fp16_to_fp32(wq.d) * xq.d) * static_cast<float>(sumi);
  }
  return sum;
}

float vec_dot_iq4_nl_q8_0(int64_t K, const void* w, const void* x) {
  const auto* wb = static_cast<const BlockIQ4_NL*>(w);
  const auto* xb = static_cast<const BlockQ8_0*>(x);
  float sum = 0.0f;
  for (int64_t b = 0; b < K / kQK; ++b) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += kIQ4NLValues[wb[b].qs[j] & 0x0F] * xb[b].qs[j] + kIQ4NLValues[wb[b].qs[j] >> 4] * xb[b].qs[j + kQK / 2];
    }
    sum += (fp16_to_fp32(wb[b].d) * fp16_to_fp32(xb[b].d)) * static_cast<float>(sumi);
  }
  return sum;
}

float vec_dot_iq4_xs_q8_k(int64_t K, const void* w, const void* x) {
  const auto* wb = static_cast<const BlockIQ4_XS*>(w);
  const auto* xb = static_cast<const BlockQ8_K*>(x);
  float sum = 0.0f;
  for (int64_t b = 0; b < K / kQKK; ++b) {
    const BlockIQ4_XS& wq = wb[b];
    const BlockQ8_K& xq = xb[b];
    int sumi = 0;
    for (int s = 0; s < kQKK / 32; ++s) {
      const uint8_t* q = wq.qs + 16 * s;
      const int8_t* qx = xq.qs + 32 * s;
      int dot = 0;
      for (int j = 0; j < 16; ++j) dot += kIQ4NLValues[q[j] & 0x0F] * qx[j] + kIQ4NLValues[q[j] >> 4] * qx[j + 16];
      sumi += (iq4_xs_scale(wq.scales_h, wq.scales_l, s) - 32) * dot;
    }
    sum += (fp16_to_fp32(wq.d) * xq.d) * static_cast<float>(sumi);
  }
  return sum;
}

}  // namespace specula::kernels::generic
