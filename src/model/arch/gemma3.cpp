// model/arch/gemma3.cpp — Gemma 3 (text) from GGUF: hyperparameters, weights, forward.
//
// Architecture (Gemma Team 2025, "Gemma 3 Technical Report"; llama.cpp's GGUF tensor
// naming): embeddings scaled by sqrt(n_embd); each block has pre- and post-attention
// RMSNorms and pre- and post-FFN RMSNorms (the GGUF norm weights already include
// Gemma's +1), per-head RMSNorm of Q and K, NEOX RoPE (base 10000 on sliding-window
// layers, gemma3.rope.freq_base on global ones; every 6th layer is global), sliding
// window gemma3.attention.sliding_window, grouped-query attention scaled by
// 1/sqrt(head_dim), a GELU-tanh gated FFN, and an output projection tied to the
// token embedding unless output.weight exists.
// Does not support the vision tower (mmproj) or attention/final logit soft-capping
// beyond what the metadata declares.
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

struct Gemma3Params {
  int64_t n_vocab = 0, n_embd = 0, n_layers = 0, n_ff = 0;
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t n_ctx_train = 0, window = 0, swa_pattern = 6;
  float eps = 1e-6f, rope_base_global = 1e6f, rope_base_local = 1e4f;
  float rope_freq_scale = 1.0f;  // linear scaling on global layers
  float final_softcap = 0.0f;
  bool is_global(int64_t il) const { return (il + 1) % swa_pattern == 0; }
};

struct Gemma3Layer {
  std::vector<float> attn_norm, q_norm, k_norm, post_attn_norm, ffn_norm, post_ffn_norm;
  TensorView wq, wk, wv, wo, w_gate, w_up, w_down;
  // For quantized caches (AttentionSpec::key_scale): the k_norm gain, as the RMS of each
  // RoPE pair (i, i + head_dim/2), per kv head. [n_kv_heads * head_dim]
  std::shared_ptr<const std::vector<float>> k_scale;
};

class Gemma3 final : public Model {
 public:
  static Result<std::unique_ptr<Model>> create(ModelContext ctx);

  const ModelInfo& info() const override { return info_; }
  const gguf::GgufFile& file() const override { return *ctx_.file; }
  std::shared_ptr<ThreadPool> pool() const override { return ctx_.pool; }
  std::vector<LayerSpec> layer_specs() const override {
    std::vector<LayerSpec> specs(static_cast<size_t>(p_.n_layers));
    for (int64_t il = 0; il < p_.n_layers; ++il) {
      specs[il].attention = attention_spec(p_.n_kv_heads, p_.head_dim, p_.is_global(il) ? 0 : p_.window);
      specs[il].attention.key_scale = layers_[il].k_scale;
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
  Gemma3Params p_;
  const kernels::KernelTable* kt_ = nullptr;
  TensorView tok_embd_, output_;
  std::vector<float> output_norm_;
  std::vector<Gemma3Layer> layers_;
  ops::Workspace ws_;
  // Step buffers, grown to the largest M seen.
  int64_t cap_m_ = 0;
  std::vector<float> x_, xn_, q_, k_, v_, attn_, o_, gate_, up_, cos_l_, sin_l_, cos_g_, sin_g_;
  BatchLayout layout_;
  AttentionScratch attn_scratch_;
};

Result<std::unique_ptr<Model>> Gemma3::create(ModelContext ctx) {
  auto m = std::make_unique<Gemma3>();
  const gguf::GgufFile& f = *ctx.file;
  const kernels::KernelTable& kt = *ctx.kernels;
  Gemma3Params& p = m->p_;
  const std::string a = "gemma3.";
#define SPECULA_HP(var, key, lo, hi, ...) \
  SPECULA_HPARAM_INT(var, f, a + key, lo, hi, "[gemma3]" __VA_OPT__(, ) __VA_ARGS__)
  auto hp = read_transformer_hparams(f, "gemma3", "[gemma3]");
  if (!hp) return hp.status();
  p.n_embd = hp->n_embd, p.n_layers = hp->n_layers, p.n_ff = hp->n_ff, p.n_heads = hp->n_heads;
  p.n_kv_heads = hp->n_kv_heads, p.n_ctx_train = hp->n_ctx_train;
  SPECULA_HP(p.window, "attention.sliding_window", 1, int64_t{1} << 30);
  SPECULA_HP(p.head_dim, "attention.key_length", 2, 4096, p.n_embd / p.n_heads);
  int64_t head_dim_v = 0;
  SPECULA_HP(head_dim_v, "attention.value_length", 2, 4096, p.head_dim);
  // An integer period (every swa_pattern-th layer is global), or the per-layer bool array
  // gguf-py can also write (true = sliding window), accepted when it has such a period.
  if (const gguf::Value* v = f.find(a + "attention.sliding_window_pattern"); v && v->type == gguf::ValueType::ARRAY) {
    auto arr = f.get_i32_array(a + "attention.sliding_window_pattern");
    if (!arr) return Status::error("[gemma3] " + arr.message());
    int64_t period = 0;
    for (size_t il = 0; il < arr->size() && period == 0; ++il)
      if ((*arr)[il] == 0) period = static_cast<int64_t>(il) + 1;
    bool periodic = period > 0 && static_cast<int64_t>(arr->size()) >= p.n_layers;
    for (int64_t il = 0; periodic && il < p.n_layers; ++il) periodic = ((*arr)[il] == 0) == ((il + 1) % period == 0);
    if (!periodic)
      return Status::error("[gemma3] metadata key '" + a +
                           "attention.sliding_window_pattern': a per-layer array without a period (every N-th "
                           "layer global) is not supported");
    p.swa_pattern = period;
  } else {
    SPECULA_HP(p.swa_pattern, "attention.sliding_window_pattern", 1, 4096, p.swa_pattern);
  }
#undef SPECULA_HP
  SPECULA_RETURN_IF_ERROR(check_block_tensors(f, p.n_layers, a + "block_count", "[gemma3]"));
  if (head_dim_v != p.head_dim)
    return Status::error("[gemma3] attention.value_length " + std::to_string(head_dim_v) +
                         " != key_length " + std::to_string(p.head_dim) + " is not supported");
  auto eps = hparam_float(f, a + "attention.layer_norm_rms_epsilon", 0.0, 0.5, "[gemma3]");
  if (!eps) return eps.status();
  p.eps = static_cast<float>(*eps);
  auto fb = hparam_float(f, a + "rope.freq_base", 1.0, 1e12, "[gemma3]", p.rope_base_global);
  if (!fb) return fb.status();
  p.rope_base_global = static_cast<float>(*fb);
  if (auto st = f.get_string(a + "rope.scaling.type"); st && *st != "none") {
    if (*st != "linear") return Status::error("[gemma3] unsupported rope.scaling.type '" + *st + "'");
    auto fac = hparam_float(f, a + "rope.scaling.factor", 0.0, 1e6, "[gemma3]");
    if (!fac) return fac.status();
    p.rope_freq_scale = static_cast<float>(1.0 / *fac);
  }
  // 0 = no final soft-capping.
  auto sc = hparam_float(f, a + "final_logit_softcapping", 0.0, 1e6, "[gemma3]", p.final_softcap, false);
  if (!sc) return sc.status();
  p.final_softcap = static_cast<float>(*sc);
  if (p.n_heads % p.n_kv_heads != 0 || p.head_dim % 2 != 0)
    return Status::error("[gemma3] inconsistent hyperparameters: heads " + std::to_string(p.n_heads) +
                         ", kv heads " + std::to_string(p.n_kv_heads) + ", head_dim " +
                         std::to_string(p.head_dim) + " (kv heads must divide heads; head_dim must be even)");

  const gguf::TensorInfo* te = f.find_tensor("token_embd.weight");
  if (te == nullptr || te->shape.size() != 2) return Status::error("[gemma3] missing tensor 'token_embd.weight'");
  p.n_vocab = te->shape[1];
  if (p.n_vocab <= 0 || p.n_vocab > (int64_t{1} << 31) - 1)
    return Status::error("[gemma3] token_embd.weight: vocabulary size " + std::to_string(p.n_vocab) + " is not usable");
  auto tok = weight_2d(f, kt, "token_embd.weight", p.n_embd, p.n_vocab);
  if (!tok) return tok.status();
  m->tok_embd_ = *tok;
  auto out = output_weight(f, kt, p.n_embd, p.n_vocab, m->tok_embd_);
  if (!out) return out.status();
  m->output_ = *out;
  auto on = weight_1d_f32(f, kt, "output_norm.weight", p.n_embd);
  if (!on) return on.status();
  m->output_norm_ = std::move(on).value();

  const int64_t E = p.n_embd, QD = p.n_heads * p.head_dim, KD = p.n_kv_heads * p.head_dim;
  for (int64_t il = 0; il < p.n_layers; ++il) {
    Gemma3Layer L;
    const std::string b = "blk." + std::to_string(il) + ".";
    SPECULA_RETURN_IF_ERROR(load_weights(
        f, kt,
        {{&L.attn_norm, b + "attn_norm.weight", E}, {&L.q_norm, b + "attn_q_norm.weight", p.head_dim},
         {&L.k_norm, b + "attn_k_norm.weight", p.head_dim}, {&L.post_attn_norm, b + "post_attention_norm.weight", E},
         {&L.ffn_norm, b + "ffn_norm.weight", E}, {&L.post_ffn_norm, b + "post_ffw_norm.weight", E}},
        {{&L.wq, b + "attn_q.weight", E, QD}, {&L.wk, b + "attn_k.weight", E, KD}, {&L.wv, b + "attn_v.weight", E, KD},
         {&L.wo, b + "attn_output.weight", QD, E}, {&L.w_gate, b + "ffn_gate.weight", E, p.n_ff},
         {&L.w_up, b + "ffn_up.weight", E, p.n_ff}, {&L.w_down, b + "ffn_down.weight", p.n_ff, E}}));
    L.k_scale = key_scale_from_norm(L.k_norm, p.n_kv_heads, p.head_dim);
    m->layers_.push_back(std::move(L));
  }
  m->info_.architecture = "gemma3";
  if (auto nm = f.get_string("general.name")) m->info_.name = *nm;
  m->info_.n_vocab = p.n_vocab;
  m->info_.n_embd = p.n_embd;
  m->info_.n_layers = p.n_layers;
  m->info_.n_ctx_train = p.n_ctx_train;
  m->kt_ = ctx.kernels;
  pack_model_weights(ctx, m->info_, m->output_, m->layers_, {&Gemma3Layer::wq, &Gemma3Layer::wk, &Gemma3Layer::wv, &Gemma3Layer::wo, &Gemma3Layer::w_gate, &Gemma3Layer::w_up, &Gemma3Layer::w_down});
  m->ctx_ = std::move(ctx);
  return std::unique_ptr<Model>(std::move(m));
}

void Gemma3::ensure_buffers(int64_t M) {
  if (M <= cap_m_) return;
  const int64_t E = p_.n_embd, QD = p_.n_heads * p_.head_dim, KD = p_.n_kv_heads * p_.head_dim;
  const auto sz = [M](int64_t w) { return static_cast<size_t>(M * w); };
  x_.assign(sz(E), 0); xn_.assign(sz(E), 0); o_.assign(sz(E), 0);
  q_.assign(sz(QD), 0); attn_.assign(sz(QD), 0);
  k_.assign(sz(KD), 0); v_.assign(sz(KD), 0);
  gate_.assign(sz(p_.n_ff), 0); up_.assign(sz(p_.n_ff), 0);
  cos_l_.assign(sz(p_.head_dim / 2), 0); sin_l_.assign(sz(p_.head_dim / 2), 0);
  cos_g_.assign(sz(p_.head_dim / 2), 0); sin_g_.assign(sz(p_.head_dim / 2), 0);
  cap_m_ = M;
}

Status Gemma3::forward(const Batch& batch, StateRows& state, Tensor& hidden) {
  if (state.n_layers() != p_.n_layers)
    return Status::error("[gemma3] state has " + std::to_string(state.n_layers()) + " layers, the model " + std::to_string(p_.n_layers));
  SPECULA_RETURN_IF_ERROR(plan_batch(batch, state, p_.n_vocab, "[gemma3]", layout_));
  const int64_t M = layout_.M;
  ensure_buffers(M);
  ThreadPool& pool = *ctx_.pool;
  const kernels::KernelTable& kt = *kt_;
  const int64_t E = p_.n_embd, hd = p_.head_dim, nh = p_.n_heads, nkv = p_.n_kv_heads;
  const int64_t QD = nh * hd, KD = nkv * hd, F = p_.n_ff;
  const int32_t* pos = layout_.pos.data();

  ops::get_rows(kt, tok_embd_, batch.ids, M, std::sqrt(static_cast<float>(E)), x_.data());
  ops::rope_table(pos, M, hd, p_.rope_base_local, 1.0f, cos_l_.data(), sin_l_.data());
  ops::rope_table(pos, M, hd, p_.rope_base_global, p_.rope_freq_scale, cos_g_.data(), sin_g_.data());
  const float attn_scale = 1.0f / std::sqrt(static_cast<float>(p_.n_layers == 62 ? E / nh : hd));

  for (int64_t il = 0; il < p_.n_layers; ++il) {
    const Gemma3Layer& L = layers_[il];
    const bool global = p_.is_global(il);
    parallel_rows(M, [&](int64_t a, int64_t b) {
      ops::rms_norm(x_.data() + a * E, L.attn_norm.data(), b - a, E, p_.eps, xn_.data() + a * E);
    });
    ops::matmul(pool, kt, L.wq, xn_.data(), M, q_.data(), ws_);
    ops::matmul(pool, kt, L.wk, xn_.data(), M, k_.data(), ws_);
    ops::matmul(pool, kt, L.wv, xn_.data(), M, v_.data(), ws_);
    const float* cs = global ? cos_g_.data() : cos_l_.data();
    const float* sn = global ? sin_g_.data() : sin_l_.data();
    parallel_rows(M, [&](int64_t a, int64_t b) {
      ops::rms_norm(q_.data() + a * QD, L.q_norm.data(), (b - a) * nh, hd, p_.eps, q_.data() + a * QD);
      ops::rms_norm(k_.data() + a * KD, L.k_norm.data(), (b - a) * nkv, hd, p_.eps, k_.data() + a * KD);
      ops::rope_neox(q_.data() + a * QD, b - a, nh, hd, cs + a * (hd / 2), sn + a * (hd / 2));
      ops::rope_neox(k_.data() + a * KD, b - a, nkv, hd, cs + a * (hd / 2), sn + a * (hd / 2));
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
      ops::rms_norm(o_.data() + a * E, L.post_attn_norm.data(), b - a, E, p_.eps, o_.data() + a * E);
      for (int64_t i = a * E; i < b * E; ++i) x_[i] += o_[i];
      ops::rms_norm(x_.data() + a * E, L.ffn_norm.data(), b - a, E, p_.eps, xn_.data() + a * E);
    });
    ops::matmul(pool, kt, L.w_gate, xn_.data(), M, gate_.data(), ws_);
    ops::matmul(pool, kt, L.w_up, xn_.data(), M, up_.data(), ws_);
    parallel_rows(M, [&](int64_t a, int64_t b) {
      kt.gelu_tanh_mul((b - a) * F, gate_.data() + a * F, up_.data() + a * F, gate_.data() + a * F);
    });
    ops::matmul(pool, kt, L.w_down, gate_.data(), M, o_.data(), ws_);
    parallel_rows(M, [&](int64_t a, int64_t b) {
      ops::rms_norm(o_.data() + a * E, L.post_ffn_norm.data(), b - a, E, p_.eps, o_.data() + a * E);
      for (int64_t i = a * E; i < b * E; ++i) x_[i] += o_[i];
    });
  }
  for (int32_t b = 0; b < batch.B; ++b) state.advance(batch.rows[b], batch.tokens_of(b));
  if (hidden.shape().size() != 2 || hidden.dim(0) != M || hidden.dim(1) != E) hidden = Tensor({M, E});
  ops::rms_norm(x_.data(), output_norm_.data(), M, E, p_.eps, hidden.data());
  return Status::ok();
}

void Gemma3::project_logits(const float* hidden, int64_t n, float* logits) {
  ops::matmul(*ctx_.pool, *kt_, output_, hidden, n, logits, ws_);
  if (p_.final_softcap > 0.0f) {
    const float c = p_.final_softcap;
    for (int64_t i = 0; i < n * p_.n_vocab; ++i) logits[i] = c * std::tanh(logits[i] / c);
  }
}

const bool kRegistered = register_architecture("gemma3", &Gemma3::create);

}  // namespace
}  // namespace specula
