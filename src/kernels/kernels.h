// kernels/kernels.h — the kernel table: every hot loop specula runs on the CPU.
//
// Declared once here, implemented per ISA in its own translation unit and namespace
// (kernels/generic/*.cpp: specula::kernels::generic, the readable reference;
// kernels/avx2/*.cpp: specula::kernels::avx2, compiled with -mavx2 -mfma -mf16c;
// kernels/avx512/*.cpp: specula::kernels::avx512, -mavx512f/bw/vl/dq/vnni;
// kernels/avxvnni/*.cpp: specula::kernels::avxvnni, -mavx2 -mavxvnni).
// `active()` picks one table at first use from cpuid + OS support (XSAVE/YMM/ZMM
// state); `SPECULA_ISA=generic|avx2|avxvnni|avx512` forces a tier. Kernels never allocate.
//
// Weight matrices are row-major `[N, K]` rows of `w_type` (K a multiple of the
// block size). Activations `x [M, K]` f32 are first quantized row by row to the
// weight type's `vec_dot_type` (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K
// for K-quants, F32 for F32/F16/BF16), as llama.cpp does.
//
// Batch invariance: every output element y[i, r] is computed by the same sequence
// of floating-point operations whatever M, the tile it falls in, or the thread
// count — so a row's result never depends on the other rows of the batch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace specula::kernels {

constexpr int kNumDTypeSlots = 41;  // indexed by static_cast<uint32_t>(DType)

struct TypeKernels {
  bool supported = false;
  // x [n] of this type -> y [n] f32. n is a multiple of the block size.
  void (*dequantize_row)(const void* x, float* y, int64_t n) = nullptr;
  // Activation type used for dot products with weights of this type.
  DType vec_dot_type = DType::F32;
  // For activation types only (F32, Q8_0, Q8_1, Q8_K): x [n] f32 -> y [n] this type.
  void (*quantize_row)(const float* x, void* y, int64_t n) = nullptr;
  // y[i * ldy + r] = dot(w row r, xq row i) for r in [0, n_rows), i in [0, m).
  //  w:  n_rows rows of this type, w_stride bytes apart, K elements each
  //  xq: m rows of vec_dot_type, xq_stride bytes apart, K elements each
  void (*gemm)(int64_t K, const void* w, size_t w_stride, int64_t n_rows, const void* xq,
               size_t xq_stride, int64_t m, float* y, int64_t ldy) = nullptr;

  // Repacked weights (optional; a tier sets all four or none). The packed form of an
  // [N, K] matrix interleaves `pack_rows` weight rows so that one vector register holds
  // the same few columns of every row of the group (a layout of this table's own, made
  // once at load from the GGUF rows; the file stays the source of truth).
  //  packed_bytes(N, K): size of the packed form (groups of pack_rows rows; the last
  //    group zero-padded), 64-byte aligned pieces.
  //  pack(w, w_stride, N, K, g0, g1, out): writes groups [g0, g1) of the packed form of
  //    the N rows at w into out (the whole packed buffer); groups are independent, so
  //    threads may pack disjoint ranges.
  //  gemm_packed(K, packed, r0, n_rows, xq, xq_stride, m, y, ldy): as gemm for weight
  //    rows [r0, r0 + n_rows) of the packed matrix (r0 a multiple of pack_rows);
  //    y[i * ldy + r] for r in [0, n_rows) (y points at row r0's output).
  //  Preconditions (not checked: callers guarantee them, there are no error returns):
  //  `out` / `packed` 64-byte aligned with packed_bytes(N, K) bytes; K a multiple of
  //  the type's block size (the GGUF loader rejects other shapes).
  int pack_rows = 0;
  size_t (*packed_bytes)(int64_t N, int64_t K) = nullptr;
  void (*pack)(const void* w, size_t w_stride, int64_t N, int64_t K, int64_t g0, int64_t g1, void* out) = nullptr;
  void (*gemm_packed)(int64_t K, const void* packed, int64_t r0, int64_t n_rows, const void* xq, size_t xq_stride,
                      int64_t m, float* y, int64_t ldy) = nullptr;
};

struct KernelTable {
  const char* isa = "generic";
  // Whether the packed decode gemms prefetch in software (packed_gemm.h; SPECULA_DECODE_PREFETCH).
  bool decode_prefetch = false;
  TypeKernels types[kNumDTypeSlots];
  // Dense f32 helpers for attention and norms.
  float (*dot_f32)(int64_t n, const float* a, const float* b) = nullptr;     // sum a*b
  void (*axpy_f32)(int64_t n, float alpha, const float* x, float* y) = nullptr;  // y += alpha*x
  void (*scale_f32)(int64_t n, float alpha, float* y) = nullptr;                 // y *= alpha
  // Attention over an IEEE-half KV cache: sum a[i]*b[i] with a half, b f32 (f32 accumulate),
  // and y += alpha * x with x half.
  float (*dot_f16_f32)(int64_t n, const uint16_t* a, const float* b) = nullptr;
  void (*axpy_f16_f32)(int64_t n, float alpha, const uint16_t* x, float* y) = nullptr;
  // The same for nq queries sharing one half row a / x (grouped-query heads, several
  // tokens of a row): s[i] = dot_f16_f32(n, a, b[i]) and y[i] += alpha[i] * x, each
  // bitwise equal to the single-query call (the half row is converted once).
  void (*dot_f16_f32_multi)(int64_t n, const uint16_t* a, int64_t nq, const float* const* b, float* s) = nullptr;
  void (*axpy_f16_f32_multi)(int64_t n, const float* alpha, const uint16_t* x, int64_t nq, float* const* y) = nullptr;
  // The same over an f32 row a / x (a KV row already decoded to f32 by its layout): each
  // query runs exactly the FMA sequence of the half kernels above on the converted values,
  // so decoding a half row to f32 and calling these is bitwise the half kernels' result.
  void (*dot_f32_multi)(int64_t n, const float* a, int64_t nq, const float* const* b, float* s) = nullptr;
  void (*axpy_f32_multi)(int64_t n, const float* alpha, const float* x, int64_t nq, float* const* y) = nullptr;
  // Attention P·V over a block of f32 value rows v[k] (n floats each, v_stride floats
  // apart), each query q with its own key range: for k = k0[q] .. k1[q]-1 in order,
  // y[q][i] takes the contribution p[q][k - k0[q]] * v[k][i] by exactly the operation
  // axpy_f32_multi applies, so a block gives bitwise the per-key calls' result (the
  // accumulators stay in registers across the block instead of memory).
  void (*pv_f32_rows)(int64_t n, const float* v, int64_t v_stride, int64_t nq, const float* const* p,
                      const int64_t* k0, const int64_t* k1, float* const* y) = nullptr;
  // Attention Q·K over a block of nk <= 16 f32 key rows (n floats each, contiguous):
  // s[q][j] for j < nk is bitwise dot_f32_multi(n, k + j * n, 1, &q[q], ...) — the
  // block form only lets a tier keep the keys in lanes (avx512 transposes them) instead
  // of reducing each dot horizontally.
  void (*qk_rows16)(int64_t n, const float* k, int64_t nk, int64_t nq, const float* const* q, float* const* s) = nullptr;
  // Gated GELU, tanh form (Hendrycks & Gimpel 2016):
  // out[i] = 0.5*g*(1 + tanh(sqrt(2/pi)*(g + 0.044715*g^3))) * up[i], g = gate[i]; out may alias gate.
  // Each out[i] depends only on gate[i] and up[i] (not on n or i): callers may split a range.
  void (*gelu_tanh_mul)(int64_t n, const float* gate, const float* up, float* out) = nullptr;
  // x[i] = half(x[i] * alpha) as f32: the product rounded to IEEE half (nearest, ties to
  // even), as attention rounds its probabilities before weighting V.
  void (*scale_round_f16)(int64_t n, float alpha, float* x) = nullptr;
  // exp(x[i] - max) in place, returns the sum (softmax numerator).
  float (*exp_sub_sum)(int64_t n, float max, float* x) = nullptr;

  const TypeKernels& of(DType t) const { return types[static_cast<uint32_t>(t)]; }

  // Table construction (kernels/*/table.cpp): a weight type and its activation type,
  // or an activation type with its quantizer.
  void set_weight(DType t, void (*dequantize)(const void*, float*, int64_t), DType dot_type,
                  decltype(TypeKernels::gemm) gemm_fn) {
    TypeKernels& tk = types[static_cast<uint32_t>(t)];
    tk.supported = true;
    tk.dequantize_row = dequantize;
    tk.vec_dot_type = dot_type;
    tk.gemm = gemm_fn;
  }
  void set_activation(DType t, void (*dequantize)(const void*, float*, int64_t),
                      void (*quantize)(const float*, void*, int64_t)) {
    TypeKernels& tk = types[static_cast<uint32_t>(t)];
    tk.supported = true;
    tk.dequantize_row = dequantize;
    tk.quantize_row = quantize;
  }
};

// The reference table (always available).
const KernelTable& generic_table();
// The AVX2+FMA+F16C table, or nullptr if this CPU/OS cannot run it or it was not built:
// row kernels for every type, plus packed-weight gemms (Q4_K, Q5_K, Q6_K, Q4_0, Q4_1, F16,
// BF16) with vpdpbusd emulated exactly by vpmaddubsw + vpmaddwd (bitwise the VNNI tiers').
const KernelTable* avx2_table();
// The AVX-512 table (F, BW, VL, DQ and VNNI, with the OS saving ZMM state), or nullptr:
// the AVX2 table plus packed-weight gemms (Q4_K, Q5_K, Q6_K, Q4_0, Q4_1, Q5_0, Q8_0, F16, BF16) with
// vpdpbusd and ZMM forms of the blocked attention kernels.
const KernelTable* avx512_table();
// The AVX-VNNI table (AVX2 machines with VEX vpdpbusd, e.g. without AVX-512), or nullptr:
// the AVX2 table plus the same packed gemms on YMM pairs — bitwise equal to avx512's.
const KernelTable* avxvnni_table();
// The table in use: chosen once, the best this CPU runs (SPECULA_ISA=generic|avx2|avxvnni|
// avx512 overrides detection; an unavailable ISA named there falls back to the best available
// with a warning on stderr).
const KernelTable& active();
// The CPU features detection saw, for `specula info` / `bench` (e.g. "avx2 fma f16c
// avx512f avx512bw avx512vl avx512vnni avx_vnni amx").
const char* cpu_features();

// Bytes of one quantized activation row of K elements for weights of type w.
size_t activation_row_bytes(DType w, int64_t K);

}  // namespace specula::kernels
