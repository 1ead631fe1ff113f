// kernels/generic/table.cpp — the reference kernel table: wires the generic
// dequantizers, activation quantizers, dot-product gemms and dense helpers
// (generic.h) into a KernelTable. Weight types: F32, F16, BF16, Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS. Activation types (quantize_row set): F32, Q8_0,
// Q8_1, Q8_K. Does not choose between ISAs (dispatch.cpp does).
#include "kernels/generic/generic.h"
#include "kernels/kernels.h"

namespace specula::kernels::generic {
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
}  // namespace specula::kernels::generic

namespace specula::kernels {
const KernelTable& generic_table() {
  static const KernelTable t = [] {
    namespace g = generic;
    KernelTable k;
    k.isa = "generic";
    k.set_weight(DType::F32, g::dequantize_row_f32, DType::F32, g::gemm<g::vec_dot_f32_f32>);
    k.set_weight(DType::F16, g::dequantize_row_f16, DType::F32, g::gemm<g::vec_dot_f16_f32>);
    k.set_weight(DType::BF16, g::dequantize_row_bf16, DType::F32, g::gemm<g::vec_dot_bf16_f32>);
    k.set_weight(DType::Q4_0, g::dequantize_row_q4_0, DType::Q8_0, g::gemm<g::vec_dot_q4_0_q8_0>);
    k.set_weight(DType::Q4_1, g::dequantize_row_q4_1, DType::Q8_1, g::gemm<g::vec_dot_q4_1_q8_1>);
    k.set_weight(DType::Q8_A, g::dequantize_row_q8_a, DType::Q8_1, g::gemm<g::vec_dot_q8_a_q8_1>);
    k.set_weight(DType::Q5_0, g::dequantize_row_q5_0, DType::Q8_0, g::gemm<g::vec_dot_q5_0_q8_0>);
    k.set_weight(DType::Q5_1, g::dequantize_row_q5_1, DType::Q8_1, g::gemm<g::vec_dot_q5_1_q8_1>);
    k.set_weight(DType::Q8_0, g::dequantize_row_q8_0, DType::Q8_0, g::gemm<g::vec_dot_q8_0_q8_0>);
    k.set_weight(DType::Q2_K, g::dequantize_row_q2_k, DType::Q8_K, g::gemm<g::vec_dot_q2_k_q8_k>);
    k.set_weight(DType::Q3_K, g::dequantize_row_q3_k, DType::Q8_K, g::gemm<g::vec_dot_q3_k_q8_k>);
    k.set_weight(DType::Q4_K, g::dequantize_row_q4_k, DType::Q8_K, g::gemm<g::vec_dot_q4_k_q8_k>);
    k.set_weight(DType::Q5_K, g::dequantize_row_q5_k, DType::Q8_K, g::gemm<g::vec_dot_q5_k_q8_k>);
    k.set_weight(DType::Q6_K, g::dequantize_row_q6_k, DType::Q8_K, g::gemm<g::vec_dot_q6_k_q8_k>);
    k.set_weight(DType::IQ4_NL, g::dequantize_row_iq4_nl, DType::Q8_0, g::gemm<g::vec_dot_iq4_nl_q8_0>);
    k.set_weight(DType::IQ4_XS, g::dequantize_row_iq4_xs, DType::Q8_K, g::gemm<g::vec_dot_iq4_xs_q8_k>);
    // Activation types. F32 and Q8_0 are also weight types (set above).
    k.set_activation(DType::F32, g::dequantize_row_f32, g::quantize_row_f32);
    k.set_activation(DType::Q8_0, g::dequantize_row_q8_0, g::quantize_row_q8_0);
    k.set_activation(DType::Q8_1, g::dequantize_row_q8_1, g::quantize_row_q8_1);
    k.set_activation(DType::Q8_K, g::dequantize_row_q8_k, g::quantize_row_q8_k);
    k.types[static_cast<uint32_t>(DType::Q4_0)].quantize_row = g::quantize_row_q4_0;  // KV cache
    k.dot_f32 = g::dot_f32;
    k.axpy_f32 = g::axpy_f32;
    k.scale_f32 = g::scale_f32;
    k.dot_f16_f32 = g::dot_f16_f32;
    k.axpy_f16_f32 = g::axpy_f16_f32;
    k.dot_f16_f32_multi = g::dot_f16_f32_multi;
    k.axpy_f16_f32_multi = g::axpy_f16_f32_multi;
    k.dot_f32_multi = g::dot_f32_multi;
    k.axpy_f32_multi = g::axpy_f32_multi;
    k.pv_f32_rows = g::pv_f32_rows;
    k.qk_rows16 = g::qk_rows16;
    k.scale_round_f16 = g::scale_round_f16;
    k.gelu_tanh_mul = g::gelu_tanh_mul;
    k.exp_sub_sum = g::exp_sub_sum;
    return k;
  }();
  return t;
}

}  // namespace specula::kernels
