// model/arch/qwen35.cpp — Qwen3.5 (text): a hybrid of gated-DeltaNet linear-attention
// layers and gated full-attention layers, from GGUF (llama.cpp architecture `qwen35`).
//
// Architecture (Qwen team, Qwen3-Next / Qwen3.5 model cards; llama.cpp's loader and graph
// for tensor names, metadata keys and formulas): token embedding (no scaling); each layer
// is x += mixer(RMSNorm(x)); x += FFN(RMSNorm(x)) (attn_norm, post_attention_norm; GGUF norm
// weights already include the +1 of the model's zero-centred norms), with
//  * a linear-attention layer (most layers; every `full_attention_interval`-th layer, or
//    the `attention.recurrent_layers` list, says which): qkv, z, beta, alpha projections,
//    beta = sigmoid, g = softplus(alpha + ssm_dt.bias) * ssm_a, the gated delta rule with
//    its causal conv (model/gated_delta_net.h, state: a recurrent layout), then per head
//    RMSNorm(o) * ssm_norm * silu(z) and the ssm_out projection;
//  * a gated attention layer: Q projection with a per-head [q | gate] layout, per-head
//    RMSNorm of q and k, rotary embedding over the first rope.dimension_count dims (NEOX
//    pairs; llama.cpp's interleaved multi-section rope, which for text positions rotates
//    the pairs its sections cover and leaves the others at position 0), GQA attention
//    scaled by 1/sqrt(head_dim), output * sigmoid(gate), attn_output;
//  * a SwiGLU FFN down(silu(gate(x)) * up(x)).
// Final RMSNorm, output projection (output.weight, or tied to the token embedding).
// Does not run multi-token-prediction (nextn) layers (they are skipped), vision inputs, a
// fused attention attn_qkv, or the MoE variant (qwen35moe).
// Hugging Face folders: Qwen3_5ForCausalLM and Qwen3_5ForConditionalGeneration's text model
// (formats/hf_folder.h), mapped below.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/arch/qwen35.h"
#include "model/attention.h"
#include "model/gated_delta_net.h"
#include "formats/hf_folder.h"
#include "model/lora.h"
#include "model/model.h"
#include "ops/ops.h"
#include "state/recurrent_layout.h"

namespace specula::qwen35 {

Result<RopeParams> read_rope(const gguf::GgufFile& f, const char* who) {
  const std::string a = "qwen35.", w = who;
  RopeParams r;
  auto fb = hparam_float(f, a + "rope.freq_base", 1.0, 1e12, who, r.base);
  if (!fb) return fb.status();
  r.base = static_cast<float>(*fb);
  if (auto st = f.get_string(a + "rope.scaling.type"); st && *st != "none") {
    if (*st != "linear") return Status::error(w + " unsupported rope.scaling.type '" + *st + "' (supported: none, linear)");
    auto fac = hparam_float(f, a + "rope.scaling.factor", 0.0, 1e6, who);
    if (!fac) return fac.status();
    r.freq_scale = static_cast<float>(1.0 / *fac);
  }
  auto sec = f.get_i32_array(a + "rope.dimension_sections");
  if (!sec) return Status::error(w + " missing or invalid metadata key '" + a + "rope.dimension_sections': " + sec.message());
  if (sec->size() != 4) return Status::error(w + " rope.dimension_sections has " + std::to_string(sec->size()) + " entries, expected 4");
  for (int i = 0; i < 4; ++i) {
    if ((*sec)[i] < 0) return Status::error(w + " rope.dimension_sections has a negative entry");
    r.sections[i] = (*sec)[i];
    r.section_dims += (*sec)[i];
  }
  return r;
}

std::vector<float> rope_mask(const int32_t sections[4], int64_t n_rot) {
  int64_t sect_dims = 0;
  for (int i = 0; i < 4; ++i) sect_dims += sections[i];
  std::vector<float> mask(static_cast<size_t>(n_rot / 2), 0.0f);
  for (int64_t i = 0; i < n_rot / 2 && sect_dims > 0; ++i) {
    const int64_t s = i % sect_dims;
    const bool covered = (s % 3 == 1 && s < 3 * sections[1]) || (s % 3 == 2 && s < 3 * sections[2]) ||
                         (s % 3 == 0 && s < 3 * sections[0]);
    mask[static_cast<size_t>(i)] = covered ? 1.0f : 0.0f;
  }
  return mask;
}

void rope_tables(const int32_t* pos, int64_t M, int64_t n_rot, float base, float freq_scale,
                 const std::vector<float>& mask, std::vector<float>& cos_t, std::vector<float>& sin_t) {
  const int64_t half = n_rot / 2;
  if (static_cast<int64_t>(cos_t.size()) < M * half) cos_t.resize(static_cast<size_t>(M * half));
  if (static_cast<int64_t>(sin_t.size()) < M * half) sin_t.resize(static_cast<size_t>(M * half));
  ops::rope_table(pos, M, n_rot, base, freq_scale, cos_t.data(), sin_t.data());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t i = 0; i < half; ++i)
      if (mask[static_cast<size_t>(i)] == 0.0f) {
        cos_t[m * half + i] = 1.0f;
        sin_t[m * half + i] = 0.0f;
      }
}

void GatedAttention::forward(ThreadPool& pool, const kernels::KernelTable& kt, const AttentionWeights& w,
                             const AttentionShape& s, int64_t layer, const Batch& batch, const BatchLayout& layout,
                             StateRows& state, const float* xn, const float* cos_t, const float* sin_t, float* o,
                             ops::Workspace& ws) {
  const int64_t M = layout.M, hd = s.head_dim, H = s.n_heads, Hkv = s.n_kv_heads;
  const int64_t QD = H * hd, KD = Hkv * hd, half = s.n_rot / 2;
  const auto grow = [M](std::vector<float>& v, int64_t width) -> float* {
    if (static_cast<int64_t>(v.size()) < M * width) v.resize(static_cast<size_t>(M * width));
    return v.data();
  };
  ops::matmul(pool, kt, w.wq, xn, M, grow(qg_, 2 * QD), ws);
  ops::matmul(pool, kt, w.wk, xn, M, grow(k_, KD), ws);
  ops::matmul(pool, kt, w.wv, xn, M, grow(v_, KD), ws);
  grow(q_, QD);
  grow(gate_, QD);
  parallel_rows(pool, M, [&](int64_t a, int64_t b) {
    for (int64_t m = a; m < b; ++m)
      for (int64_t h = 0; h < H; ++h) {
        const float* src = qg_.data() + m * 2 * QD + h * 2 * hd;
        std::copy(src, src + hd, q_.data() + m * QD + h * hd);
        std::copy(src + hd, src + 2 * hd, gate_.data() + m * QD + h * hd);
      }
    ops::rms_norm(q_.data() + a * QD, w.q_norm.data(), (b - a) * H, hd, s.eps, q_.data() + a * QD);
    ops::rms_norm(k_.data() + a * KD, w.k_norm.data(), (b - a) * Hkv, hd, s.eps, k_.data() + a * KD);
    ops::rope_neox_partial(q_.data() + a * QD, b - a, H, hd, s.n_rot, cos_t + a * half, sin_t + a * half);
    ops::rope_neox_partial(k_.data() + a * KD, b - a, Hkv, hd, s.n_rot, cos_t + a * half, sin_t + a * half);
  });
  AttentionArgs aa;
  aa.layer = layer;
  aa.n_heads = H;
  aa.n_kv_heads = Hkv;
  aa.head_dim = hd;
  aa.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  aa.M = M;
  aa.B = batch.B;
  aa.rows = batch.rows;
  aa.offset = layout.offset.data();
  aa.token_row = layout.token_row.data();
  aa.kt = &kt;
  attention(pool, aa, state, q_.data(), k_.data(), v_.data(), grow(attn_, QD), scratch_);
  parallel_rows(pool, M, [&](int64_t a, int64_t b) {
    for (int64_t i = a * QD; i < b * QD; ++i) attn_[i] *= 1.0f / (1.0f + std::exp(-gate_[i]));
  });
  ops::matmul(pool, kt, w.wo, attn_.data(), M, o, ws);
}

}  // namespace specula::qwen35

namespace specula {
namespace {

struct Params {
  int64_t n_vocab = 0, n_embd = 0, n_layers = 0, n_ff = 0, n_ctx_train = 0;
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0, n_rot = 0;
  float eps = 1e-6f, rope_base = 10000.0f, rope_freq_scale = 1.0f;
  int32_t sections[4] = {0, 0, 0, 0};
  GatedDeltaNetShape gdn;
  std::vector<bool> recurrent;  // [n_layers]
};

struct Layer {
  bool recurrent = false;
  std::vector<float> attn_norm, post_norm;  // [n_embd]
  TensorView w_gate, w_up, w_down;          // [n_ff, n_embd], [n_ff, n_embd], [n_embd, n_ff]
  qwen35::AttentionWeights att;  // the gated attention layer's (qwen35.h)
  std::shared_ptr<const std::vector<float>> k_scale;  // quantized caches: the k_norm gain
  // linear attention: w_qkv [conv_dim, n_embd], w_z [value_dim, n_embd], w_beta/w_alpha
  // [n_v_heads, n_embd], w_out [n_embd, value_dim]
  TensorView w_qkv, w_z, w_beta, w_alpha, w_out;
  std::vector<float> dt_bias, a, ssm_norm;  // [n_v_heads], [n_v_heads], [d_state]
  std::shared_ptr<const GatedDeltaNetRule> rule;
};

class Qwen35 final : public Model {
 public:
  static Result<std::unique_ptr<Model>> create(ModelContext ctx);

  const ModelInfo& info() const override { return info_; }
  const gguf::GgufFile& file() const override { return *ctx_.file; }
  std::shared_ptr<ThreadPool> pool() const override { return ctx_.pool; }
  std::vector<LayerSpec> layer_specs() const override {
    std::vector<LayerSpec> specs(static_cast<size_t>(p_.n_layers));
    for (int64_t il = 0; il < p_.n_layers; ++il) {
      if (layers_[il].recurrent) {
        specs[il].kind = LayerKind::kRecurrent;
        specs[il].recurrent.rule = layers_[il].rule;
      } else {
        specs[il].attention = attention_spec(p_.n_kv_heads, p_.head_dim, 0);
        specs[il].attention.key_scale = layers_[il].k_scale;
      }
    }
    return specs;
  }
  Status forward(const Batch& batch, StateRows& state, Tensor& hidden) override;
  void project_logits(const float* hidden, int64_t n, float* logits) override {
    ops::matmul(*ctx_.pool, *kt_, output_, hidden, n, logits, ws_);
  }

 private:
  void rows(int64_t M, const std::function<void(int64_t, int64_t)>& fn) { parallel_rows(*ctx_.pool, M, fn); }
  void attention_layer(const Layer& L, int64_t il, const Batch& batch, StateRows& state);
  void linear_layer(const Layer& L, int64_t il, const Batch& batch, StateRows& state);
  static std::vector<float>& grow(std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
    return v;
  }

  ModelContext ctx_;
  ModelInfo info_;
  Params p_;
  const kernels::KernelTable* kt_ = nullptr;
  TensorView tok_embd_, output_;    // [n_vocab, n_embd]
  std::vector<float> output_norm_;  // [n_embd]
  std::vector<Layer> layers_;
  std::vector<float> rope_mask_;    // [n_rot/2] 1 = the pair rotates, 0 = position 0
  ops::Workspace ws_;
  BatchLayout layout_;
  qwen35::GatedAttention attention_;
  RecurrentScratch rec_scratch_;
  std::vector<LayerRow*> rec_rows_;
  // Step buffers (grow only): x/xn/o [M, n_embd]; rope cos/sin [M, n_rot/2]; linear qkv
  // [M, conv_dim], z/rout [M, value_dim], beta/alpha [M, n_v_heads], rin [M, conv_dim +
  // 2*n_v_heads]; ffn gate/up [M, n_ff].
  std::vector<float> x_, xn_, o_, cos_, sin_, qkv_, z_, rout_, beta_, alpha_, rin_, fg_, fu_;
};

Result<std::unique_ptr<Model>> Qwen35::create(ModelContext ctx) {
  auto m = std::make_unique<Qwen35>();
  const gguf::GgufFile& f = *ctx.file;
  const kernels::KernelTable& kt = *ctx.kernels;
  Params& p = m->p_;
  const std::string a = "qwen35.";
  constexpr int64_t kMax = int64_t{1} << 20;
#define SPECULA_HP(var, key, lo, hi, ...) \
  SPECULA_HPARAM_INT(var, f, a + key, lo, hi, "[qwen35]" __VA_OPT__(, ) __VA_ARGS__)
  auto hp = read_transformer_hparams(f, "qwen35", "[qwen35]");
  if (!hp) return hp.status();
  const int64_t block_count = hp->n_layers;  // includes the nextn (MTP) blocks
  p.n_embd = hp->n_embd, p.n_ff = hp->n_ff, p.n_heads = hp->n_heads, p.n_kv_heads = hp->n_kv_heads;
  p.n_ctx_train = hp->n_ctx_train;
  int64_t d_inner = 0;
  SPECULA_HP(p.gdn.conv_kernel, "ssm.conv_kernel", 1, 64);
  SPECULA_HP(d_inner, "ssm.inner_size", 1, kMax);
  SPECULA_HP(p.gdn.d_state, "ssm.state_size", 1, 1024);
  SPECULA_HP(p.gdn.n_v_heads, "ssm.time_step_rank", 1, 4096);
  SPECULA_HP(p.gdn.n_k_heads, "ssm.group_count", 1, 4096);
  SPECULA_HP(p.head_dim, "attention.key_length", 2, 4096, p.n_embd / p.n_heads);
  int64_t head_dim_v = 0, nextn = 0;
  SPECULA_HP(head_dim_v, "attention.value_length", 2, 4096, p.head_dim);
  SPECULA_HP(p.n_rot, "rope.dimension_count", 2, 4096, p.head_dim);
  SPECULA_HP(nextn, "nextn_predict_layers", 0, block_count - 1, 0);
#undef SPECULA_HP
  SPECULA_RETURN_IF_ERROR(check_block_tensors(f, block_count, a + "block_count", "[qwen35]"));
  if (head_dim_v != p.head_dim)
    return Status::error("[qwen35] attention.value_length " + std::to_string(head_dim_v) + " != key_length " +
                         std::to_string(p.head_dim));
  p.n_layers = block_count - nextn;
  auto eps = hparam_float(f, a + "attention.layer_norm_rms_epsilon", 0.0, 0.5, "[qwen35]");
  if (!eps) return eps.status();
  p.eps = static_cast<float>(*eps);
  p.gdn.eps = p.eps;
  auto rope = qwen35::read_rope(f, "[qwen35]");
  if (!rope) return rope.status();
  p.rope_base = rope->base;
  p.rope_freq_scale = rope->freq_scale;
  std::copy(std::begin(rope->sections), std::end(rope->sections), p.sections);
  const int64_t sect_dims = rope->section_dims;
  if (p.n_layers <= 0 || p.n_layers > 4096 || p.n_heads > 4096 || p.n_kv_heads <= 0 || p.n_heads % p.n_kv_heads != 0 ||
      p.head_dim <= 0 || p.head_dim > 4096 || p.n_embd > kMax || p.n_ff > kMax || p.n_rot <= 0 || p.n_rot % 2 != 0 ||
      p.n_rot > p.head_dim || sect_dims <= 0 || sect_dims > p.head_dim)
    return Status::error("[qwen35] inconsistent hyperparameters: layers " + std::to_string(p.n_layers) + ", heads " +
                         std::to_string(p.n_heads) + "/" + std::to_string(p.n_kv_heads) + ", head_dim " +
                         std::to_string(p.head_dim) + ", rope dims " + std::to_string(p.n_rot) + ", rope sections sum " +
                         std::to_string(sect_dims));
  if (p.gdn.d_state > 1024 || p.gdn.conv_kernel > 64 || p.gdn.n_v_heads % p.gdn.n_k_heads != 0 ||
      d_inner != p.gdn.d_state * p.gdn.n_v_heads)
    return Status::error("[qwen35] inconsistent linear-attention sizes: ssm.inner_size " + std::to_string(d_inner) +
                         " must be ssm.state_size " + std::to_string(p.gdn.d_state) + " x ssm.time_step_rank " +
                         std::to_string(p.gdn.n_v_heads) + ", a multiple of ssm.group_count " +
                         std::to_string(p.gdn.n_k_heads) + " (state size at most 1024, conv kernel at most 64)");
  // Which layers are recurrent.
  p.recurrent.assign(static_cast<size_t>(p.n_layers), false);
  if (auto rl = f.get_i32_array(a + "attention.recurrent_layers")) {
    if (static_cast<int64_t>(rl->size()) < p.n_layers)
      return Status::error("[qwen35] attention.recurrent_layers has " + std::to_string(rl->size()) + " entries for " +
                           std::to_string(p.n_layers) + " layers");
    for (int64_t il = 0; il < p.n_layers; ++il) p.recurrent[il] = (*rl)[il] != 0;
  } else {
    auto interval_r = hparam_int(f, a + "full_attention_interval", 1, 4096, "[qwen35]", 4);
    if (!interval_r) return interval_r.status();
    const int64_t interval = *interval_r;
    for (int64_t il = 0; il < p.n_layers; ++il) p.recurrent[il] = (il + 1) % interval != 0;
  }
  if (f.find_tensor("blk.0.attn_qkv.weight") != nullptr && !p.recurrent[0])
    return Status::error("[qwen35] fused attention tensor 'blk.0.attn_qkv.weight' is not supported");

  const gguf::TensorInfo* te = f.find_tensor("token_embd.weight");
  if (te == nullptr || te->shape.size() != 2) return Status::error("[qwen35] missing tensor 'token_embd.weight'");
  p.n_vocab = te->shape[1];
  if (p.n_vocab <= 0 || p.n_vocab > (int64_t{1} << 31) - 1)
    return Status::error("[qwen35] token_embd.weight: vocabulary size " + std::to_string(p.n_vocab) + " is not usable");
  auto tok = weight_2d(f, kt, "token_embd.weight", p.n_embd, p.n_vocab);
  if (!tok) return tok.status();
  m->tok_embd_ = *tok;
  auto out = output_weight(f, kt, p.n_embd, p.n_vocab, m->tok_embd_);
  if (!out) return out.status();
  m->output_ = *out;
  auto on = weight_1d_f32(f, kt, "output_norm.weight", p.n_embd);
  if (!on) return on.status();
  m->output_norm_ = std::move(on).value();

  const int64_t E = p.n_embd, hd = p.head_dim, H = p.n_heads, KD = p.n_kv_heads * hd, F = p.n_ff;
  const int64_t C = p.gdn.conv_dim(), VD = p.gdn.value_dim(), Hv = p.gdn.n_v_heads, ds = p.gdn.d_state;
  for (int64_t il = 0; il < p.n_layers; ++il) {
    Layer L;
    L.recurrent = p.recurrent[il];
    const std::string b = "blk." + std::to_string(il) + ".";
    SPECULA_RETURN_IF_ERROR(load_weights(
        f, kt, {{&L.attn_norm, b + "attn_norm.weight", E}, {&L.post_norm, b + "post_attention_norm.weight", E}},
        {{&L.w_gate, b + "ffn_gate.weight", E, F}, {&L.w_up, b + "ffn_up.weight", E, F},
         {&L.w_down, b + "ffn_down.weight", F, E}}));
    if (L.recurrent) {
      SPECULA_RETURN_IF_ERROR(load_weights(
          f, kt,
          {{&L.dt_bias, b + "ssm_dt.bias", Hv}, {&L.a, b + "ssm_a", Hv}, {&L.ssm_norm, b + "ssm_norm.weight", ds}},
          {{&L.w_qkv, b + "attn_qkv.weight", E, C}, {&L.w_z, b + "attn_gate.weight", E, VD},
           {&L.w_beta, b + "ssm_beta.weight", E, Hv}, {&L.w_alpha, b + "ssm_alpha.weight", E, Hv},
           {&L.w_out, b + "ssm_out.weight", VD, E}}));
      auto conv = weight_f32(f, kt, b + "ssm_conv1d.weight", {p.gdn.conv_kernel, C});
      if (!conv) return conv.status();
      L.rule = std::make_shared<GatedDeltaNetRule>(p.gdn, std::move(conv).value(), ctx.kernels);
    } else {
      SPECULA_RETURN_IF_ERROR(load_weights(
          f, kt, {{&L.att.q_norm, b + "attn_q_norm.weight", hd}, {&L.att.k_norm, b + "attn_k_norm.weight", hd}},
          {{&L.att.wq, b + "attn_q.weight", E, 2 * H * hd}, {&L.att.wk, b + "attn_k.weight", E, KD},
           {&L.att.wv, b + "attn_v.weight", E, KD}, {&L.att.wo, b + "attn_output.weight", H * hd, E}}));
      L.k_scale = key_scale_from_norm(L.att.k_norm, p.n_kv_heads, p.n_rot);
    }
    m->layers_.push_back(std::move(L));
  }
  m->rope_mask_ = qwen35::rope_mask(p.sections, p.n_rot);
  m->info_.architecture = "qwen35";
  if (auto nm = f.get_string("general.name")) m->info_.name = *nm;
  m->info_.n_vocab = p.n_vocab;
  m->info_.n_embd = p.n_embd;
  m->info_.n_layers = p.n_layers;
  m->info_.n_ctx_train = p.n_ctx_train;
  m->kt_ = ctx.kernels;
  std::vector<TensorView*> mats{&m->output_};  // (pack_model_weights' order)
  for (Layer& L : m->layers_)
    for (TensorView* t : {&L.w_gate, &L.w_up, &L.w_down, &L.att.wq, &L.att.wk, &L.att.wv, &L.att.wo, &L.w_qkv, &L.w_z,
                          &L.w_beta, &L.w_alpha, &L.w_out})
      if (t->data != nullptr) mats.push_back(t);
  pack_weights(ctx, mats);
  note_packed(ctx, m->info_);
  m->ctx_ = std::move(ctx);
  return std::unique_ptr<Model>(std::move(m));
}

void Qwen35::attention_layer(const Layer& L, int64_t il, const Batch& batch, StateRows& state) {
  const qwen35::AttentionShape shape{p_.n_heads, p_.n_kv_heads, p_.head_dim, p_.n_rot, p_.eps};
  attention_.forward(*ctx_.pool, *kt_, L.att, shape, il, batch, layout_, state, xn_.data(), cos_.data(), sin_.data(),
                     o_.data(), ws_);
}

void Qwen35::linear_layer(const Layer& L, int64_t il, const Batch& batch, StateRows& state) {
  ThreadPool& pool = *ctx_.pool;
  const kernels::KernelTable& kt = *kt_;
  const int64_t M = layout_.M, C = p_.gdn.conv_dim(), VD = p_.gdn.value_dim(), Hv = p_.gdn.n_v_heads;
  const int64_t ds = p_.gdn.d_state, nin = C + 2 * Hv;
  ops::matmul(pool, kt, L.w_qkv, xn_.data(), M, grow(qkv_, M * C).data(), ws_);
  ops::matmul(pool, kt, L.w_z, xn_.data(), M, grow(z_, M * VD).data(), ws_);
  ops::matmul(pool, kt, L.w_beta, xn_.data(), M, grow(beta_, M * Hv).data(), ws_);
  ops::matmul(pool, kt, L.w_alpha, xn_.data(), M, grow(alpha_, M * Hv).data(), ws_);
  grow(rin_, M * nin);
  for (int64_t m = 0; m < M; ++m) {
    float* in = rin_.data() + m * nin;
    std::copy(qkv_.data() + m * C, qkv_.data() + (m + 1) * C, in);
    for (int64_t h = 0; h < Hv; ++h) {
      const float x = alpha_[m * Hv + h] + L.dt_bias[h];
      const float sp = x > 20.0f ? x : std::log(1.0f + std::exp(x));  // softplus, as ggml computes it
      in[C + h] = sp * L.a[h];                                     // g: the log decay (a < 0)
      in[C + Hv + h] = 1.0f / (1.0f + std::exp(-beta_[m * Hv + h]));
    }
  }
  const RecurrentLayout* R = state.layout_as<RecurrentLayout>(il);
  SPECULA_CHECK(R != nullptr);
  rec_rows_.resize(static_cast<size_t>(batch.B));
  for (int32_t b = 0; b < batch.B; ++b) rec_rows_[b] = &state.layer_row(batch.rows[b], il);
  R->run(pool, rec_rows_, layout_.offset.data(), rin_.data(), grow(rout_, M * VD).data(), rec_scratch_);
  // Gated RMSNorm per head: rms(o_h) * ssm_norm * silu(z_h).
  rows(M, [&](int64_t a, int64_t b) {
    ops::rms_norm(rout_.data() + a * VD, L.ssm_norm.data(), (b - a) * Hv, ds, p_.eps, rout_.data() + a * VD);
    for (int64_t i = a * VD; i < b * VD; ++i) rout_[i] *= z_[i] / (1.0f + std::exp(-z_[i]));
  });
  ops::matmul(pool, kt, L.w_out, rout_.data(), M, o_.data(), ws_);
}

Status Qwen35::forward(const Batch& batch, StateRows& state, Tensor& hidden) {
  if (state.n_layers() != p_.n_layers)
    return Status::error("[qwen35] state has " + std::to_string(state.n_layers()) + " layers, the model " +
                         std::to_string(p_.n_layers));
  if (any_lora(batch)) return Status::error("[qwen35] this architecture takes no LoRA adapters");
  if (batch.n_taps > 0) return Status::error("[qwen35] this architecture gives no hidden taps");
  SPECULA_RETURN_IF_ERROR(plan_batch(batch, state, p_.n_vocab, "[qwen35]", layout_));
  const int64_t M = layout_.M, E = p_.n_embd, F = p_.n_ff;
  ThreadPool& pool = *ctx_.pool;
  const kernels::KernelTable& kt = *kt_;
  grow(x_, M * E);
  grow(xn_, M * E);
  grow(o_, M * E);
  ops::get_rows(kt, tok_embd_, batch.ids, M, 1.0f, x_.data());
  qwen35::rope_tables(layout_.pos.data(), M, p_.n_rot, p_.rope_base, p_.rope_freq_scale, rope_mask_, cos_, sin_);
  for (int64_t il = 0; il < p_.n_layers; ++il) {
    const Layer& L = layers_[il];
    rows(M, [&](int64_t a, int64_t b) {
      ops::rms_norm(x_.data() + a * E, L.attn_norm.data(), b - a, E, p_.eps, xn_.data() + a * E);
    });
    if (L.recurrent)
      linear_layer(L, il, batch, state);
    else
      attention_layer(L, il, batch, state);
    rows(M, [&](int64_t a, int64_t b) {
      for (int64_t i = a * E; i < b * E; ++i) x_[i] += o_[i];
      ops::rms_norm(x_.data() + a * E, L.post_norm.data(), b - a, E, p_.eps, xn_.data() + a * E);
    });
    ops::matmul(pool, kt, L.w_gate, xn_.data(), M, grow(fg_, M * F).data(), ws_);
    ops::matmul(pool, kt, L.w_up, xn_.data(), M, grow(fu_, M * F).data(), ws_);
    pool.run([&](int ith, int nth) {
      auto [a, b] = ThreadPool::split(M * F, ith, nth);
      if (a < b) ops::silu_mul(b - a, fg_.data() + a, fu_.data() + a, fg_.data() + a);
    });
    ops::matmul(pool, kt, L.w_down, fg_.data(), M, o_.data(), ws_);
    rows(M, [&](int64_t a, int64_t b) {
      for (int64_t i = a * E; i < b * E; ++i) x_[i] += o_[i];
    });
  }
  for (int32_t b = 0; b < batch.B; ++b) state.advance(batch.rows[b], batch.tokens_of(b));
  if (hidden.shape().size() != 2 || hidden.dim(0) != M || hidden.dim(1) != E) hidden = Tensor({M, E});
  ops::rms_norm(x_.data(), output_norm_.data(), M, E, p_.eps, hidden.data());
  return Status::ok();
}

const bool kRegistered = register_architecture("qwen35", &Qwen35::create);

// config.json (Qwen3_5TextConfig, or Qwen3_5Config's text_config), as llama.cpp's converter
// (conversion/qwen.py Qwen3_5TextModel: _Qwen35MRopeMixin, _LinearAttentionVReorderBase,
// Qwen3NextModel, run with --no-mtp) writes it: the standard keys (hf::standard_config);
// linear_conv_kernel_dim -> ssm.conv_kernel, linear_key_head_dim -> ssm.state_size,
// linear_num_key_heads -> ssm.group_count, linear_num_value_heads -> ssm.time_step_rank,
// linear_value_head_dim * linear_num_value_heads -> ssm.inner_size; layer_types ->
// attention.recurrent_layers (linear_attention), full_attention_interval (default 4);
// rope.dimension_count = int((head_dim or hidden_size / num_attention_heads) *
// partial_rotary_factor (rope_parameters', else the top level's, else 0.25));
// rope_parameters.mrope_section padded to 4 (default [11, 11, 10, 0]) ->
// rope.dimension_sections. Tensors: "language_model." dropped, the vision tower
// (model.visual.) dropped; the multi-token-prediction block (mtp.*) kept as blk.L.* when
// the config counts it (mtp_num_hidden_layers -> nextn_predict_layers, block_count + it:
// mtp.fc -> nextn.eh_proj, mtp.pre_fc_norm_embedding / _hidden -> nextn.enorm / hnorm,
// mtp.norm -> nextn.shared_head_norm, mtp.layers.K.* as a layer L + K), else dropped; RMSNorm gains + 1
// (Qwen3.5's norms scale by 1 + w) except linear_attn.norm (the gated norm scales by w);
// A_log -> ssm_a = -exp(A_log); dt_bias -> ssm_dt.bias; conv1d [C, 1, K] squeezed; with
// fewer key heads than value heads the value heads reordered from grouped by key head to
// tiled (the V rows of in_proj_qkv and conv1d, in_proj_z, in_proj_a/b, A_log, dt_bias rows,
// out_proj columns). Refused: attention biases, another activation than silu, value heads
// not a multiple of key heads, rope types other than default / linear.
void qwen35_hf(hf::Config& cfg, hf::Conversion& c) {
  if (const nlohmann::json* rs = cfg.rope_scaling()) {  // the GGUF reader has no other
    std::string type;
    for (const char* k : {"rope_type", "type"})
      if (auto it = rs->find(k); it != rs->end() && it->is_string()) type = it->get<std::string>();
    if (type != "linear") cfg.fail("rope type '" + type + "' is not supported for qwen35 (default, linear)");
  }
  hf::standard_config(cfg, c);
  const int64_t n_layers = cfg.i("num_hidden_layers", 1, 4096);
  const int64_t n_embd = cfg.i("hidden_size", 1, int64_t{1} << 20);
  const int64_t n_heads = cfg.i("num_attention_heads", 1, 4096);
  const int64_t conv_kernel = cfg.i("linear_conv_kernel_dim", 1, 64);
  const int64_t dk = cfg.i("linear_key_head_dim", 1, 4096);
  const int64_t dv = cfg.i("linear_value_head_dim", 1, 4096);
  const int64_t hk = cfg.i("linear_num_key_heads", 1, 4096);
  const int64_t hv = cfg.i("linear_num_value_heads", 1, 4096);
  if (cfg.b("attention_bias", false)) cfg.fail("'attention_bias': true is not supported for qwen35");
  if (const std::string act = cfg.s("hidden_act", "silu"); act != "silu")
    cfg.fail("'hidden_act' " + act + " is not supported (silu)");
  if (!cfg.status().is_ok()) return;
  if (hv % hk != 0)
    return cfg.fail("'linear_num_value_heads' " + std::to_string(hv) + " must be a multiple of 'linear_num_key_heads' " +
                    std::to_string(hk));
  c.u32("ssm.conv_kernel", conv_kernel);
  c.u32("ssm.state_size", dk);
  c.u32("ssm.group_count", hk);
  c.u32("ssm.time_step_rank", hv);
  c.u32("ssm.inner_size", dv * hv);
  if (auto types = cfg.strings("layer_types")) {
    std::vector<bool> recurrent;
    for (const std::string& t : *types) {
      if (t != "linear_attention" && t != "full_attention") cfg.fail("'layer_types': unknown entry '" + t + "'");
      recurrent.push_back(t == "linear_attention");
    }
    if (static_cast<int64_t>(recurrent.size()) != n_layers) cfg.fail("'layer_types' must have num_hidden_layers entries");
    c.bools("attention.recurrent_layers", recurrent);
  }
  c.u32("full_attention_interval", cfg.i("full_attention_interval", 1, 4096, 4));
  // The multi-token-prediction block, when the config counts it: blk.L.* after the trunk.
  const int64_t n_mtp = cfg.i("mtp_num_hidden_layers", 0, 16, 0);
  if (n_mtp > 0) {
    c.u32("block_count", n_layers + n_mtp);
    c.u32("nextn_predict_layers", n_mtp);
  }
  // Rope: rope_parameters (or the older rope_scaling), with the top-level keys as fallbacks.
  const nlohmann::json* rp = cfg.object("rope_parameters");
  if (rp == nullptr) rp = cfg.object("rope_scaling");
  const auto rope_field = [&](const char* k) -> const nlohmann::json* {
    if (rp != nullptr)
      if (auto it = rp->find(k); it != rp->end() && !it->is_null()) return &*it;
    return nullptr;
  };
  double factor = 0.25;
  if (const nlohmann::json* f = rope_field("partial_rotary_factor")) {
    if (!f->is_number() || f->get<double>() <= 0 || f->get<double>() > 1)
      return cfg.bad("rope_parameters.partial_rotary_factor", "a number in (0, 1]", *f);
    factor = f->get<double>();
  } else if (cfg.has("partial_rotary_factor")) {
    factor = cfg.f("partial_rotary_factor", 1e-6, 1.0);
  }
  const int64_t rope_dim = cfg.has("head_dim") ? cfg.i("head_dim", 2, 4096) : n_embd / std::max<int64_t>(n_heads, 1);
  c.u32("rope.dimension_count", static_cast<int64_t>(static_cast<double>(rope_dim) * factor));
  std::vector<int64_t> sections = {11, 11, 10, 0};
  if (const nlohmann::json* ms = rope_field("mrope_section")) {
    if (!ms->is_array() || ms->size() > 4 ||
        !std::all_of(ms->begin(), ms->end(), [](const nlohmann::json& e) { return e.is_number_integer() && e.get<int64_t>() >= 0; }))
      return cfg.bad("rope_parameters.mrope_section", "a list of up to 4 non-negative integers", *ms);
    sections = ms->get<std::vector<int64_t>>();
    sections.resize(4, 0);
  }
  c.i32s("rope.dimension_sections", sections);

  const int64_t per_group = hv / hk;
  const bool reorder = hk != hv && hk > 1;  // grouped -> tiled (the identity for one key head)
  c.map = [reorder, hk, per_group, dk, dv, n_layers, n_mtp](const std::string& full_name) -> std::optional<hf::Target> {
    std::string name = full_name;
    if (auto p = name.find("language_model."); p != std::string::npos) name.erase(p, 15);
    if (name.find("visual.") != std::string::npos) return hf::Target{};
    if (name.rfind("model.mtp.", 0) == 0) name.erase(0, 6);
    if (name.rfind("mtp.", 0) == 0) {  // (llama.cpp's converter: _QwenMtpMixin)
      if (n_mtp == 0) return hf::Target{};  // not counted by the config: dropped
      using T = hf::Transform;
      static const std::map<std::string, std::pair<std::string, T>> kMtp = {
          {"mtp.fc.weight", {"nextn.eh_proj.weight", T::kNone}},
          {"mtp.pre_fc_norm_embedding.weight", {"nextn.enorm.weight", T::kAddOne}},
          {"mtp.pre_fc_norm_hidden.weight", {"nextn.hnorm.weight", T::kAddOne}},
          {"mtp.norm.weight", {"nextn.shared_head_norm.weight", T::kAddOne}},
      };
      if (auto it = kMtp.find(name); it != kMtp.end())
        return hf::Target{"blk." + std::to_string(n_layers) + "." + it->second.first, it->second.second};
      const auto layer = hf::split_layer_name("model." + name.substr(4));  // mtp.layers.K.rest
      if (!layer || layer->first >= n_mtp) return hf::Target{};  // not the block llama.cpp reads: dropped
      name = "model.layers." + std::to_string(n_layers + layer->first) + "." + layer->second;
    }
    static const std::map<std::string, hf::Target> kGlobal = {
        {"model.embed_tokens.weight", {"token_embd.weight"}},
        {"model.norm.weight", {"output_norm.weight", hf::Transform::kAddOne}},
        {"lm_head.weight", {"output.weight"}},
    };
    if (auto it = kGlobal.find(name); it != kGlobal.end()) return it->second;
    const auto layer = hf::split_layer_name(name);
    if (!layer) return std::nullopt;
    const std::string blk = "blk." + std::to_string(layer->first) + ".";
    const std::string& rest = layer->second;
    if (rest.find("rotary_emb.") != std::string::npos) return hf::Target{};  // buffers
    using T = hf::Transform;
    // HF name -> GGUF name, transform, and the value-head reorder: {offset, unit, columns}
    // (unit 0: none).
    struct Rule {
      const char* gguf;
      T transform;
      int64_t offset_k, unit_v, unit;  // offset = offset_k * dk * hk; unit = unit_v * dv + unit
      bool columns;
    };
    static const std::map<std::string, Rule> kLayer = {
        {"input_layernorm.weight", {"attn_norm.weight", T::kAddOne, 0, 0, 0, false}},
        {"post_attention_layernorm.weight", {"post_attention_norm.weight", T::kAddOne, 0, 0, 0, false}},
        {"mlp.gate_proj.weight", {"ffn_gate.weight", T::kNone, 0, 0, 0, false}},
        {"mlp.up_proj.weight", {"ffn_up.weight", T::kNone, 0, 0, 0, false}},
        {"mlp.down_proj.weight", {"ffn_down.weight", T::kNone, 0, 0, 0, false}},
        {"self_attn.q_proj.weight", {"attn_q.weight", T::kNone, 0, 0, 0, false}},
        {"self_attn.k_proj.weight", {"attn_k.weight", T::kNone, 0, 0, 0, false}},
        {"self_attn.v_proj.weight", {"attn_v.weight", T::kNone, 0, 0, 0, false}},
        {"self_attn.o_proj.weight", {"attn_output.weight", T::kNone, 0, 0, 0, false}},
        {"self_attn.q_norm.weight", {"attn_q_norm.weight", T::kAddOne, 0, 0, 0, false}},
        {"self_attn.k_norm.weight", {"attn_k_norm.weight", T::kAddOne, 0, 0, 0, false}},
        {"linear_attn.in_proj_qkv.weight", {"attn_qkv.weight", T::kNone, 2, 1, 0, false}},
        {"linear_attn.in_proj_z.weight", {"attn_gate.weight", T::kNone, 0, 1, 0, false}},
        {"linear_attn.in_proj_b.weight", {"ssm_beta.weight", T::kNone, 0, 0, 1, false}},
        {"linear_attn.in_proj_a.weight", {"ssm_alpha.weight", T::kNone, 0, 0, 1, false}},
        {"linear_attn.A_log", {"ssm_a", T::kNegExp, 0, 0, 1, false}},
        {"linear_attn.dt_bias", {"ssm_dt.bias", T::kNone, 0, 0, 1, false}},
        {"linear_attn.conv1d.weight", {"ssm_conv1d.weight", T::kSqueeze, 2, 1, 0, false}},
        {"linear_attn.norm.weight", {"ssm_norm.weight", T::kNone, 0, 0, 0, false}},
        {"linear_attn.out_proj.weight", {"ssm_out.weight", T::kNone, 0, 1, 0, true}},
    };
    auto it = kLayer.find(rest);
    if (it == kLayer.end()) return std::nullopt;
    const Rule& r = it->second;
    hf::Target t{blk + r.gguf, r.transform};
    const int64_t unit = r.unit_v * dv + r.unit;
    if (reorder && unit > 0) t.reorder = {hk, per_group, unit, r.offset_k * dk * hk, r.columns};
    return t;
  };
}

const bool kHf = hf::register_hf_architecture("Qwen3_5ForCausalLM", {"qwen35", &qwen35_hf, false});
const bool kHfMm = hf::register_hf_architecture("Qwen3_5ForConditionalGeneration", {"qwen35", &qwen35_hf, false});

}  // namespace
}  // namespace specula
