// decoding/eagle3.cpp — see eagle3.h.
#include "decoding/eagle3.h"

#include <algorithm>
#include <filesystem>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>

#include "decoding/feature_draft.h"
#include "formats/gguf.h"
#include "formats/hf_folder.h"
#include "model/attention.h"
#include "ops/ops.h"

namespace specula {
namespace {

constexpr const char* kWho = "[eagle3]";

Status head_error(const std::string& what) { return Status::error(std::string(kWho) + " " + what); }

// The head's weights and geometry (eagle3.h lists the tensors).
struct Head {
  std::shared_ptr<gguf::GgufFile> file;
  int64_t E = 0, Et = 0, H = 0, Hkv = 0, hd = 0, F = 0, n_rot = 0;
  int64_t Vt = 0;  // target vocabulary
  int64_t Vd = 0;  // draft vocabulary (rows of the output projection)
  float eps = 1e-6f, base = 10000.0f, freq_scale = 1.0f;
  bool norm_before_residual = false, norm_before_fc = false;
  std::vector<int32_t> target_layers;
  std::vector<int32_t> d2t;  // [Vd] target id of each draft index; empty: the identity
  std::vector<float> enc_norm, attn_norm, hidden_norm, ffn_norm, output_norm, rope_freqs;
  TensorView fc, tok_embd, wq, wk, wv, wo, gate, up, down;
  TensorView output;  // data null: the target's projection (Model::project_logits)
};

Result<std::unique_ptr<Head>> load_head(Model& target, const std::string& path, const kernels::KernelTable& kt) {
  auto opened = open_model_file(path);
  if (!opened) return head_error(opened.message());
  auto h = std::make_unique<Head>();
  h->file = std::make_shared<gguf::GgufFile>(std::move(opened).value());
  const gguf::GgufFile& f = *h->file;
  auto arch = f.get_string("general.architecture");
  if (!arch || *arch != "eagle3")
    return head_error(path + " is not an EAGLE-3 head (general.architecture '" + (arch ? *arch : std::string()) +
                      "', expected 'eagle3')");
  auto hp = read_transformer_hparams(f, "eagle3", kWho);
  if (!hp) return hp.status();
  if (hp->n_layers != 1)
    return head_error("eagle3.block_count is " + std::to_string(hp->n_layers) + ", an EAGLE-3 head has 1 layer");
  SPECULA_RETURN_IF_ERROR(check_block_tensors(f, 1, "eagle3.block_count", kWho));
  h->E = hp->n_embd;
  h->F = hp->n_ff;
  h->H = hp->n_heads;
  h->Hkv = hp->n_kv_heads;
  if (h->H % h->Hkv != 0)
    return head_error("attention.head_count " + std::to_string(h->H) + " is not a multiple of head_count_kv " +
                      std::to_string(h->Hkv));
  SPECULA_HPARAM_INT(h->hd, f, "eagle3.attention.key_length", 2, 4096, kWho, h->E / h->H);
  SPECULA_HPARAM_INT(h->n_rot, f, "eagle3.rope.dimension_count", 2, h->hd, kWho, h->hd);
  if (h->hd < 2 || h->n_rot < 2 || h->n_rot > h->hd || h->hd % 2 != 0 || h->n_rot % 2 != 0)
    return head_error("head_dim " + std::to_string(h->hd) + " and rope.dimension_count " + std::to_string(h->n_rot) +
                      " must be even, at least 2, the second at most the first");
  double v = 0;
  {
    auto eps = hparam_float(f, "eagle3.attention.layer_norm_rms_epsilon", 0.0, 1.0, kWho);
    if (!eps) return eps.status();
    h->eps = static_cast<float>(*eps);
    auto b = hparam_float(f, "eagle3.rope.freq_base", 0.0, 1e12, kWho, 10000.0);
    if (!b) return b.status();
    h->base = static_cast<float>(*b);
    auto fs = hparam_float(f, "eagle3.rope.scaling.factor", 0.0, 1e6, kWho, 1.0);
    if (!fs) return fs.status();
    v = *fs;
    h->freq_scale = static_cast<float>(1.0 / v);
  }
  for (auto [key, dst] : {std::pair<const char*, bool*>{"eagle3.norm_before_residual", &h->norm_before_residual},
                          {"eagle3.norm_before_fc", &h->norm_before_fc}}) {
    if (f.find(key) == nullptr) continue;
    auto b = f.get_bool(key);
    if (!b) return head_error(b.message());
    *dst = *b;
  }

  // The target: its hidden size, layers and vocabulary.
  const ModelInfo& ti = target.info();
  h->Vt = ti.n_vocab;
  // (A folder may leave these two out: then, as the converter, the target's hidden size and
  // layers 2, N/2, N-3.)
  SPECULA_HPARAM_INT(h->Et, f, "eagle3.target_hidden_size", 1, int64_t{1} << 20, kWho, ti.n_embd);
  if (h->Et != ti.n_embd)
    return head_error("the head was made for a target of hidden size " + std::to_string(h->Et) +
                      ", this target's is " + std::to_string(ti.n_embd));
  if (!target.gives_hidden_taps())
    return head_error("the target's architecture gives no hidden taps (EAGLE-3 reads its layers' states)");
  Result<std::vector<int32_t>> layers = std::vector<int32_t>{
      2, static_cast<int32_t>(ti.n_layers / 2), static_cast<int32_t>(ti.n_layers - 3)};
  if (f.find("eagle3.target_layers") != nullptr) layers = f.get_i32_array("eagle3.target_layers");
  if (!layers) return head_error(layers.message());
  if (layers->size() != 3)
    return head_error("eagle3.target_layers has " + std::to_string(layers->size()) + " entries, expected 3");
  for (int32_t l : *layers)
    if (l < 0 || l > ti.n_layers)
      return head_error("eagle3.target_layers entry " + std::to_string(l) + " is outside [0, " +
                        std::to_string(ti.n_layers) + "] (the target has " + std::to_string(ti.n_layers) + " layers)");
  h->target_layers = std::move(layers).value();
  if (const gguf::Value* tok = f.find("tokenizer.ggml.tokens"); tok != nullptr && tok->is_array()) {
    const auto n = static_cast<int64_t>(tok->count);
    if (n != h->Vt)
      return head_error("the head's vocabulary has " + std::to_string(n) + " tokens, the target's " +
                        std::to_string(h->Vt));
  }

  // Weights.
  const int64_t E = h->E, QD = h->H * h->hd, KD = h->Hkv * h->hd;
  Status st = load_weights(f, kt,
                           {{&h->attn_norm, "blk.0.attn_norm.weight", E},
                            {&h->hidden_norm, "blk.0.attn_norm_2.weight", E},
                            {&h->ffn_norm, "blk.0.ffn_norm.weight", E},
                            {&h->output_norm, "output_norm.weight", E}},
                           {{&h->fc, "fc.weight", 3 * h->Et, E},
                            {&h->wq, "blk.0.attn_q.weight", 2 * E, QD},
                            {&h->wk, "blk.0.attn_k.weight", 2 * E, KD},
                            {&h->wv, "blk.0.attn_v.weight", 2 * E, KD},
                            {&h->wo, "blk.0.attn_output.weight", QD, E},
                            {&h->gate, "blk.0.ffn_gate.weight", E, h->F},
                            {&h->up, "blk.0.ffn_up.weight", E, h->F},
                            {&h->down, "blk.0.ffn_down.weight", h->F, E}});
  if (!st.is_ok()) return head_error(st.message());
  if (h->norm_before_fc) {
    auto w = weight_1d_f32(f, kt, "enc.output_norm.weight", 3 * h->Et);
    if (!w) return head_error(w.message());
    h->enc_norm = std::move(w).value();
  }
  if (f.find_tensor("blk.0.rope_freqs.weight") != nullptr || f.find_tensor("rope_freqs.weight") != nullptr) {
    const std::string name = f.find_tensor("rope_freqs.weight") != nullptr ? "rope_freqs.weight" : "blk.0.rope_freqs.weight";
    auto w = weight_1d_f32(f, kt, name, h->n_rot / 2);
    if (!w) return head_error(w.message());
    h->rope_freqs = std::move(w).value();
  }
  // The token embedding: the head's own, or the target's (then the widths must agree).
  if (f.find_tensor("token_embd.weight") != nullptr) {
    auto w = weight_2d(f, kt, "token_embd.weight", E, h->Vt);
    if (!w) return head_error(w.message());
    h->tok_embd = *w;
  } else {
    if (E != h->Et)
      return head_error("the head has no token_embd.weight and its hidden size " + std::to_string(E) +
                        " is not the target's " + std::to_string(h->Et));
    auto w = weight_2d(target.file(), kt, "token_embd.weight", E, h->Vt);
    if (!w) return head_error("the target's token embedding: " + w.message());
    h->tok_embd = *w;
  }
  // The output projection and the draft -> target vocabulary map.
  const gguf::TensorInfo* d2t = f.find_tensor("d2t");
  if (const gguf::TensorInfo* out = f.find_tensor("output.weight"); out != nullptr) {
    const int64_t vd = out->shape.size() == 2 ? out->shape[1] : 0;
    auto w = weight_2d(f, kt, "output.weight", E, vd);
    if (!w || vd < 1) return head_error(w ? "tensor 'output.weight' has no rows" : w.message());
    h->output = *w;
    h->Vd = vd;
  } else {
    if (E != h->Et)
      return head_error("the head has no output.weight and its hidden size " + std::to_string(E) +
                        " is not the target's " + std::to_string(h->Et) + " (the target's projection reads " +
                        std::to_string(h->Et) + "-wide rows)");
    h->Vd = h->Vt;
  }
  if (d2t != nullptr) {
    if (d2t->type != DType::I64 || d2t->shape.size() != 1 || d2t->shape[0] != h->Vd)
      return head_error("tensor 'd2t': " + std::string(dtype_name(d2t->type)) + " " + shape_str(d2t->shape) +
                        ", expected I64 " + shape_str({h->Vd}) + " (one target id per draft token)");
    h->d2t.resize(static_cast<size_t>(h->Vd));
    std::vector<bool> seen(static_cast<size_t>(h->Vt), false);
    for (int64_t i = 0; i < h->Vd; ++i) {
      int64_t id = 0;
      std::memcpy(&id, d2t->data + i * 8, 8);
      if (id < 0 || id >= h->Vt)
        return head_error("d2t[" + std::to_string(i) + "] = " + std::to_string(id) + " is outside the target vocabulary (" +
                          std::to_string(h->Vt) + " tokens)");
      if (seen[static_cast<size_t>(id)]) return head_error("d2t maps two draft tokens to target id " + std::to_string(id));
      seen[static_cast<size_t>(id)] = true;
      h->d2t[static_cast<size_t>(i)] = static_cast<int32_t>(id);
    }
  } else if (h->Vd != h->Vt) {
    return head_error("the head's output has " + std::to_string(h->Vd) + " rows but the file has no d2t map to the target's " +
                      std::to_string(h->Vt) + " tokens");
  }
  // Every tensor must be one the graph reads: a head with extras (biases, more norms) is
  // another architecture, refused rather than run without them.
  static const char* const kKnown[] = {"fc.weight", "enc.output_norm.weight", "blk.0.attn_norm.weight",
                                       "blk.0.attn_norm_2.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight",
                                       "blk.0.attn_v.weight", "blk.0.attn_output.weight", "blk.0.ffn_norm.weight",
                                       "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight",
                                       "output_norm.weight", "output.weight", "token_embd.weight", "d2t",
                                       "rope_freqs.weight", "blk.0.rope_freqs.weight"};
  for (const gguf::TensorInfo& t : f.tensors())
    if (std::none_of(std::begin(kKnown), std::end(kKnown), [&](const char* k) { return t.name == k; }))
      return head_error("tensor '" + t.name + "' is not part of an EAGLE-3 head (llama.cpp's eagle3 graph)");
  return h;
}

// The head as a FeatureHead: g = fc(taps) (RMSNorm first with norm_before_fc); the layer
// of eagle3.h; y is the pre-norm output, picked through output_norm, the output projection
// (or the target's) and d2t.
class Eagle3Head final : public FeatureHead {
 public:
  Eagle3Head(Model& target, std::unique_ptr<Head> head)
      : target_(&target), h_(std::move(head)), kt_(&kernels::active()), pool_(target.pool()) {
    if (pool_ == nullptr) pool_ = std::make_shared<ThreadPool>(1);
  }
  std::string name() const override { return "eagle3"; }
  const char* who() const override { return kWho; }
  int64_t width() const override { return h_->E; }
  int64_t vocab() const override { return h_->tok_embd.rows; }
  LayerSpec layer_spec() const override {
    LayerSpec spec;
    spec.attention = attention_spec(h_->Hkv, h_->hd, 0);
    return spec;
  }
  std::vector<int32_t> hidden_taps() const override { return h_->target_layers; }
  const float* source(const VerifyContext& vc) const override {
    return vc.taps != nullptr && vc.n_taps == 3 && vc.n_embd == h_->Et ? vc.taps : nullptr;
  }
  int64_t source_width() const override { return 3 * h_->Et; }
  void features(float* x, int64_t n, float* g) override {
    if (h_->norm_before_fc) ops::rms_norm(x, h_->enc_norm.data(), n, 3 * h_->Et, h_->eps, x);
    ops::matmul(*pool_, *kt_, h_->fc, x, n, g, ws_);
  }

  // concat(RMSNorm(embd(x)), RMSNorm(g)) -> attention -> + residual -> + FFN: y [M, E] pre-norm.
  void layer(const Batch& batch, const BatchLayout& layout, StateRows& state, const int32_t* ids, const float* g,
             float* y) override {
    const Head& h = *h_;
    const int64_t M = layout.M, E = h.E, QD = h.H * h.hd, KD = h.Hkv * h.hd, F = h.F, half = h.n_rot / 2;
    const auto grow = [M](std::vector<float>& v, int64_t w) { v.resize(static_cast<size_t>(M * w)); };
    grow(cat_, 2 * E);
    grow(q_, QD);
    grow(k_, KD);
    grow(v_, KD);
    grow(attn_, QD);
    grow(o_, E);
    grow(gate_, F);
    grow(up_, F);
    grow(cos_, half);
    grow(sin_, half);
    ThreadPool& pool = *pool_;
    // concat(RMSNorm(embd(x)), RMSNorm(g)) [M, 2E]; the embedding goes to y as scratch.
    ops::get_rows(*kt_, h.tok_embd, ids, M, 1.0f, y);
    for (int64_t m = 0; m < M; ++m) {
      ops::rms_norm(y + m * E, h.attn_norm.data(), 1, E, h.eps, cat_.data() + m * 2 * E);
      ops::rms_norm(g + m * E, h.hidden_norm.data(), 1, E, h.eps, cat_.data() + m * 2 * E + E);
    }
    ops::matmul(pool, *kt_, h.wq, cat_.data(), M, q_.data(), ws_);
    ops::matmul(pool, *kt_, h.wk, cat_.data(), M, k_.data(), ws_);
    ops::matmul(pool, *kt_, h.wv, cat_.data(), M, v_.data(), ws_);
    ops::rope_table(layout.pos.data(), M, h.n_rot, h.base, h.freq_scale, cos_.data(), sin_.data(),
                    h.rope_freqs.empty() ? nullptr : h.rope_freqs.data());
    ops::rope_norm(q_.data(), M, h.H, h.hd, h.n_rot, cos_.data(), sin_.data());
    ops::rope_norm(k_.data(), M, h.Hkv, h.hd, h.n_rot, cos_.data(), sin_.data());
    AttentionArgs aa;
    aa.layer = 0;
    aa.n_heads = h.H;
    aa.n_kv_heads = h.Hkv;
    aa.head_dim = h.hd;
    aa.scale = 1.0f / std::sqrt(static_cast<float>(h.hd));
    aa.M = M;
    aa.B = batch.B;
    aa.rows = batch.rows;
    aa.offset = layout.offset.data();
    aa.token_row = layout.token_row.data();
    aa.kt = kt_;
    attention(pool, aa, state, q_.data(), k_.data(), v_.data(), attn_.data(), attn_scratch_);
    ops::matmul(pool, *kt_, h.wo, attn_.data(), M, o_.data(), ws_);
    // h = attn + residual (g, or its norm); y = h + FFN(RMSNorm(h)).
    for (int64_t m = 0; m < M; ++m) {
      const float* res = h.norm_before_residual ? cat_.data() + m * 2 * E + E : g + m * E;
      for (int64_t i = 0; i < E; ++i) o_[m * E + i] += res[i];
      ops::rms_norm(o_.data() + m * E, h.ffn_norm.data(), 1, E, h.eps, y + m * E);
    }
    ops::matmul(pool, *kt_, h.gate, y, M, gate_.data(), ws_);
    ops::matmul(pool, *kt_, h.up, y, M, up_.data(), ws_);
    for (int64_t m = 0; m < M; ++m) ops::silu_mul(F, gate_.data() + m * F, up_.data() + m * F, gate_.data() + m * F);
    ops::matmul(pool, *kt_, h.down, gate_.data(), M, y, ws_);
    for (int64_t i = 0; i < M * E; ++i) y[i] += o_[i];
  }

  // logits of n pre-norm rows y [n, E]: RMSNorm, then the output projection (the draft
  // vocabulary, its ids through d2t) or the target's.
  void logits(const float* y, int64_t n, float* out) override {
    const Head& h = *h_;
    yn_.resize(static_cast<size_t>(n * h.E));
    ops::rms_norm(y, h.output_norm.data(), n, h.E, h.eps, yn_.data());
    if (h.output.data != nullptr)
      ops::matmul(*pool_, *kt_, h.output, yn_.data(), n, out, ws_);
    else
      target_->project_logits(yn_.data(), n, out);
  }
  int64_t logits_width() const override { return h_->output.data != nullptr ? h_->Vd : h_->Vt; }
  const int32_t* logit_ids() const override { return h_->d2t.empty() ? nullptr : h_->d2t.data(); }

  Model* target_;
  std::unique_ptr<Head> h_;
  const kernels::KernelTable* kt_;
  std::shared_ptr<ThreadPool> pool_;
  ops::Workspace ws_;
  AttentionScratch attn_scratch_;
  std::vector<float> cat_, q_, k_, v_, attn_, o_, gate_, up_, cos_, sin_, yn_;
};

// Hugging Face EAGLE-3 folders (config.json architectures LlamaForCausalLMEagle3 /
// Eagle3LlamaForCausalLM / Eagle3DraftModel, as the EAGLE-3 authors' and SpecForge's
// checkpoints; llama.cpp's conversion/llama.py): the llama keys, num_hidden_layers 1,
// target_hidden_size, eagle_aux_hidden_state_layer_ids -> target_layers, norm_before_residual
// and norm_before_fc; tensors fc, d2t (offsets: target id = i + d2t[i], stored absolute),
// t2d (dropped), norm -> output_norm, lm_head -> output, embed_tokens -> token_embd,
// input_norm -> enc.output_norm, and the layer under midlayer. / layers.0. / model.layers.0.
// (hidden_norm -> attn_norm_2; Q/K rows permuted to the NORM pairing as for llama). The
// speculators format (Eagle3Speculator, its layer config nested) is refused by name.
std::optional<hf::Target> eagle3_tensor(const std::string& name, const std::function<std::optional<hf::Target>(const std::string&)>& llama) {
  using T = hf::Transform;
  if (name == "fc.weight") return hf::Target{"fc.weight"};
  if (name == "d2t") return hf::Target{"d2t", T::kOffsetIds};
  if (name == "t2d") return hf::Target{""};
  if (name == "norm.weight") return hf::Target{"output_norm.weight"};
  if (name == "lm_head.weight") return hf::Target{"output.weight"};
  if (name == "embed_tokens.weight") return hf::Target{"token_embd.weight"};
  if (name == "input_norm.weight") return hf::Target{"enc.output_norm.weight"};
  std::string rest;
  for (const char* prefix : {"midlayer.", "layers.0.", "model.layers.0."})
    if (name.rfind(prefix, 0) == 0) rest = name.substr(std::strlen(prefix));
  if (rest.empty()) return std::nullopt;
  if (rest == "hidden_norm.weight") return hf::Target{"blk.0.attn_norm_2.weight"};
  return llama("model.layers.0." + rest);
}

void eagle3_hf(hf::Config& cfg, hf::Conversion& c) {
  hf::standard_config(cfg, c);
  if (cfg.i("num_hidden_layers", 1, 4096) != 1) cfg.fail("'num_hidden_layers' must be 1 for an EAGLE-3 head");
  if (cfg.has("target_hidden_size")) c.u32("target_hidden_size", cfg.i("target_hidden_size", 1, int64_t{1} << 20));
  if (auto ids = cfg.ints("eagle_aux_hidden_state_layer_ids")) {
    if (ids->size() != 3) cfg.fail("'eagle_aux_hidden_state_layer_ids' must list 3 layers");
    for (int64_t id : *ids)
      if (id < 0 || id > 4096) cfg.fail("'eagle_aux_hidden_state_layer_ids' entry " + std::to_string(id) + " is outside [0, 4096]");
    c.i32s("target_layers", *ids);
  }
  c.boolean("norm_before_residual", cfg.b("norm_before_residual", false));
  c.boolean("norm_before_fc", cfg.b("norm_before_fc", false));
  auto llama = hf::llama_tensor_rule(true, 0);
  c.map = [llama](const std::string& name) { return eagle3_tensor(name, llama); };
}

void speculators_hf(hf::Config& cfg, hf::Conversion&) {
  cfg.fail("the speculators format (Eagle3Speculator, its layer config under 'transformer_layer_config') is not "
           "supported; convert the head with llama.cpp's convert_hf_to_gguf.py --target-model-dir TARGET");
}

// The config.json architectures registered below (is_eagle3_file recognizes a folder by them).
const std::string kHfNames[] = {"LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "Eagle3DraftModel",
                                "Eagle3Speculator"};
const bool kHf = hf::register_hf_architecture("LlamaForCausalLMEagle3", {"eagle3", &eagle3_hf, false, true}) &&
                 hf::register_hf_architecture("Eagle3LlamaForCausalLM", {"eagle3", &eagle3_hf, false, true}) &&
                 hf::register_hf_architecture("Eagle3DraftModel", {"eagle3", &eagle3_hf, false, true}) &&
                 hf::register_hf_architecture("Eagle3Speculator", {"eagle3", &speculators_hf, false, true});

}  // namespace

bool is_eagle3_file(const std::string& path) {
  std::string dir = path;  // a folder, or one of its .safetensors files
  if (dir.size() > 12 && dir.compare(dir.size() - 12, 12, ".safetensors") == 0)
    dir = std::filesystem::path(dir).parent_path().string();
  if (hf::is_model_folder(dir)) {  // config.json alone (opening the folder converts its tensors)
    auto text = hf::read_text(dir + "/config.json", 1 << 20);
    if (!text) return false;
    auto cfg = hf::Config::parse(*text, dir + "/config.json");
    if (!cfg) return false;
    auto archs = cfg->strings("architectures");
    return archs && !archs->empty() &&
           std::find(std::begin(kHfNames), std::end(kHfNames), archs->front()) != std::end(kHfNames);
  }
  auto f = gguf::GgufFile::open(path);
  if (!f) return false;
  auto arch = f->get_string("general.architecture");
  return arch && *arch == "eagle3";
}

Result<std::unique_ptr<DraftSource>> make_eagle3_draft(Model& target, const std::string& path, int64_t max_length,
                                                       const CacheOptions& cache) {
  const kernels::KernelTable& kt = kernels::active();
  auto head = load_head(target, path, kt);
  if (!head) return head.status();
  return make_feature_draft(std::make_unique<Eagle3Head>(target, std::move(head).value()), max_length, cache);
}

}  // namespace specula
