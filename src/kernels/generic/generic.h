// kernels/generic/generic.h — declarations shared by the generic (reference) kernel
// files: per-type row dequantizers, activation quantizers and row dot products.
//
// Everything here is plain scalar C++ that follows the GGML block formats
// (core/quant_blocks.h; ggml `ggml-common.h`, gguf-py `gguf/quants.py`) and
// llama.cpp's reference dot products (integer sums inside a block, one float
// multiply-add per block). It is the oracle the fast ISA kernels are tested against,
// so it favours clarity over speed. Does not pick tables or threads (table.cpp,
// dispatch.cpp do), and never allocates.
#pragma once

#include <cstddef>
#include <cstdint>

namespace specula::kernels::generic {

// ---- dequantize: x [n] of the type -> y [n] f32 (dequant.cpp). n % block == 0.
void dequantize_row_f32(const void* x, float* y, int64_t n);
void dequantize_row_f16(const void* x, float* y, int64_t n);
void dequantize_row_bf16(const void* x, float* y, int64_t n);
void dequantize_row_q4_0(const void* x, float* y, int64_t n);
void dequantize_row_q4_1(const void* x, float* y, int64_t n);
void dequantize_row_q8_a(const void* x, float* y, int64_t n);
void dequantize_row_q5_0(const void* x, float* y, int64_t n);
void dequantize_row_q5_1(const void* x, float* y, int64_t n);
void dequantize_row_q8_0(const void* x, float* y, int64_t n);
void dequantize_row_q8_1(const void* x, float* y, int64_t n);
void dequantize_row_q2_k(const void* x, float* y, int64_t n);
void dequantize_row_q3_k(const void* x, float* y, int64_t n);
void dequantize_row_q4_k(const void* x, float* y, int64_t n);
void dequantize_row_q5_k(const void* x, float* y, int64_t n);
void dequantize_row_q6_k(const void* x, float* y, int64_t n);
void dequantize_row_q8_k(const void* x, float* y, int64_t n);
void dequantize_row_iq4_nl(const void* x, float* y, int64_t n);
void dequantize_row_iq4_xs(const void* x, float* y, int64_t n);

// ---- quantize activations: x [n] f32 -> y [n] of the type (quantize.cpp).
void quantize_row_f32(const float* x, void* y, int64_t n);   // copy
void quantize_row_q8_0(const float* x, void* y, int64_t n);  // d = amax/127, roundf
void quantize_row_q4_0(const float* x, void* y, int64_t n);  // ggml's q4_0 reference (KV cache)
void quantize_row_q8_1(const float* x, void* y, int64_t n);  // as Q8_0, plus s = d*sum(q)
void quantize_row_q8_k(const float* x, void* y, int64_t n);  // iscale = -127/x[argmax|x|]
// Weight quantizer (load-time --quantize q4_k; quantize.cpp): per 32-element sub-block a
// least-squares fit x ~ a*q - b (q in 0..15, b >= 0) over a small search of scale candidates,
// then the 6-bit sub-block scales / mins relative to the super-block d / dmin (f16).
void quantize_row_q4_k(const float* x, void* y, int64_t n);
// Weight quantizer for rows that are not whole Q4_K blocks (llama.cpp's fallback for Q4_K):
// d = max / -16 for the value of largest magnitude, q = clamp(round(x / d), -16, 15) + 16.
void quantize_row_q5_0(const float* x, void* y, int64_t n);

// ---- dot of one weight row (K elements) with one activation row of the weight
// type's vec_dot_type (dot.cpp).
float vec_dot_f32_f32(int64_t K, const void* w, const void* x);
float vec_dot_f16_f32(int64_t K, const void* w, const void* x);
float vec_dot_bf16_f32(int64_t K, const void* w, const void* x);
float vec_dot_q4_0_q8_0(int64_t K, const void* w, const void* x);
float vec_dot_q4_1_q8_1(int64_t K, const void* w, const void* x);
float vec_dot_q8_a_q8_1(int64_t K, const void* w, const void* x);
float vec_dot_q5_0_q8_0(int64_t K, const void* w, const void* x);
float vec_dot_q5_1_q8_1(int64_t K, const void* w, const void* x);
float vec_dot_q8_0_q8_0(int64_t K, const void* w, const void* x);
float vec_dot_q2_k_q8_k(int64_t K, const void* w, const void* x);
float vec_dot_q3_k_q8_k(int64_t K, const void* w, const void* x);
float vec_dot_q4_k_q8_k(int64_t K, const void* w, const void* x);
float vec_dot_q5_k_q8_k(int64_t K, const void* w, const void* x);
float vec_dot_q6_k_q8_k(int64_t K, const void* w, const void* x);
float vec_dot_iq4_nl_q8_0(int64_t K, const void* w, const void* x);
float vec_dot_iq4_xs_q8_k(int64_t K, const void* w, const void* x);

// gemm signature of TypeKernels::gemm, one instantiation per dot (dot.cpp).
using VecDotFn = float (*)(int64_t K, const void* w, const void* x);
template <VecDotFn kDot>
void gemm(int64_t K, const void* w, size_t w_stride, int64_t n_rows, const void* xq,
          size_t xq_stride, int64_t m, float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(xq);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < n_rows; ++r) {
      y[i * ldy + r] = kDot(K, wb + static_cast<size_t>(r) * w_stride,
                            xb + static_cast<size_t>(i) * xq_stride);
    }
  }
}

// Q4_K/Q5_K packed 6-bit scale and min of sub-block j in [0,8) (dequant.cpp).
void k_scale_min(const uint8_t scales[12], int j, int* sc, int* m);
// Quant fields of the Q2_K / Q3_K / IQ4_XS layouts, shared by dequant.cpp and dot.cpp so
// both read the same bits (inline: the dots call them per sub-block).
// Q2_K / Q3_K sub-block s in [0,16) (elements 16s..16s+15) lies in the 32-element chunk
// t = s / 2 = 4h + j: its 2-bit fields are bits 2j..2j+1 of qs[32h + 16(s % 2) + l], and
// Q3_K adds 4 where bit t of hmask[16(s % 2) + l] is set (q = field - 4 where it is not).
inline void q2_k_sub_block(const uint8_t* qs, int s, int q[16]) {
  const int t = s / 2;
  const uint8_t* p = qs + 32 * (t / 4) + 16 * (s % 2);
  for (int l = 0; l < 16; ++l) q[l] = (p[l] >> (2 * (t % 4))) & 3;
}
inline void q3_k_sub_block(const uint8_t* hmask, const uint8_t* qs, int s, int q[16]) {
  q2_k_sub_block(qs, s, q);
  const uint8_t* hm = hmask + 16 * (s % 2);
  for (int l = 0; l < 16; ++l) q[l] -= ((hm[l] >> (s / 2)) & 1) ? 0 : 4;
}
// Q3_K's sixteen 6-bit scales (0..63, not yet minus 32): the low 4 bits of scale s are
// nibble s / 8 of scales[s % 8], the high 2 bits are bits 2(s / 4).. of scales[8 + s % 4].
inline int q3_k_scale(const uint8_t scales[12], int s) {
  const int lo = (scales[s % 8] >> (4 * (s / 8))) & 0x0F;
  const int hi = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  return lo | (hi << 4);
}
// IQ4_XS's eight 6-bit scales (0..63, not yet minus 32): the low 4 bits of scale s are
// nibble s % 2 of scales_l[s / 2], the high 2 bits are bits 2s..2s+1 of scales_h.
inline int iq4_xs_scale(uint16_t scales_h, const uint8_t* scales_l, int s) {
  const int lo = (scales_l[s / 2] >> (4 * (s % 2))) & 0x0F;
  const int hi = (scales_h >> (2 * s)) & 3;
  return lo | (hi << 4);
}

// ---- dense f32 helpers (dense.cpp).
float dot_f32(int64_t n, const float* a, const float* b);
void axpy_f32(int64_t n, float alpha, const float* x, float* y);
void scale_f32(int64_t n, float alpha, float* y);

}  // namespace specula::kernels::generic
