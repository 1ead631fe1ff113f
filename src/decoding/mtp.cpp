// decoding/mtp.cpp — see mtp.h.
#include "decoding/mtp.h"

#include <cstring>
#include <string>
#include <vector>

#include "decoding/feature_draft.h"
#include "formats/gguf.h"
#include "model/arch/qwen35.h"
#include "ops/ops.h"

namespace specula {
namespace {

constexpr const char* kWho = "[mtp]";

Status mtp_error(const std::string& what) { return Status::error(std::string(kWho) + " " + what); }

class MtpHead final : public FeatureHead {
 public:
  static Result<std::unique_ptr<MtpHead>> load(Model& target);

  std::string name() const override { return "mtp"; }
  const char* who() const override { return kWho; }
  int64_t width() const override { return E_; }
  int64_t vocab() const override { return V_; }
  bool leading_pair() const override { return true; }  // as llama.cpp's draft-mtp
  LayerSpec layer_spec() const override {
    LayerSpec spec;
    spec.attention = attention_spec(shape_.n_kv_heads, shape_.head_dim, 0);
    spec.attention.key_scale = key_scale_from_norm(att_.k_norm, shape_.n_kv_heads, shape_.n_rot);
    return spec;
  }
  const float* source(const VerifyContext& vc) const override { return vc.n_embd == E_ ? vc.hidden : nullptr; }
  int64_t source_width() const override { return E_; }
  void features(float* x, int64_t n, float* g) override { std::memcpy(g, x, static_cast<size_t>(n * E_) * sizeof(float)); }

  void layer(const Batch& batch, const BatchLayout& layout, StateRows& state, const int32_t* ids, const float* g,
             float* y) override {
    const int64_t M = layout.M, E = E_, F = F_;
    const auto grow = [M](std::vector<float>& v, int64_t w) -> float* {
      v.resize(static_cast<size_t>(M * w));
      return v.data();
    };
    ThreadPool& pool = *pool_;
    // x = eh_proj · concat(RMSNorm(embd(x)), RMSNorm(h)); the embedding goes to y as scratch.
    ops::get_rows(*kt_, tok_embd_, ids, M, 1.0f, y);
    grow(cat_, 2 * E);
    for (int64_t m = 0; m < M; ++m) {
      ops::rms_norm(y + m * E, enorm_.data(), 1, E, shape_.eps, cat_.data() + m * 2 * E);
      ops::rms_norm(g + m * E, hnorm_.data(), 1, E, shape_.eps, cat_.data() + m * 2 * E + E);
    }
    ops::matmul(pool, *kt_, eh_proj_, cat_.data(), M, grow(x_, E), ws_);
    // x += attention(RMSNorm(x)); x += FFN(RMSNorm(x)).
    ops::rms_norm(x_.data(), attn_norm_.data(), M, E, shape_.eps, grow(xn_, E));
    qwen35::rope_tables(layout.pos.data(), M, shape_.n_rot, base_, freq_scale_, rope_mask_, cos_, sin_);
    attention_.forward(pool, *kt_, att_, shape_, 0, batch, layout, state, xn_.data(), cos_.data(), sin_.data(),
                       grow(o_, E), ws_);
    for (int64_t i = 0; i < M * E; ++i) x_[i] += o_[i];
    ops::rms_norm(x_.data(), post_norm_.data(), M, E, shape_.eps, xn_.data());
    ops::matmul(pool, *kt_, gate_, xn_.data(), M, grow(fg_, F), ws_);
    ops::matmul(pool, *kt_, up_, xn_.data(), M, grow(fu_, F), ws_);
    ops::silu_mul(M * F, fg_.data(), fu_.data(), fg_.data());
    ops::matmul(pool, *kt_, down_, fg_.data(), M, o_.data(), ws_);
    for (int64_t i = 0; i < M * E; ++i) x_[i] += o_[i];
    ops::rms_norm(x_.data(), head_norm_.data(), M, E, shape_.eps, y);
  }

  void logits(const float* y, int64_t n, float* out) override {
    if (head_.data != nullptr)
      ops::matmul(*pool_, *kt_, head_, y, n, out, ws_);
    else
      target_->project_logits(y, n, out);
  }

 private:
  Model* target_ = nullptr;
  const kernels::KernelTable* kt_ = nullptr;
  std::shared_ptr<ThreadPool> pool_;
  int64_t E_ = 0, F_ = 0, V_ = 0;
  qwen35::AttentionShape shape_;
  float base_ = 10000.0f, freq_scale_ = 1.0f;
  std::vector<float> rope_mask_;
  qwen35::AttentionWeights att_;
  TensorView eh_proj_, tok_embd_, gate_, up_, down_;
  TensorView head_;  // data null: the target's projection (Model::project_logits)
  std::vector<float> enorm_, hnorm_, attn_norm_, post_norm_, head_norm_;
  qwen35::GatedAttention attention_;
  ops::Workspace ws_;
  std::vector<float> cat_, x_, xn_, o_, fg_, fu_, cos_, sin_;
};

Result<std::unique_ptr<MtpHead>> MtpHead::load(Model& target) {
  const ModelInfo& ti = target.info();
  if (ti.architecture != "qwen35")
    return mtp_error("the model's architecture '" + ti.architecture +
                     "' has no multi-token-prediction layers specula runs (qwen35 has)");
  const gguf::GgufFile& f = target.file();
  const std::string a = "qwen35.";
  int64_t nextn = 0;
  SPECULA_HPARAM_INT(nextn, f, a + "nextn_predict_layers", 0, 4096, kWho, 0);
  if (nextn == 0)
    return mtp_error("the model has no multi-token-prediction layers (qwen35.nextn_predict_layers is 0 or absent; "
                     "llama.cpp's converter keeps them unless run with --no-mtp)");
  if (nextn != 1)
    return mtp_error("the model has " + std::to_string(nextn) + " multi-token-prediction layers; one is supported");
  auto m = std::make_unique<MtpHead>();
  m->target_ = &target;
  m->kt_ = &kernels::active();
  m->pool_ = target.pool();
  if (m->pool_ == nullptr) m->pool_ = std::make_shared<ThreadPool>(1);
  const kernels::KernelTable& kt = *m->kt_;
  auto hp = read_transformer_hparams(f, "qwen35", kWho);
  if (!hp) return hp.status();
  m->E_ = ti.n_embd;
  m->V_ = ti.n_vocab;
  m->F_ = hp->n_ff;
  qwen35::AttentionShape& s = m->shape_;
  s.n_heads = hp->n_heads;
  s.n_kv_heads = hp->n_kv_heads;
  SPECULA_HPARAM_INT(s.head_dim, f, a + "attention.key_length", 2, 4096, kWho, m->E_ / s.n_heads);
  SPECULA_HPARAM_INT(s.n_rot, f, a + "rope.dimension_count", 2, s.head_dim, kWho, s.head_dim);
  auto eps = hparam_float(f, a + "attention.layer_norm_rms_epsilon", 0.0, 0.5, kWho);
  if (!eps) return eps.status();
  s.eps = static_cast<float>(*eps);
  auto rope = qwen35::read_rope(f, kWho);  // (the trunk's: its loader checked them)
  if (!rope) return rope.status();
  m->base_ = rope->base;
  m->freq_scale_ = rope->freq_scale;
  m->rope_mask_ = qwen35::rope_mask(rope->sections, s.n_rot);

  // The block's tensors: blk.N after the N trunk layers.
  const int64_t E = m->E_, hd = s.head_dim, QD = s.n_heads * hd, KD = s.n_kv_heads * hd, F = m->F_;
  const std::string b = "blk." + std::to_string(ti.n_layers) + ".";
  Status st = load_weights(f, kt,
                           {{&m->enorm_, b + "nextn.enorm.weight", E},
                            {&m->hnorm_, b + "nextn.hnorm.weight", E},
                            {&m->attn_norm_, b + "attn_norm.weight", E},
                            {&m->post_norm_, b + "post_attention_norm.weight", E},
                            {&m->att_.q_norm, b + "attn_q_norm.weight", hd},
                            {&m->att_.k_norm, b + "attn_k_norm.weight", hd}},
                           {{&m->eh_proj_, b + "nextn.eh_proj.weight", 2 * E, E},
                            {&m->att_.wq, b + "attn_q.weight", E, 2 * QD},
                            {&m->att_.wk, b + "attn_k.weight", E, KD},
                            {&m->att_.wv, b + "attn_v.weight", E, KD},
                            {&m->att_.wo, b + "attn_output.weight", QD, E},
                            {&m->gate_, b + "ffn_gate.weight", E, F},
                            {&m->up_, b + "ffn_up.weight", E, F},
                            {&m->down_, b + "ffn_down.weight", F, E}});
  if (!st.is_ok()) return mtp_error(st.message());
  const std::string embd = f.find_tensor(b + "nextn.embed_tokens.weight") != nullptr ? b + "nextn.embed_tokens.weight"
                                                                                      : "token_embd.weight";
  auto te = weight_2d(f, kt, embd, E, m->V_);
  if (!te) return mtp_error(te.message());
  m->tok_embd_ = *te;
  const std::string norm = f.find_tensor(b + "nextn.shared_head_norm.weight") != nullptr
                               ? b + "nextn.shared_head_norm.weight"
                               : "output_norm.weight";
  auto hn = weight_1d_f32(f, kt, norm, E);
  if (!hn) return mtp_error(hn.message());
  m->head_norm_ = std::move(hn).value();
  if (f.find_tensor(b + "nextn.shared_head_head.weight") != nullptr) {
    auto w = weight_2d(f, kt, b + "nextn.shared_head_head.weight", E, m->V_);
    if (!w) return mtp_error(w.message());
    m->head_ = *w;
  }
  return m;
}

}  // namespace

Result<std::unique_ptr<DraftSource>> make_mtp_draft(Model& target, int64_t max_length, const CacheOptions& cache) {
  auto head = MtpHead::load(target);
  if (!head) return head.status();
  return make_feature_draft(std::move(head).value(), max_length, cache);
}

}  // namespace specula
