// model/arch/qwen2.cpp — Qwen2 / Qwen2.5 (text) from GGUF: hyperparameters, weights, forward.
//
// Architecture (Yang et al. 2024, "Qwen2 Technical Report"; llama.cpp's GGUF tensor
// naming and its LLM_ARCH_QWEN2 graph): token embedding (no scaling); each block is a
// pre-norm transformer: RMSNorm, Q/K/V projections with f32 biases, NEOX RoPE over the
// whole head (base qwen2.rope.freq_base), grouped-query attention scaled by
// 1/sqrt(head_dim) over the full KV cache, output projection without bias, residual;
// RMSNorm, SwiGLU FFN down(silu(gate(x)) * up(x)) (Shazeer 2020), residual. Final
// RMSNorm and an output projection (output.weight, or the token embedding when absent —
// tied; an optional output.bias is added).
// Does not support fused attn_qkv tensors, sliding-window layers (Qwen2's
// use_sliding_window is off in released models) or YaRN / dynamic rope scaling (linear
// scaling only); those files are rejected with an error naming the feature.
#include <algorithm>
#include <memory>
#include <cmath>
#include <string>
#include <vector>

#include "model/attention.h"
#include "model/model.h"
#include "ops/ops.h"

namespace specula {
namespace {

struct Qwen2Params {
  int64_t n_vocab = 0, n_embd = 0, n_layers = 0, n_ff = 0;
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t n_ctx_train = 0;
  float eps = 1e-6f, rope_base = 1e6f;
  float rope_freq_scale = 1.0f;  // linear position interpolation
};

struct Qwen2Layer {
  std::vector<float> attn_norm, ffn_norm;  // [n_embd]
  std::vector<float> bq;                   // [n_heads * head_dim]
  std::vector<float> bk, bv;               // [n_kv_heads * head_dim]
  // wq [n_heads*head_dim, n_embd], wk/wv [n_kv_heads*head_dim, n_embd],
  // wo [n_embd, n_heads*head_dim], w_gate/w_up [n_ff, n_embd], w_down [n_embd, n_ff]
  TensorView wq, wk, wv, wo, w_gate, w_up, w_down;
  // The constant parts of K and V for quantized caches (AttentionSpec): V's bias, and K's
  // bias rotated by RoPE averaged over the first 4096 positions (the slow pairs keep it,
  // the fast ones average it away). [n_kv_heads * head_dim]
  std::shared_ptr<const std::vector<float>> k_offset, v_offset;
};

class Qwen2 final : public Model {
 public:
  static Result<std::unique_ptr<Model>> create(ModelContext ctx);

  const ModelInfo& info() const override { return info_; }
  const gguf::GgufFile& file() const override { return *ctx_.file; }
  std::shared_ptr<ThreadPool> pool() const override { return ctx_.pool; }
  std::vector<LayerSpec> layer_specs() const override {
    std::vector<LayerSpec> specs(static_cast<size_t>(p_.n_layers));
    for (size_t il = 0; il < specs.size(); ++il) {
      specs[il].attention = attention_spec(p_.n_kv_heads, p_.head_dim, 0);
      specs[il].attention.key_offset = layers_[il].k_offset;
      specs[il].attention.value_offset = layers_[il].v_offset;
    }
    return specs;
  }
  Status forward(const Batch& batch, StateRows& state, Tensor& hidden) override;
  void project_logits(const float* hidden, int64_t n, float* logits) override;

 private:
  void ensure_buffers(int64_t M);
  void parallel_rows(int64_t M, const std::function<void(int64_t, int64_t)>& fn) {
    if (M < 4) {
      fn(0, M);
      return;
    }
    ctx_.pool->run([&](int ith, int nth) {
      auto [a, b] = ThreadPool::split(M, ith, nth);
      if (a < b) fn(a, b);
    });
  }

  ModelContext ctx_;
  ModelInfo info_;
  Qwen2Params p_;
  const kernels::KernelTable* kt_ = nullptr;
  TensorView tok_embd_, output_;    // [n_vocab, n_embd]
  std::vector<float> output_norm_;  // [n_embd]
  std::vector<float> output_bias_;  // [n_vocab] or empty
  std::vector<Qwen2Layer> layers_;
  ops::Workspace ws_;
  // Step buffers, grown to the largest M seen: x/xn/o [M, n_embd], q/attn [M, n_heads*head_dim],
  // k/v [M, n_kv_heads*head_dim], gate/up [M, n_ff], cos/sin [M, head_dim/2].
  int64_t cap_m_ = 0;
  std::vector<float> x_, xn_, q_, k_, v_, attn_, o_, gate_, up_, cos_, sin_;
  BatchLayout layout_;
  AttentionScratch attn_scratch_;
};

Result<std::unique_ptr<Model>> Qwen2::create(ModelContext ctx) {
  auto m = std::make_unique<Qwen2>();
  const gguf::GgufFile& f = *ctx.file;
  const kernels::KernelTable& kt = *ctx.kernels;
  Qwen2Params& p = m->p_;
  const std::string a = "qwen2.";
  auto hp = read_transformer_hparams(f, "qwen2", "[qwen2]");
  if (!hp) return hp.status();
  p.n_embd = hp->n_embd, p.n_layers = hp->n_layers, p.n_ff = hp->n_ff, p.n_heads = hp->n_heads;
  p.n_kv_heads = hp->n_kv_heads, p.n_ctx_train = hp->n_ctx_train;
  SPECULA_RETURN_IF_ERROR(check_block_tensors(f, p.n_layers, a + "block_count", "[qwen2]"));
  auto eps = hparam_float(f, a + "attention.layer_norm_rms_epsilon", 0.0, 0.5, "[qwen2]");
  if (!eps) return eps.status();
  p.eps = static_cast<float>(*eps);
  auto fb = hparam_float(f, a + "rope.freq_base", 1.0, 1e12, "[qwen2]", p.rope_base);
  if (!fb) return fb.status();
  p.rope_base = static_cast<float>(*fb);
  if (auto st = f.get_string(a + "rope.scaling.type"); st && *st != "none") {
    if (*st != "linear") return Status::error("[qwen2] unsupported rope.scaling.type '" + *st + "' (supported: none, linear)");
    auto fac = hparam_float(f, a + "rope.scaling.factor", 0.0, 1e6, "[qwen2]");
    if (!fac) return fac.status();
    p.rope_freq_scale = static_cast<float>(1.0 / *fac);
  }
  if (p.n_heads % p.n_kv_heads != 0 || p.n_embd % p.n_heads != 0)
    return Status::error("[qwen2] inconsistent hyperparameters: n_embd " + std::to_string(p.n_embd) + ", heads " +
                         std::to_string(p.n_heads) + ", kv heads " + std::to_string(p.n_kv_heads) +
                         " (heads must divide n_embd, kv heads must divide heads)");
  p.head_dim = p.n_embd / p.n_heads;
  for (const char* key : {"attention.key_length", "attention.value_length"}) {
    auto kl = hparam_int(f, a + key, 2, 4096, "[qwen2]", p.head_dim);
    if (!kl) return kl.status();
    if (*kl != p.head_dim)
      return Status::error("[qwen2] " + std::string(key) + " " + std::to_string(*kl) + " != n_embd / head_count " +
                           std::to_string(p.head_dim) + " is not supported");
  }
  if (p.head_dim % 2 != 0 || p.head_dim > 4096)
    return Status::error("[qwen2] head_dim " + std::to_string(p.head_dim) + " must be even and at most 4096");
  if (f.find_tensor("blk.0.attn_qkv.weight") != nullptr)
    return Status::error("[qwen2] fused tensor 'blk.0.attn_qkv.weight' is not supported (expected attn_q/attn_k/attn_v)");

  const gguf::TensorInfo* te = f.find_tensor("token_embd.weight");
  if (te == nullptr || te->shape.size() != 2) return Status::error("[qwen2] missing tensor 'token_embd.weight'");
  p.n_vocab = te->shape[1];
  if (p.n_vocab <= 0 || p.n_vocab > (int64_t{1} << 31) - 1)
    return Status::error("[qwen2] token_embd.weight: vocabulary size " + std::to_string(p.n_vocab) + " is not usable");
  auto tok = weight_2d(f, kt, "token_embd.weight", p.n_embd, p.n_vocab);
  if (!tok) return tok.status();
  m->tok_embd_ = *tok;
  auto out = output_weight(f, kt, p.n_embd, p.n_vocab, m->tok_embd_);
  if (!out) return out.status();
  m->output_ = *out;
  if (f.find_tensor("output.bias") != nullptr) {
    auto ob = weight_1d_f32(f, kt, "output.bias", p.n_vocab);
    if (!ob) return ob.status();
    m->output_bias_ = std::move(ob).value();
  }
  auto on = weight_1d_f32(f, kt, "output_norm.weight", p.n_embd);
  if (!on) return on.status();
  m->output_norm_ = std::move(on).value();

  const int64_t E = p.n_embd, QD = p.n_heads * p.head_dim, KD = p.n_kv_heads * p.head_dim;
  m->layers_.reserve(static_cast<size_t>(p.n_layers));
  for (int64_t il = 0; il < p.n_layers; ++il) {
    Qwen2Layer L;
    const std::string b = "blk." + std::to_string(il) + ".";
    SPECULA_RETURN_IF_ERROR(load_weights(
        f, kt,
        {{&L.attn_norm, b + "attn_norm.weight", E}, {&L.ffn_norm, b + "ffn_norm.weight", E},
         {&L.bq, b + "attn_q.bias", QD}, {&L.bk, b + "attn_k.bias", KD}, {&L.bv, b + "attn_v.bias", KD}},
        {{&L.wq, b + "attn_q.weight", E, QD}, {&L.wk, b + "attn_k.weight", E, KD}, {&L.wv, b + "attn_v.weight", E, KD},
         {&L.wo, b + "attn_output.weight", QD, E}, {&L.w_gate, b + "ffn_gate.weight", E, p.n_ff},
         {&L.w_up, b + "ffn_up.weight", E, p.n_ff}, {&L.w_down, b + "ffn_down.weight", p.n_ff, E}}));
    L.v_offset = std::make_shared<const std::vector<float>>(L.bv);
    auto ko = std::make_shared<std::vector<float>>(L.bk);
    const int64_t half = p.head_dim / 2;
    constexpr int kSpan = 4096;
    for (int64_t i = 0; i < half; ++i) {
      const double theta = std::pow(static_cast<double>(p.rope_base), -2.0 * i / p.head_dim) * p.rope_freq_scale;
      double c = 0, sn = 0;
      for (int pos = 0; pos < kSpan; ++pos) {
        c += std::cos(pos * theta);
        sn += std::sin(pos * theta);
      }
      c /= kSpan;
      sn /= kSpan;
      for (int64_t g = 0; g < p.n_kv_heads; ++g) {
        const float b1 = L.bk[g * p.head_dim + i], b2 = L.bk[g * p.head_dim + i + half];
        (*ko)[g * p.head_dim + i] = static_cast<float>(c * b1 - sn * b2);
        (*ko)[g * p.head_dim + i + half] = static_cast<float>(sn * b1 + c * b2);
      }
    }
    L.k_offset = std::move(ko);
    m->layers_.push_back(std::move(L));
  }
  m->info_.architecture = "qwen2";
  if (auto nm = f.get_string("general.name")) m->info_.name = *nm;
  m->info_.n_vocab = p.n_vocab;
  m->info_.n_embd = p.n_embd;
  m->info_.n_layers = p.n_layers;
  m->info_.n_ctx_train = p.n_ctx_train;
  m->kt_ = ctx.kernels;
  pack_model_weights(ctx, m->info_, m->output_, m->layers_, {&Qwen2Layer::wq, &Qwen2Layer::wk, &Qwen2Layer::wv, &Qwen2Layer::wo, &Qwen2Layer::w_gate, &Qwen2Layer::w_up, &Qwen2Layer::w_down});
  m->ctx_ = std::move(ctx);
  return std::unique_ptr<Model>(std::move(m));
}

void Qwen2::ensure_buffers(int64_t M) {
  if (M <= cap_m_) return;
  const int64_t E = p_.n_embd, QD = p_.n_heads * p_.head_dim, KD = p_.n_kv_heads * p_.head_dim;
  const auto sz = [M](int64_t w) { return static_cast<size_t>(M * w); };
  x_.assign(sz(E), 0); xn_.assign(sz(E), 0); o_.assign(sz(E), 0);
  q_.assign(sz(QD), 0); attn_.assign(sz(QD), 0);
  k_.assign(sz(KD), 0); v_.assign(sz(KD), 0);
  gate_.assign(sz(p_.n_ff), 0); up_.assign(sz(p_.n_ff), 0);
  cos_.assign(sz(p_.head_dim / 2), 0); sin_.assign(sz(p_.head_dim / 2), 0);
  cap_m_ = M;
}

Status Qwen2::forward(const Batch& batch, StateRows& state, Tensor& hidden) {
  if (state.n_layers() != p_.n_layers)
    return Status::error("[qwen2] state has " + std::to_string(state.n_layers()) + " layers, the model " + std::to_string(p_.n_layers));
  SPECULA_RETURN_IF_ERROR(plan_batch(batch, state, p_.n_vocab, "[qwen2]", layout_));
  const int64_t M = layout_.M;
  ensure_buffers(M);
  ThreadPool& pool = *ctx_.pool;
  const kernels::KernelTable& kt = *kt_;
  const int64_t E = p_.n_embd, hd = p_.head_dim, nh = p_.n_heads, nkv = p_.n_kv_heads;
  const int64_t QD = nh * hd, KD = nkv * hd, F = p_.n_ff;
  const int32_t* pos = layout_.pos.data();

  ops::get_rows(kt, tok_embd_, batch.ids, M, 1.0f, x_.data());
  ops::rope_table(pos, M, hd, p_.rope_base, p_.rope_freq_scale, cos_.data(), sin_.data());
  const float attn_scale = 1.0f / std::sqrt(static_cast<float>(hd));

  for (int64_t il = 0; il < p_.n_layers; ++il) {
    const Qwen2Layer& L = layers_[il];
    parallel_rows(M, [&](int64_t a, int64_t b) {
      ops::rms_norm(x_.data() + a * E, L.attn_norm.data(), b - a, E, p_.eps, xn_.data() + a * E);
    });
    ops::matmul(pool, kt, L.wq, xn_.data(), M, q_.data(), ws_);
    ops::matmul(pool, kt, L.wk, xn_.data(), M, k_.data(), ws_);
    ops::matmul(pool, kt, L.wv, xn_.data(), M, v_.data(), ws_);
    parallel_rows(M, [&](int64_t a, int64_t b) {
      for (int64_t m = a; m < b; ++m) {
        float* q = q_.data() + m * QD;
        float* k = k_.data() + m * KD;
        float* v = v_.data() + m * KD;
        for (int64_t i = 0; i < QD; ++i) q[i] += L.bq[i];
        for (int64_t i = 0; i < KD; ++i) k[i] += L.bk[i];
        for (int64_t i = 0; i < KD; ++i) v[i] += L.bv[i];
      }
      ops::rope_neox(q_.data() + a * QD, b - a, nh, hd, cos_.data() + a * (hd / 2), sin_.data() + a * (hd / 2));
      ops::rope_neox(k_.data() + a * KD, b - a, nkv, hd, cos_.data() + a * (hd / 2), sin_.data() + a * (hd / 2));
    });
    AttentionArgs aa;
    aa.layer = il;
    aa.n_heads = nh;
    aa.n_kv_heads = nkv;
    aa.head_dim = hd;
    aa.scale = attn_scale;
    aa.M = M;
    aa.B = batch.B;
    aa.rows = batch.rows;
    aa.offset = layout_.offset.data();
    aa.token_row = layout_.token_row.data();
    aa.kt = &kt;
    attention(pool, aa, state, q_.data(), k_.data(), v_.data(), attn_.data(), attn_scratch_);
    ops::matmul(pool, kt, L.wo, attn_.data(), M, o_.data(), ws_);
    parallel_rows(M, [&](int64_t a, int64_t b) {
      for (int64_t i = a * E; i < b * E; ++i) x_[i] += o_[i];
      ops::rms_norm(x_.data() + a * E, L.ffn_norm.data(), b - a, E, p_.eps, xn_.data() + a * E);
    });
    ops::matmul(pool, kt, L.w_gate, xn_.data(), M, gate_.data(), ws_);
    ops::matmul(pool, kt, L.w_up, xn_.data(), M, up_.data(), ws_);
    // Split the elementwise SwiGLU over all M*F elements (decode has M = 1).
    pool.run([&](int ith, int nth) {
      auto [a, b] = ThreadPool::split(M * F, ith, nth);
      if (a < b) ops::silu_mul(b - a, gate_.data() + a, up_.data() + a, gate_.data() + a);
    });
    ops::matmul(pool, kt, L.w_down, gate_.data(), M, o_.data(), ws_);
    parallel_rows(M, [&](int64_t a, int64_t b) {
      for (int64_t i = a * E; i < b * E; ++i) x_[i] += o_[i];
    });
  }
  for (int32_t b = 0; b < batch.B; ++b) state.advance(batch.rows[b], batch.tokens_of(b));
  if (hidden.shape().size() != 2 || hidden.dim(0) != M || hidden.dim(1) != E) hidden = Tensor({M, E});
  ops::rms_norm(x_.data(), output_norm_.data(), M, E, p_.eps, hidden.data());
  return Status::ok();
}

void Qwen2::project_logits(const float* hidden, int64_t n, float* logits) {
  ops::matmul(*ctx_.pool, *kt_, output_, hidden, n, logits, ws_);
  if (!output_bias_.empty()) {
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < p_.n_vocab; ++i) logits[r * p_.n_vocab + i] += output_bias_[i];
  }
}

const bool kRegistered = register_architecture("qwen2", &Qwen2::create);

}  // namespace
}  // namespace specula
