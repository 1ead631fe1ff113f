// model/gated_delta_net.h — the gated delta rule mixer (Yang, Kautz, Hatamizadeh 2024,
// "Gated Delta Networks: Improving Mamba2 with Delta Rule", arXiv:2412.06464) as used by
// Qwen3-Next / Qwen3.5's linear-attention layers, as a RecurrentRule (state/recurrent_layout.h).
//
// Per token the layer's projections give (computed by the architecture, batched):
//   qkv  [conv_dim = 2*n_k_heads*d_state + n_v_heads*d_state]  ([q | k | v], head-major)
//   g    [n_v_heads]  the log decay, softplus(alpha + dt_bias) * a  (a = -exp(A_log) < 0)
//   beta [n_v_heads]  sigmoid(b)
// and this rule computes, per row:
//   c = silu(causal depthwise conv1d of qkv over the last conv_kernel tokens, no bias)
//       (tap conv_kernel-1 multiplies the current token; the conv state holds the previous
//        conv_kernel-1 inputs, zeros at the start);
//   q, k = per k-head L2-normalised: x / sqrt(sum x^2 + eps);
//   per v-head h (reading q/k of k-head h % n_k_heads — llama.cpp's GGUF head order):
//     S = exp(g) * S;  d_j = (v_j - sum_i S[i][j] k_i) * beta;  S[i][j] += k_i d_j;
//     o_j = sum_i S[i][j] q_i / sqrt(d_state)
//   with S a [d_state (k), d_state (v)] matrix per head, zero at the start.
// Output: o [n_v_heads * d_state] per token (the architecture applies the gated RMSNorm
// and the output projection). Token-sequential and per-head independent, so a row's state
// and outputs never depend on how its tokens are split into calls or on other rows.
// Does not project, normalise the output or own state (the layout does).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "state/recurrent_layout.h"

namespace specula {

struct GatedDeltaNetShape {
  int64_t conv_kernel = 0;  // taps of the causal conv1d
  int64_t d_state = 0;      // head size of q, k and v
  int64_t n_k_heads = 0;    // q/k heads
  int64_t n_v_heads = 0;    // v heads (a multiple of n_k_heads)
  float eps = 1e-6f;        // of the q/k L2 normalisation
  int64_t conv_dim() const { return (2 * n_k_heads + n_v_heads) * d_state; }
  int64_t value_dim() const { return n_v_heads * d_state; }
};

class GatedDeltaNetRule final : public RecurrentRule {
 public:
  // conv_weight: [conv_dim][conv_kernel] f32 (GGUF ssm_conv1d, ne {conv_kernel, conv_dim}).
  GatedDeltaNetRule(GatedDeltaNetShape shape, std::vector<float> conv_weight, const kernels::KernelTable* kt);

  std::string name() const override { return "gated-delta-net"; }
  int64_t conv_floats() const override { return (s_.conv_kernel - 1) * s_.conv_dim(); }
  int64_t state_floats() const override { return s_.n_v_heads * s_.d_state * s_.d_state; }
  // Per token: qkv [conv_dim], g [n_v_heads], beta [n_v_heads].
  int64_t input_floats() const override { return s_.conv_dim() + 2 * s_.n_v_heads; }
  int64_t output_floats() const override { return s_.value_dim(); }
  int64_t n_units() const override { return s_.n_v_heads; }
  int64_t work_floats(int64_t T) const override { return T * input_floats(); }
  void prepare(const float* in, int64_t T, float* conv_state, float* work) const override;
  void run_unit(int64_t h, const float* work, int64_t T, float* state, float* out) const override;

 private:
  GatedDeltaNetShape s_;
  std::vector<float> conv_w_;  // [conv_dim][conv_kernel]
  const kernels::KernelTable* kt_;
};

}  // namespace specula
