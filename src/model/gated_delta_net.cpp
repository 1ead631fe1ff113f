// model/gated_delta_net.cpp — see gated_delta_net.h.
#include "model/gated_delta_net.h"

#include <cmath>
#include <cstring>

#include "specula/status.h"

namespace specula {

namespace {
constexpr int64_t kMaxState = 1024;  // d_state bound (stack scratch)
}

GatedDeltaNetRule::GatedDeltaNetRule(GatedDeltaNetShape shape, std::vector<float> conv_weight,
                                     const kernels::KernelTable* kt)
    : s_(shape), conv_w_(std::move(conv_weight)), kt_(kt) {
  SPECULA_CHECK(s_.conv_kernel >= 1 && s_.d_state >= 1 && s_.d_state <= kMaxState && s_.n_k_heads >= 1 &&
                s_.n_v_heads % s_.n_k_heads == 0);
  SPECULA_CHECK(static_cast<int64_t>(conv_w_.size()) == s_.conv_dim() * s_.conv_kernel);
}

void GatedDeltaNetRule::prepare(const float* in, int64_t T, float* conv_state, float* work) const {
  const int64_t C = s_.conv_dim(), K = s_.conv_kernel, nin = input_floats();
  const int64_t dk = s_.d_state, key_dim = s_.n_k_heads * dk;
  const float eps_n = s_.eps / static_cast<float>(dk);
  const float inv_sqrt_n = 1.0f / std::sqrt(static_cast<float>(dk));
  for (int64_t t = 0; t < T; ++t) {
    const float* x = in + t * nin;
    float* w = work + t * nin;
    // Causal depthwise conv: taps 0..K-2 read the state (oldest first), tap K-1 the token.
    for (int64_t c = 0; c < C; ++c) {
      const float* wc = conv_w_.data() + c * K;
      float acc = 0.0f;
      for (int64_t i = 0; i + 1 < K; ++i) acc += conv_state[i * C + c] * wc[i];
      acc += x[c] * wc[K - 1];
      w[c] = acc / (1.0f + std::exp(-acc));  // silu
    }
    if (K > 1) {
      std::memmove(conv_state, conv_state + C, static_cast<size_t>((K - 2) * C) * sizeof(float));
      std::memcpy(conv_state + (K - 2) * C, x, static_cast<size_t>(C) * sizeof(float));
    }
    std::memcpy(w + C, x + C, static_cast<size_t>(2 * s_.n_v_heads) * sizeof(float));  // g, beta
    // L2 norm of each q and k head, as llama.cpp computes it: rms_norm(x, eps/n) / sqrt(n).
    for (int64_t hh = 0; hh < 2 * s_.n_k_heads; ++hh) {
      float* v = w + (hh < s_.n_k_heads ? hh * dk : key_dim + (hh - s_.n_k_heads) * dk);
      double sum = 0.0;
      for (int64_t i = 0; i < dk; ++i) sum += static_cast<double>(v[i] * v[i]);
      const float mean = static_cast<float>(sum / static_cast<double>(dk));
      const float sc = 1.0f / std::sqrt(mean + eps_n);
      for (int64_t i = 0; i < dk; ++i) v[i] = (v[i] * sc) * inv_sqrt_n;
    }
  }
}

void GatedDeltaNetRule::run_unit(int64_t h, const float* work, int64_t T, float* state, float* out) const {
  const int64_t C = s_.conv_dim(), nin = input_floats(), nout = output_floats();
  const int64_t d = s_.d_state, key_dim = s_.n_k_heads * d;
  const int64_t kh = h % s_.n_k_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const kernels::KernelTable& kt = *kt_;
  float* S = state + h * d * d;  // row j (a value index) holds S[.][j] over the key index
  float delta[kMaxState];
  for (int64_t t = 0; t < T; ++t) {
    const float* w = work + t * nin;
    const float* q = w + kh * d;
    const float* k = w + key_dim + kh * d;
    const float* v = w + 2 * key_dim + h * d;
    const float g = w[C + h], beta = w[C + s_.n_v_heads + h];
    kt.scale_f32(d * d, std::exp(g), S);
    for (int64_t j = 0; j < d; ++j) delta[j] = (v[j] - kt.dot_f32(d, S + j * d, k)) * beta;
    for (int64_t j = 0; j < d; ++j) kt.axpy_f32(d, delta[j], k, S + j * d);
    if (out != nullptr) {
      float* o = out + t * nout + h * d;
      for (int64_t j = 0; j < d; ++j) o[j] = kt.dot_f32(d, S + j * d, q) * scale;
    }
  }
}

}  // namespace specula
