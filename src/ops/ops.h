// ops/ops.h — tensor operations built on the kernel table, threaded over a pool.
//
// Shapes are listed outermost first; all activations are f32, row-major, contiguous.
// These ops own no memory: callers pass a Workspace whose buffers grow only when a
// larger shape is first seen (never per call in steady state). They do not know
// about models, caches or requests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"

namespace specula::ops {

// Reusable scratch memory for ops (quantized activations).
class Workspace {
 public:
  void* bytes(size_t n);  // at least n bytes, 64-byte aligned; valid until the next call

 private:
  std::unique_ptr<uint8_t, AlignedFree> buf_;
  size_t cap_ = 0;
};

// y [M, N] = x [M, K] · w [N, K]^T. w is any supported weight type (quantized rows);
// x rows are quantized to w's vec_dot_type first (kernels.h). Threads split N.
// Every y element is computed identically whatever M (batch invariance).
void matmul(ThreadPool& pool, const kernels::KernelTable& kt, const TensorView& w, const float* x,
            int64_t M, float* y, Workspace& ws);

// Several weights over the same x [M, K] (a layer's q, k and v; gate and up):
// outs[i].y [M, N_i] = x · outs[i].w^T, each bitwise what matmul() gives for that weight
// alone. When every weight quantizes x to the same vec_dot_type, x is quantized once and
// one pool job runs the row chunks of all the weights (the threads meet twice in all, not
// twice per weight, and a thread done with one weight goes on to the next); otherwise it
// is one matmul() per weight. Every w has K columns; y buffers must not overlap x.
struct MatmulOut {
  const TensorView* w;
  float* y;
};
void matmul_many(ThreadPool& pool, const kernels::KernelTable& kt, const float* x, int64_t M,
                 std::initializer_list<MatmulOut> outs, Workspace& ws);

// Row lookup: out [n, K] = dequantized rows ids[i] of table [N, K] (embedding), times scale.
void get_rows(const kernels::KernelTable& kt, const TensorView& table, const int32_t* ids, int64_t n,
              float scale, float* out);

// RMSNorm (Zhang & Sennrich 2019): y = x / sqrt(mean(x^2) + eps) * w, over rows of
// length H. x, y: [M, H] (may alias); w: [H]. Sum of squares in double.
void rms_norm(const float* x, const float* w, int64_t M, int64_t H, float eps, float* y);

// Rotary embedding, NEOX layout (Su et al. 2021, RoFormer; GPT-NeoX pairs element i
// with i + head_dim/2). rope_table fills cos/sin [M, head_dim/2] for positions [M]
// with theta_i = pos * base^(-2i/head_dim) computed in double; rope_neox applies it
// in place to x [M, n_heads, head_dim].
// freq_scale < 1 is linear position interpolation (positions multiplied by it).
// freq_factors (optional, [head_dim/2]): theta_i is divided by freq_factors[i] (Llama 3.1's
// rope scaling, stored by llama.cpp as rope_freqs.weight).
void rope_table(const int32_t* positions, int64_t M, int64_t head_dim, float base, float freq_scale,
                float* cos_out, float* sin_out, const float* freq_factors = nullptr);
void rope_neox(float* x, int64_t M, int64_t n_heads, int64_t head_dim, const float* cos_t,
               const float* sin_t);
// Partial rotary (e.g. Qwen3.5's 25%): only the first n_rot dims of each head rotate, NEOX
// pairs (i, i + n_rot/2); cos/sin are [M, n_rot/2] (rope_table with head_dim = n_rot).
void rope_neox_partial(float* x, int64_t M, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_t,
                       const float* sin_t);

// Rotary embedding, NORM layout (the original RoFormer / Llama pairing): element 2i with
// 2i + 1 for i < n_rot/2, the rest of each head unrotated; cos/sin as for rope_neox
// ([M, n_rot/2] from rope_table with head_dim = n_rot). x [M, n_heads, head_dim] in place.
void rope_norm(float* x, int64_t M, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_t,
               const float* sin_t);

// SwiGLU gate: out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + e^-x) in f32 (llama.cpp's
// CPU swiglu; Shazeer 2020). out may alias gate.
void silu_mul(int64_t n, const float* gate, const float* up, float* out);

// (Activation and softmax helpers live in the kernel table: kernels.h.)

}  // namespace specula::ops
