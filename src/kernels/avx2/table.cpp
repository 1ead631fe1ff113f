// kernels/avx2/table.cpp — the AVX2/FMA/F16C kernel table: wires the AVX2
// quantizers, dequantizers, gemms and dense helpers (avx2.h) for every type the
// generic table supports, with the same vec_dot_type per weight type. Does not
// detect CPU features (dispatch.cpp does; it only calls this on a capable CPU).
#include "kernels/avx2/avx2.h"
#include "kernels/kernels.h"

namespace specula::kernels::generic {
// Declared here rather than by including generic.h: its templates must not be instantiated
// in a translation unit compiled with AVX2 flags.
void quantize_row_q4_0(const float* x, void* y, int64_t n);
void dequantize_row_q8_a(const void* x, float* y, int64_t n);  // (scalar; only load-time paths use it)
}  // namespace specula::kernels::generic

namespace specula::kernels::avx2 {
float dot_f16_f32(int64_t n, const uint16_t* a, const float* b);
void axpy_f16_f32(int64_t n, float alpha, const uint16_t* x, float* y);
void dot_f16_f32_multi(int64_t n, const uint16_t* a, int64_t nq, const float* const* b, float* s);
void axpy_f16_f32_multi(int64_t n, const float* alpha, const uint16_t* x, int64_t nq, float* const* y);
void dot_f32_multi(int64_t n, const float* a, int64_t nq, const float* const* b, float* s);
void axpy_f32_multi(int64_t n, const float* alpha, const float* x, int64_t nq, float* const* y);
void pv_f32_rows(int64_t n, const float* v, int64_t v_stride, int64_t nq, const float* const* p, const int64_t* k0,
                 const int64_t* k1, float* const* y);
void scale_round_f16(int64_t n, float alpha, float* x);
void qk_rows16(int64_t n, const float* k, int64_t nk, int64_t nq, const float* const* q, float* const* s);
void gelu_tanh_mul(int64_t n, const float* gate, const float* up, float* out);
float exp_sub_sum(int64_t n, float max, float* x);
}  // namespace specula::kernels::avx2

namespace specula::kernels::avx2 {
const KernelTable* table_if_built() {
  static const KernelTable t = [] {
    KernelTable k;
    k.isa = "avx2";
    k.set_weight(DType::F32, dequantize_row_f32, DType::F32, gemm_f32);
    k.set_weight(DType::F16, dequantize_row_f16, DType::F32, gemm_f16);
    k.set_weight(DType::BF16, dequantize_row_bf16, DType::F32, gemm_bf16);
    k.set_weight(DType::Q4_0, dequantize_row_q4_0, DType::Q8_0, gemm_q4_0);
    k.set_weight(DType::Q4_1, dequantize_row_q4_1, DType::Q8_1, gemm_q4_1);
    k.set_weight(DType::Q8_A, generic::dequantize_row_q8_a, DType::Q8_1, gemm_q8_a);
    k.set_weight(DType::Q5_0, dequantize_row_q5_0, DType::Q8_0, gemm_q5_0);
    k.set_weight(DType::Q5_1, dequantize_row_q5_1, DType::Q8_1, gemm_q5_1);
    k.set_weight(DType::Q8_0, dequantize_row_q8_0, DType::Q8_0, gemm_q8_0);
    k.set_weight(DType::Q2_K, dequantize_row_q2_k, DType::Q8_K, gemm_q2_k);
    k.set_weight(DType::Q3_K, dequantize_row_q3_k, DType::Q8_K, gemm_q3_k);
    k.set_weight(DType::Q4_K, dequantize_row_q4_k, DType::Q8_K, gemm_q4_k);
    k.set_weight(DType::Q5_K, dequantize_row_q5_k, DType::Q8_K, gemm_q5_k);
    k.set_weight(DType::Q6_K, dequantize_row_q6_k, DType::Q8_K, gemm_q6_k);
    k.set_weight(DType::IQ4_NL, dequantize_row_iq4_nl, DType::Q8_0, gemm_iq4_nl);
    k.set_weight(DType::IQ4_XS, dequantize_row_iq4_xs, DType::Q8_K, gemm_iq4_xs);
    k.set_activation(DType::F32, dequantize_row_f32, quantize_row_f32);
    k.set_activation(DType::Q8_0, dequantize_row_q8_0, quantize_row_q8_0);
    k.set_activation(DType::Q8_1, dequantize_row_q8_1, quantize_row_q8_1);
    k.set_activation(DType::Q8_K, dequantize_row_q8_k, quantize_row_q8_k);
    k.types[static_cast<uint32_t>(DType::Q4_0)].quantize_row = generic::quantize_row_q4_0;  // KV cache
    k.dot_f32 = dot_f32;
    k.axpy_f32 = axpy_f32;
    k.scale_f32 = scale_f32;
    k.dot_f16_f32 = dot_f16_f32;
    k.axpy_f16_f32 = axpy_f16_f32;
    k.dot_f16_f32_multi = dot_f16_f32_multi;
    k.axpy_f16_f32_multi = axpy_f16_f32_multi;
    k.dot_f32_multi = dot_f32_multi;
    k.axpy_f32_multi = axpy_f32_multi;
    k.pv_f32_rows = pv_f32_rows;
    k.qk_rows16 = qk_rows16;
    k.scale_round_f16 = scale_round_f16;
    k.gelu_tanh_mul = gelu_tanh_mul;
    k.exp_sub_sum = exp_sub_sum;
    return k;
  }();
  return &t;
}

}  // namespace specula::kernels::avx2
