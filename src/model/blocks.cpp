// model/blocks.cpp — see blocks.h.
#include "model/blocks.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

namespace specula {

// --- Hparams ------------------------------------------------------------------------------
int64_t Hparams::i(const std::string& key, int64_t lo, int64_t hi, std::optional<int64_t> fallback) {
  if (!status_.is_ok()) return fallback.value_or(0);
  auto r = hparam_int(f_, full(key), lo, hi, who_.c_str(), fallback);
  if (!r) {
    status_ = r.status();
    return fallback.value_or(0);
  }
  return *r;
}

double Hparams::f(const std::string& key, double lo, double hi, std::optional<double> fallback, bool lo_open) {
  if (!status_.is_ok()) return fallback.value_or(0.0);
  auto r = hparam_float(f_, full(key), lo, hi, who_.c_str(), fallback, lo_open);
  if (!r) {
    status_ = r.status();
    return fallback.value_or(0.0);
  }
  return *r;
}

std::optional<std::string> Hparams::str(const std::string& key) const {
  auto s = f_.get_string(full(key));
  if (!s) return std::nullopt;
  return *s;
}

std::optional<std::vector<int32_t>> Hparams::ints(const std::string& key) {
  const gguf::Value* v = f_.find(full(key));
  if (v == nullptr || v->type != gguf::ValueType::ARRAY) return std::nullopt;
  auto a = f_.get_i32_array(full(key));
  if (!a) {
    fail(who_ + " metadata key '" + full(key) + "': " + a.message());
    return std::nullopt;
  }
  return std::move(a).value();
}

std::vector<int64_t> Hparams::per_layer(const std::string& key, int64_t n, int64_t lo, int64_t hi,
                                        std::optional<int64_t> fallback) {
  std::vector<int64_t> v(static_cast<size_t>(std::max<int64_t>(n, 0)), fallback.value_or(0));
  if (!status_.is_ok()) return v;
  if (auto arr = ints(key)) {
    if (static_cast<int64_t>(arr->size()) != n) {
      fail(who_ + " metadata key '" + full(key) + "' has " + std::to_string(arr->size()) + " entries for " +
           std::to_string(n) + " layers");
      return v;
    }
    for (int64_t il = 0; il < n; ++il) {
      if ((*arr)[il] < lo || (*arr)[il] > hi) {
        fail(who_ + " metadata key '" + full(key) + "'[" + std::to_string(il) + "] = " + std::to_string((*arr)[il]) +
             " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
        return v;
      }
      v[il] = (*arr)[il];
    }
    return v;
  }
  const int64_t x = i(key, lo, hi, fallback);
  std::fill(v.begin(), v.end(), x);
  return v;
}

void Hparams::fail(const std::string& message) {
  if (status_.is_ok()) status_ = Status::error(message);
}

// --- configs ------------------------------------------------------------------------------
TransformerConfig standard_config(Hparams& h) {
  constexpr int64_t kMax = int64_t{1} << 20;
  const std::string w = h.who();
  TransformerConfig c;
  c.arch = h.arch();
  c.n_embd = h.i("embedding_length", 1, kMax);
  const int64_t n_layers = h.i("block_count", 1, 4096);
  if (!h.status().is_ok()) return c;
  // (Optional for MoE files: their experts have expert_feed_forward_length.) Widths and
  // head counts may be per-layer arrays.
  const bool moe = h.has("expert_count");
  const std::vector<int64_t> n_ff =
      h.per_layer("feed_forward_length", n_layers, moe ? 0 : 1, kMax, moe ? std::optional<int64_t>(0) : std::nullopt);
  const std::vector<int64_t> heads = h.per_layer("attention.head_count", n_layers, 1, 4096);
  const int64_t H = heads.empty() ? 1 : heads[0];
  std::vector<int64_t> kv_heads = heads;  // absent: as many as the query heads, layer by layer
  if (h.has("attention.head_count_kv")) kv_heads = h.per_layer("attention.head_count_kv", n_layers, 1, 4096);
  c.n_ctx_train = h.i("context_length", 1, int64_t{1} << 26);
  if (!h.status().is_ok()) return c;
  std::optional<int64_t> hd_default;
  if (c.n_embd % H == 0) hd_default = c.n_embd / H;
  const int64_t hd = h.i("attention.key_length", 2, 4096, hd_default);
  const int64_t hd_v = h.i("attention.value_length", 2, 4096, hd);
  c.eps = static_cast<float>(h.f("attention.layer_norm_rms_epsilon", 0.0, 0.5));
  RopeConfig r;
  r.base = static_cast<float>(h.f("rope.freq_base", 1.0, 1e12, 10000.0));
  r.n_rot = h.i("rope.dimension_count", 2, 4096, hd);
  // As llama.cpp: the scaling factor (or the older rope.scale_linear) divides positions
  // whatever the type says; YaRN is not implemented (longrope: factor tensors, read_longrope).
  if (auto st = h.str("rope.scaling.type"); st && *st != "none" && *st != "linear" && *st != "longrope")
    h.fail(w + " unsupported rope.scaling.type '" + *st + "' (supported: none, linear, longrope)");
  const char* factor_key = h.has("rope.scaling.factor") ? "rope.scaling.factor" : "rope.scale_linear";
  if (h.has(factor_key)) {
    const double factor = h.f(factor_key, 0.0, 1e6, std::nullopt, false);
    if (factor != 0.0) r.freq_scale = static_cast<float>(1.0 / factor);
  }
  r.mscale = static_cast<float>(h.f("rope.scaling.attn_factor", 0.0, 100.0, 1.0));
  if (!h.status().is_ok()) return c;
  if (hd_v != hd)
    h.fail(w + " attention.value_length " + std::to_string(hd_v) + " != key_length " + std::to_string(hd) +
           " is not supported");
  for (int64_t il = 0; il < n_layers; ++il)
    if (heads[il] % kv_heads[il] != 0 || hd % 2 != 0 || r.n_rot % 2 != 0 || r.n_rot > hd) {
      h.fail(w + " inconsistent hyperparameters: heads " + std::to_string(heads[il]) + ", kv heads " +
             std::to_string(kv_heads[il]) + ", head_dim " + std::to_string(hd) + ", rope dims " + std::to_string(r.n_rot) +
             " (kv heads must divide heads; head_dim and rope dims even, rope dims <= head_dim)");
      break;
    }
  const gguf::TensorInfo* te = h.file().find_tensor("token_embd.weight");
  if (te == nullptr || te->shape.size() != 2) {
    h.fail(w + " missing tensor 'token_embd.weight'");
  } else {
    c.n_vocab = te->shape[1];
    if (c.n_vocab <= 0 || c.n_vocab > (int64_t{1} << 31) - 1)
      h.fail(w + " token_embd.weight: vocabulary size " + std::to_string(c.n_vocab) + " is not usable");
  }
  if (h.status().is_ok()) {
    Status s = check_block_tensors(h.file(), n_layers, h.full("block_count"), h.who());
    if (!s.is_ok()) h.fail(s.message());
  }
  c.ropes = {r};
  c.layers.resize(static_cast<size_t>(n_layers));
  for (int64_t il = 0; il < n_layers; ++il) {
    LayerConfig& l = c.layers[il];
    l.n_heads = heads[il];
    l.n_kv_heads = kv_heads[il];
    l.head_dim = hd;
    l.n_ff = n_ff[il];
  }
  return c;
}

Result<TransformerConfig> standard_config(const gguf::GgufFile& f, const std::string& arch) {
  Hparams h(f, arch);
  TransformerConfig c = standard_config(h);
  if (!h.status().is_ok()) return h.status();
  return c;
}

namespace {

// A global rope-factor tensor [n] as f32, every factor positive and finite.
Result<std::vector<float>> rope_factors(const gguf::GgufFile& f, const char* name, int64_t n) {
  auto ff = weight_f32(f, kernels::active(), name, {n});
  if (!ff) return ff.status();
  for (float x : *ff)
    if (!(x > 0.0f) || !std::isfinite(x))
      return Status::error(std::string("[model] tensor '") + name + "': factor " + std::to_string(x) + " is not positive");
  return ff;
}

const char* const kBothFactorKinds = " both rope_freqs.weight and LongRoPE factor tensors are present";

}  // namespace

Status read_freq_factors(const gguf::GgufFile& f, RopeConfig& r) {
  if (f.find_tensor("rope_freqs.weight") == nullptr) return Status::ok();
  if (!r.freq_factors.empty()) return Status::error(std::string("[model]") + kBothFactorKinds);
  auto ff = rope_factors(f, "rope_freqs.weight", r.n_rot / 2);
  if (!ff) return ff.status();
  r.freq_factors = std::move(ff).value();
  r.tensors.push_back("rope_freqs.weight");
  return Status::ok();
}

void read_longrope(Hparams& h, RopeConfig& r, int64_t n_ctx_train) {
  const gguf::GgufFile& f = h.file();
  const bool has_short = f.find_tensor("rope_factors_short.weight") != nullptr;
  const bool has_long = f.find_tensor("rope_factors_long.weight") != nullptr;
  if (!has_short && !has_long) return;
  if (has_short != has_long) {
    h.fail(std::string(h.who()) + " missing tensor '" +
           (has_short ? "rope_factors_long.weight" : "rope_factors_short.weight") + "' (LongRoPE needs both factor sets)");
    return;
  }
  if (!r.freq_factors.empty()) {
    h.fail(h.who() + std::string(kBothFactorKinds));
    return;
  }
  r.long_context = h.i("rope.scaling.original_context_length", 1, int64_t{1} << 26, n_ctx_train);
  for (auto [name, dst] : {std::pair{"rope_factors_short.weight", &r.freq_factors},
                           std::pair{"rope_factors_long.weight", &r.freq_factors_long}}) {
    if (!h.status().is_ok()) return;
    auto ff = rope_factors(f, name, r.n_rot / 2);
    if (!ff) {
      h.fail(ff.message());
      return;
    }
    *dst = std::move(ff).value();
    r.tensors.push_back(name);
  }
}

bool has_layer_tensor(const gguf::GgufFile& f, int64_t il, const std::string& suffix) {
  return f.find_tensor("blk." + std::to_string(il) + "." + suffix) != nullptr;
}

void probe_attention_tensors(const gguf::GgufFile& f, TransformerConfig& c) {
  for (size_t il = 0; il < c.layers.size(); ++il) {
    LayerConfig& l = c.layers[il];
    const int64_t i = static_cast<int64_t>(il);
    l.fused_qkv = has_layer_tensor(f, i, "attn_qkv.weight");
    l.qkv_bias = has_layer_tensor(f, i, l.fused_qkv ? "attn_qkv.bias" : "attn_q.bias");
    l.o_bias = has_layer_tensor(f, i, "attn_output.bias");
  }
}

void read_moe(Hparams& h, TransformerConfig& c, bool required, bool expert_width_key) {
  const int64_t n_expert = h.i("expert_count", required ? 1 : 0, 4096, required ? std::nullopt : std::optional<int64_t>(0));
  if (n_expert == 0) return;
  const int64_t used = h.i("expert_used_count", 1, n_expert);
  // expert_width_key: expert_feed_forward_length, default as llama.cpp the dense width over
  // the experts used (qwen3moe); otherwise each expert has the dense width (Mixtral).
  const int64_t n_ff = c.layers.empty() ? 0 : c.layers[0].n_ff;
  int64_t n_ff_exp = n_ff;
  if (expert_width_key)
    n_ff_exp = h.i("expert_feed_forward_length", 1, int64_t{1} << 20,
                   n_ff / used > 0 ? std::optional<int64_t>(n_ff / used) : std::nullopt);
  for (LayerConfig& l : c.layers) {
    l.n_expert = n_expert;
    l.n_expert_used = used;
    l.n_ff = n_ff_exp;
  }
}

std::vector<bool> sliding_layers(Hparams& h, int64_t n_layers, int64_t default_period) {
  std::vector<bool> swa(static_cast<size_t>(n_layers), false);
  const std::string key = "attention.sliding_window_pattern";
  if (auto arr = h.ints(key)) {
    if (static_cast<int64_t>(arr->size()) < n_layers)
      h.fail(std::string(h.who()) + " metadata key '" + h.full(key) + "' has " + std::to_string(arr->size()) +
             " entries for " + std::to_string(n_layers) + " layers");
    else
      for (int64_t il = 0; il < n_layers; ++il) swa[il] = (*arr)[il] != 0;
    return swa;
  }
  const int64_t n = h.i(key, 0, 4096, default_period);
  for (int64_t il = 0; il < n_layers; ++il) swa[il] = n == 0 || il % n < n - 1;
  return swa;
}

bool register_transformer(const std::string& name, ConfigReader reader) {
  return register_architecture(name, [reader](ModelContext ctx) -> Result<std::unique_ptr<Model>> {
    auto c = reader(*ctx.file);
    if (!c) return c.status();
    return Transformer::create(std::move(ctx), std::move(c).value());
  });
}

// --- weights ------------------------------------------------------------------------------
std::vector<WeightRef> layer_weights(const TransformerConfig& c, int64_t il, LayerWeights& L) {
  const LayerConfig& lc = c.layers[static_cast<size_t>(il)];
  const std::string b = "blk." + std::to_string(il) + ".";
  const int64_t E = c.n_embd, hd = lc.head_dim, QD = lc.n_heads * hd, KD = lc.n_kv_heads * hd, F = lc.n_ff;
  std::vector<WeightRef> w;
  const auto vec = [&](const std::string& n, int64_t len, std::vector<float>* dst) {
    w.push_back(WeightRef{b + n, {len}, dst, nullptr, nullptr});
  };
  const auto mat = [&](const std::string& n, int64_t K, int64_t N, TensorView* dst) {
    w.push_back(WeightRef{b + n, {K, N}, nullptr, dst, nullptr});
  };
  const auto exps = [&](const std::string& n, int64_t K, int64_t N, std::vector<TensorView>* dst) {
    w.push_back(WeightRef{b + n, {K, N, lc.n_expert}, nullptr, nullptr, dst});
  };
  vec("attn_norm.weight", E, &L.attn_norm);
  if (lc.fused_qkv) {
    mat("attn_qkv.weight", E, QD + 2 * KD, &L.wqkv);
  } else {
    mat("attn_q.weight", E, QD, &L.wq);
    if (lc.kv_source < 0) mat("attn_k.weight", E, KD, &L.wk);
    if (lc.kv_source < 0 && !lc.v_from_k) mat("attn_v.weight", E, KD, &L.wv);
  }
  if (lc.qkv_bias && lc.fused_qkv) {
    vec("attn_qkv.bias", QD + 2 * KD, &L.bq);  // split into bq, bk, bv after loading
  } else if (lc.qkv_bias) {
    vec("attn_q.bias", QD, &L.bq);
    vec("attn_k.bias", KD, &L.bk);
    vec("attn_v.bias", KD, &L.bv);
  }
  if (lc.qk_norm) {
    vec("attn_q_norm.weight", hd, &L.q_norm);
    if (lc.kv_source < 0) vec("attn_k_norm.weight", hd, &L.k_norm);
  }
  mat("attn_output.weight", QD, E, &L.wo);
  if (lc.o_bias) vec("attn_output.bias", E, &L.bo);
  if (lc.sandwich) vec("post_attention_norm.weight", E, &L.post_attn_norm);
  vec("ffn_norm.weight", E, &L.ffn_norm);
  if (lc.n_expert > 0) {
    mat("ffn_gate_inp.weight", E, lc.n_expert, &L.router);
    exps("ffn_gate_exps.weight", E, F, &L.e_gate);
    exps("ffn_up_exps.weight", E, F, &L.e_up);
    exps("ffn_down_exps.weight", F, E, &L.e_down);
  } else if (lc.fused_gate_up) {
    mat("ffn_up.weight", E, 2 * F, &L.w_up);
    mat("ffn_down.weight", F, E, &L.w_down);
  } else {
    mat("ffn_gate.weight", E, F, &L.w_gate);
    mat("ffn_up.weight", E, F, &L.w_up);
    mat("ffn_down.weight", F, E, &L.w_down);
  }
  if (lc.sandwich) vec("post_ffw_norm.weight", E, &L.post_ffn_norm);
  if (c.n_embd_per_layer > 0) {
    mat("inp_gate.weight", E, c.n_embd_per_layer, &L.ple_gate);
    mat("proj.weight", c.n_embd_per_layer, E, &L.ple_proj);
    vec("post_norm.weight", E, &L.ple_norm);
  }
  if (lc.out_scale) vec("layer_output_scale.weight", 1, &L.out_scale);
  return w;
}

namespace {

// K's bias is rotated by RoPE with the position: its constant part is the rotation
// averaged over the first 4096 positions (the slow pairs keep it, the fast ones average
// it away); dims past n_rot and NoPE layers keep the bias. Pairs as the rope pairs them.
std::shared_ptr<const std::vector<float>> key_offset(const std::vector<float>& bk, const LayerConfig& lc,
                                                     const RopeConfig* r) {
  if (r == nullptr) return std::make_shared<const std::vector<float>>(bk);
  const bool neox = r->type == RopeType::kNeox;
  auto ko = std::make_shared<std::vector<float>>(bk);
  const int64_t half = r->n_rot / 2;
  constexpr int kSpan = 4096;
  for (int64_t i = 0; i < half; ++i) {
    double theta = std::pow(static_cast<double>(r->base), -2.0 * i / r->n_rot) * r->freq_scale;
    if (!r->freq_factors.empty()) theta /= r->freq_factors[i];
    double c = 0, sn = 0;
    for (int pos = 0; pos < kSpan; ++pos) {
      c += std::cos(pos * theta);
      sn += std::sin(pos * theta);
    }
    c /= kSpan;
    sn /= kSpan;
    const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    for (int64_t g = 0; g < lc.n_kv_heads; ++g) {
      const float b1 = bk[g * lc.head_dim + i0], b2 = bk[g * lc.head_dim + i1];
      (*ko)[g * lc.head_dim + i0] = static_cast<float>(c * b1 - sn * b2);
      (*ko)[g * lc.head_dim + i1] = static_cast<float>(sn * b1 + c * b2);
    }
  }
  return ko;
}

}  // namespace

// --- the model ----------------------------------------------------------------------------
Result<std::unique_ptr<Model>> Transformer::create(ModelContext ctx, TransformerConfig config) {
  auto m = std::make_unique<Transformer>();
  const gguf::GgufFile& f = *ctx.file;
  const kernels::KernelTable& kt = *ctx.kernels;
  TransformerConfig& c = m->c_;
  c = std::move(config);
  const std::string w = "[" + c.arch + "]";
  if (c.layers.empty() || c.n_embd <= 0 || c.n_vocab <= 0)
    return Status::error(w + " empty configuration (no layers, embedding or vocabulary)");
  for (const RopeConfig& r : c.ropes) {
    if (r.n_rot < 2 || r.n_rot % 2 != 0 || !(r.base > 0.0f) || !(r.freq_scale > 0.0f) ||
        (!r.freq_factors.empty() && static_cast<int64_t>(r.freq_factors.size()) != r.n_rot / 2) ||
        (!r.freq_factors_long.empty() && static_cast<int64_t>(r.freq_factors_long.size()) != r.n_rot / 2))
      return Status::error(w + " invalid rope configuration (rotated dims " + std::to_string(r.n_rot) + ")");
  }
  for (size_t il = 0; il < c.layers.size(); ++il) {
    LayerConfig& lc = c.layers[il];
    const std::string at = w + " layer " + std::to_string(il) + ": ";
    if (lc.n_heads < 1 || lc.n_kv_heads < 1 || lc.n_heads % lc.n_kv_heads != 0 || lc.head_dim < 2 ||
        lc.head_dim % 2 != 0 || lc.head_dim > 4096)
      return Status::error(at + "inconsistent heads " + std::to_string(lc.n_heads) + " / kv heads " +
                           std::to_string(lc.n_kv_heads) + " / head_dim " + std::to_string(lc.head_dim));
    if (lc.rope >= static_cast<int>(c.ropes.size()) || lc.rope < -1)
      return Status::error(at + "rope table " + std::to_string(lc.rope) + " does not exist");
    if (lc.rope >= 0 && c.ropes[lc.rope].n_rot > lc.head_dim)
      return Status::error(at + "rope dims " + std::to_string(c.ropes[lc.rope].n_rot) + " > head_dim " +
                           std::to_string(lc.head_dim));
    if (lc.n_ff < 1) return Status::error(at + "feed-forward width " + std::to_string(lc.n_ff));
    if (lc.n_expert > 0 && (lc.n_expert_used < 1 || lc.n_expert_used > lc.n_expert || lc.n_expert > 4096))
      return Status::error(at + "expert_used_count " + std::to_string(lc.n_expert_used) + " of " +
                           std::to_string(lc.n_expert) + " experts");
    if (lc.window < 0) return Status::error(at + "negative sliding window");
    if (lc.kv_source >= 0) {
      const LayerConfig* src = lc.kv_source < static_cast<int>(il) ? &c.layers[lc.kv_source] : nullptr;
      if (src == nullptr || src->kv_source >= 0 || src->n_kv_heads != lc.n_kv_heads || src->head_dim != lc.head_dim ||
          src->window != lc.window || src->rope != lc.rope || lc.fused_qkv)
        return Status::error(at + "shares the K/V of layer " + std::to_string(lc.kv_source) +
                             ", which is not an earlier layer of the same kind and geometry");
    }
    if (lc.attn_scale == 0.0f) lc.attn_scale = 1.0f / std::sqrt(static_cast<float>(lc.head_dim));
  }
  auto tok = weight_2d(f, kt, "token_embd.weight", c.n_embd, c.n_vocab);
  if (!tok) return tok.status();
  m->tok_embd_ = *tok;
  std::set<std::string> used = {"token_embd.weight", "output_norm.weight"};
  if (c.tied_output) {
    m->output_ = m->tok_embd_;
  } else {
    auto out = output_weight(f, kt, c.n_embd, c.n_vocab, m->tok_embd_);
    if (!out) return out.status();
    m->output_ = *out;
    used.insert("output.weight");
  }
  for (const RopeConfig& r : c.ropes) used.insert(r.tensors.begin(), r.tensors.end());
  if (c.n_embd_per_layer > 0)
    used.insert({"per_layer_token_embd.weight", "per_layer_model_proj.weight", "per_layer_proj_norm.weight"});
  if (f.find_tensor("output.bias") != nullptr) {
    used.insert("output.bias");
    auto ob = weight_1d_f32(f, kt, "output.bias", c.n_vocab);
    if (!ob) return ob.status();
    m->output_bias_ = std::move(ob).value();
  }
  auto on = weight_1d_f32(f, kt, "output_norm.weight", c.n_embd);
  if (!on) return on.status();
  m->output_norm_ = std::move(on).value();
  if (c.n_embd_per_layer > 0) {
    const int64_t LP = c.n_embd_per_layer * static_cast<int64_t>(c.layers.size());
    auto pe = weight_2d(f, kt, "per_layer_token_embd.weight", LP, c.n_vocab);
    if (!pe) return pe.status();
    m->ple_embd_ = *pe;
    auto pm = weight_2d(f, kt, "per_layer_model_proj.weight", c.n_embd, LP);
    if (!pm) return pm.status();
    m->ple_model_proj_ = *pm;
    auto pn = weight_1d_f32(f, kt, "per_layer_proj_norm.weight", c.n_embd_per_layer);
    if (!pn) return pn.status();
    m->ple_proj_norm_ = std::move(pn).value();
  }
  m->kv_kept_.assign(c.layers.size(), false);
  for (const LayerConfig& lc : c.layers)
    if (lc.kv_source >= 0) m->kv_kept_[lc.kv_source] = true;

  m->layers_.resize(c.layers.size());
  for (size_t il = 0; il < c.layers.size(); ++il) {
    LayerWeights& L = m->layers_[il];
    const LayerConfig& lc = c.layers[il];
    for (const WeightRef& r : layer_weights(c, static_cast<int64_t>(il), L)) {
      used.insert(r.name);
      if (r.vec != nullptr) {
        auto v = weight_1d_f32(f, kt, r.name, r.dims[0]);
        if (!v) return v.status();
        *r.vec = std::move(v).value();
      } else if (r.mat != nullptr) {
        auto v = weight_2d(f, kt, r.name, r.dims[0], r.dims[1]);
        if (!v) return v.status();
        *r.mat = *v;
      } else {
        auto v = expert_weights(f, kt, r.name, r.dims[0], r.dims[1], r.dims[2]);
        if (!v) return v.status();
        *r.experts = std::move(v).value();
      }
    }
    if (lc.qkv_bias && lc.fused_qkv) {
      const int64_t QD = lc.n_heads * lc.head_dim, KD = lc.n_kv_heads * lc.head_dim;
      L.bk.assign(L.bq.begin() + QD, L.bq.begin() + QD + KD);
      L.bv.assign(L.bq.begin() + QD + KD, L.bq.end());
      L.bq.resize(static_cast<size_t>(QD));
    }
    const RopeConfig* rope = lc.rope >= 0 ? &c.ropes[lc.rope] : nullptr;
    // The biases are the constant parts of K and V unless a norm follows them. A key offset
    // shifts every score of a query by one constant: exact only without soft-capping.
    if (lc.qkv_bias && !lc.qk_norm && !lc.v_norm && lc.kv_source < 0) {
      L.v_offset = std::make_shared<const std::vector<float>>(L.bv);
      if (lc.attn_softcap == 0.0f) L.k_offset = key_offset(L.bk, lc, rope);
    }
    if (lc.qk_norm && lc.kv_source < 0 && (rope == nullptr || rope->type == RopeType::kNeox))
      L.k_scale = key_scale_from_norm(L.k_norm, lc.n_kv_heads, rope != nullptr ? rope->n_rot : 0);
    if (lc.kv_source >= 0) L.k_scale = m->layers_[lc.kv_source].k_scale;  // the same stored keys
    if (lc.v_norm) L.ones.assign(static_cast<size_t>(lc.head_dim), 1.0f);
  }
  // A tensor the configuration does not read is a feature this build would silently drop (a
  // bias, an extra norm, rope factors): refuse the file, naming it (as llama.cpp's loader,
  // which counts the tensors it created).
  for (const gguf::TensorInfo& t : f.tensors())
    if (used.count(t.name) == 0)
      return Status::error(w + " tensor '" + t.name + "' is not read by the " + c.arch +
                           " configuration (an unsupported variant of the architecture)");
  m->info_.architecture = c.arch;
  if (auto nm = f.get_string("general.name")) m->info_.name = *nm;
  m->info_.n_vocab = c.n_vocab;
  m->info_.n_embd = c.n_embd;
  m->info_.n_layers = static_cast<int64_t>(c.layers.size());
  m->info_.n_ctx_train = c.n_ctx_train;
  m->kt_ = ctx.kernels;
  m->who_ = w;

  std::vector<TensorView*> mats{&m->output_};
  if (m->ple_model_proj_.data != nullptr) mats.push_back(&m->ple_model_proj_);
  size_t expert_bytes = 0, expert_used_bytes = 0;
  for (size_t il = 0; il < c.layers.size(); ++il) {
    LayerWeights& L = m->layers_[il];
    for (TensorView* v :
         {&L.wq, &L.wk, &L.wv, &L.wqkv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.router, &L.ple_gate, &L.ple_proj})
      if (v->data != nullptr) mats.push_back(v);
    for (std::vector<TensorView>* ev : {&L.e_gate, &L.e_up, &L.e_down})
      for (TensorView& v : *ev) mats.push_back(&v);
  }
  pack_weights(ctx, mats);
  note_packed(ctx, m->info_);
  // A decode step reads only the experts it routes to: count n_expert_used of n_expert.
  for (size_t il = 0; il < c.layers.size(); ++il) {
    const LayerConfig& lc = c.layers[il];
    for (std::vector<TensorView>* ev : {&m->layers_[il].e_gate, &m->layers_[il].e_up, &m->layers_[il].e_down})
      for (const TensorView& v : *ev) {
        const kernels::TypeKernels& tk = kt.of(v.dtype);
        const size_t b = v.packed != nullptr ? tk.packed_bytes(v.rows, v.cols) : v.row_stride * v.rows;
        expert_bytes += b;
        expert_used_bytes += b * static_cast<size_t>(lc.n_expert_used) / static_cast<size_t>(lc.n_expert);
      }
  }
  m->info_.matmul_bytes -= expert_bytes - expert_used_bytes;
  m->ctx_ = std::move(ctx);
  return std::unique_ptr<Model>(std::move(m));
}

std::vector<LayerSpec> Transformer::layer_specs() const {
  std::vector<LayerSpec> specs(c_.layers.size());
  for (size_t il = 0; il < specs.size(); ++il) {
    const LayerConfig& lc = c_.layers[il];
    specs[il].attention = attention_spec(lc.n_kv_heads, lc.head_dim, lc.window);
    specs[il].attention.key_scale = layers_[il].k_scale;
    specs[il].attention.key_offset = layers_[il].k_offset;
    specs[il].attention.value_offset = layers_[il].v_offset;
  }
  return specs;
}

void Transformer::rows(int64_t M, const std::function<void(int64_t, int64_t)>& fn) { parallel_rows(*ctx_.pool, M, fn); }

void Transformer::ensure_buffers(int64_t M) {
  if (M <= cap_m_) return;
  int64_t QD = 0, KD = 0, QKV = 0, F = 0, FG = 0;
  for (const LayerConfig& lc : c_.layers) {
    QD = std::max(QD, lc.n_heads * lc.head_dim);
    KD = std::max(KD, lc.n_kv_heads * lc.head_dim);
    if (lc.fused_qkv) QKV = std::max(QKV, (lc.n_heads + 2 * lc.n_kv_heads) * lc.head_dim);
    if (lc.n_expert == 0) F = std::max(F, lc.n_ff);
    FG = std::max(FG, lc.fused_gate_up ? 2 * lc.n_ff : lc.n_ff);
  }
  const int64_t E = c_.n_embd;
  const auto sz = [M](int64_t w) { return static_cast<size_t>(M * w); };
  x_.assign(sz(E), 0); xn_.assign(sz(E), 0); o_.assign(sz(E), 0);
  q_.assign(sz(QD), 0); attn_.assign(sz(QD), 0);
  k_.assign(sz(KD), 0); v_.assign(sz(KD), 0);
  qkv_.assign(sz(QKV), 0);
  gate_.assign(sz(std::max(F, FG)), 0); up_.assign(sz(F), 0);
  k_kept_.resize(c_.layers.size());
  v_kept_.resize(c_.layers.size());
  for (size_t il = 0; il < c_.layers.size(); ++il)
    if (kv_kept_[il]) {
      k_kept_[il].assign(sz(c_.layers[il].n_kv_heads * c_.layers[il].head_dim), 0);
      v_kept_[il].assign(sz(c_.layers[il].n_kv_heads * c_.layers[il].head_dim), 0);
    }
  if (c_.n_embd_per_layer > 0) {
    const int64_t P = c_.n_embd_per_layer, LP = P * static_cast<int64_t>(c_.layers.size());
    ple_.assign(sz(LP), 0);
    pt_.assign(sz(LP), 0);
    pg_.assign(sz(P), 0);
  }
  cos_.resize(c_.ropes.size());
  sin_.resize(c_.ropes.size());
  for (size_t r = 0; r < c_.ropes.size(); ++r) {
    cos_[r].assign(sz(c_.ropes[r].n_rot / 2), 0);
    sin_[r].assign(sz(c_.ropes[r].n_rot / 2), 0);
  }
  cap_m_ = M;
}

Status Transformer::forward(const Batch& batch, StateRows& state, Tensor& hidden) {
  const std::string& who = who_;
  const int64_t n_layers = static_cast<int64_t>(c_.layers.size());
  if (state.n_layers() != n_layers)
    return Status::error(who + " state has " + std::to_string(state.n_layers()) + " layers, the model " +
                         std::to_string(n_layers));
  SPECULA_RETURN_IF_ERROR(plan_batch(batch, state, c_.n_vocab, who.c_str(), layout_));
  const int64_t M = layout_.M;
  ensure_buffers(M);
  lora_ = any_lora(batch) ? batch.lora : nullptr;
  if (lora_ != nullptr)
    for (int32_t b = 0; b < batch.B; ++b)
      if (lora_[b] != nullptr)
        for (const LoraWeight& w : lora_[b]->adapters)
          if (w.adapter == nullptr || w.adapter->base_id() != instance_id())
            return Status::error(who + " a LoRA adapter of row " + std::to_string(b) +
                                 " was not loaded for this model (Model::load_lora)");
  const int64_t E = c_.n_embd;
  const int32_t* pos = layout_.pos.data();
  SPECULA_RETURN_IF_ERROR(check_taps(batch, n_layers, who.c_str()));
  if (batch.n_taps > 0) {
    const std::vector<int64_t> shape{M, batch.n_taps, E};
    if (batch.taps->shape() != shape) *batch.taps = Tensor(shape);
  }

  ops::get_rows(*kt_, tok_embd_, batch.ids, M, c_.embd_scale, x_.data());
  if (c_.n_embd_per_layer > 0) per_layer_inputs(batch, M);
  for (size_t r = 0; r < c_.ropes.size(); ++r) {
    const RopeConfig& rc = c_.ropes[r];
    const bool use_long = !rc.freq_factors_long.empty() && state.max_length() > rc.long_context;
    const std::vector<float>& ff = use_long ? rc.freq_factors_long : rc.freq_factors;
    ops::rope_table(pos, M, rc.n_rot, rc.base, rc.freq_scale, cos_[r].data(), sin_[r].data(),
                    ff.empty() ? nullptr : ff.data());
    if (rc.mscale != 1.0f)
      for (int64_t i = 0; i < M * (rc.n_rot / 2); ++i) {
        cos_[r][i] *= rc.mscale;
        sin_[r][i] *= rc.mscale;
      }
  }
  for (int64_t il = 0; il < n_layers; ++il) {
    const LayerConfig& lc = c_.layers[il];
    const LayerWeights& L = layers_[il];
    tap(batch, il, M);
    rows(M, [&](int64_t a, int64_t b) {
      ops::rms_norm(x_.data() + a * E, L.attn_norm.data(), b - a, E, c_.eps, xn_.data() + a * E);
    });
    attention_block(il, batch, state);
    rows(M, [&](int64_t a, int64_t b) {
      if (lc.sandwich) ops::rms_norm(o_.data() + a * E, L.post_attn_norm.data(), b - a, E, c_.eps, o_.data() + a * E);
      for (int64_t i = a * E; i < b * E; ++i) x_[i] += o_[i];
      ops::rms_norm(x_.data() + a * E, L.ffn_norm.data(), b - a, E, c_.eps, xn_.data() + a * E);
    });
    if (lc.n_expert > 0)
      ffn_moe(lc, L, M);
    else
      ffn_dense(il, lc, L, M);
    rows(M, [&](int64_t a, int64_t b) {
      if (lc.sandwich) ops::rms_norm(o_.data() + a * E, L.post_ffn_norm.data(), b - a, E, c_.eps, o_.data() + a * E);
      for (int64_t i = a * E; i < b * E; ++i) x_[i] += o_[i];
    });
    if (c_.n_embd_per_layer > 0) per_layer_step(il, M);
    if (lc.out_scale)
      rows(M, [&](int64_t a, int64_t b) {
        for (int64_t i = a * E; i < b * E; ++i) x_[i] *= L.out_scale[0];
      });
  }
  tap(batch, n_layers, M);
  for (int32_t b = 0; b < batch.B; ++b) state.advance(batch.rows[b], batch.tokens_of(b));
  if (hidden.shape().size() != 2 || hidden.dim(0) != M || hidden.dim(1) != E) hidden = Tensor({M, E});
  ops::rms_norm(x_.data(), output_norm_.data(), M, E, c_.eps, hidden.data());
  return Status::ok();
}

void Transformer::tap(const Batch& batch, int64_t il, int64_t M) {
  for (int32_t j = 0; j < batch.n_taps; ++j)
    if (batch.tap_layers[j] == il) copy_tap(x_.data(), M, c_.n_embd, j, batch.n_taps, batch.taps->data());
}

void Transformer::attention_block(int64_t il, const Batch& batch, StateRows& state) {
  const LayerConfig& lc = c_.layers[il];
  const LayerWeights& L = layers_[il];
  ThreadPool& pool = *ctx_.pool;
  const kernels::KernelTable& kt = *kt_;
  const int64_t M = layout_.M, E = c_.n_embd;
  const int64_t hd = lc.head_dim, nh = lc.n_heads, nkv = lc.n_kv_heads, QD = nh * hd, KD = nkv * hd;
  if (lc.fused_qkv) {
    ops::matmul(pool, kt, L.wqkv, xn_.data(), M, qkv_.data(), ws_);
    const int64_t W = QD + 2 * KD;
    add_lora(il, LoraTarget::kQKV, xn_.data(), E, qkv_.data(), W);
    rows(M, [&](int64_t a, int64_t b) {
      for (int64_t m = a; m < b; ++m) {
        const float* s = qkv_.data() + m * W;
        std::copy(s, s + QD, q_.data() + m * QD);
        std::copy(s + QD, s + QD + KD, k_.data() + m * KD);
        std::copy(s + QD + KD, s + W, v_.data() + m * KD);
      }
    });
  } else {
    if (lc.kv_source >= 0)
      ops::matmul(pool, kt, L.wq, xn_.data(), M, q_.data(), ws_);
    else if (lc.v_from_k)
      ops::matmul_many(pool, kt, xn_.data(), M, {{&L.wq, q_.data()}, {&L.wk, k_.data()}}, ws_);
    else
      ops::matmul_many(pool, kt, xn_.data(), M, {{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}}, ws_);
    add_lora(il, LoraTarget::kQ, xn_.data(), E, q_.data(), QD);
    if (lc.kv_source < 0) {
      add_lora(il, LoraTarget::kK, xn_.data(), E, k_.data(), KD);
      if (lc.v_from_k)
        std::copy(k_.data(), k_.data() + M * KD, v_.data());
      else
        add_lora(il, LoraTarget::kV, xn_.data(), E, v_.data(), KD);
    }
  }
  const RopeConfig* rope = lc.rope >= 0 ? &c_.ropes[lc.rope] : nullptr;
  const bool own_kv = lc.kv_source < 0;
  rows(M, [&](int64_t a, int64_t b) {
    if (lc.qkv_bias) {
      for (int64_t m = a; m < b; ++m) {
        float* q = q_.data() + m * QD;
        float* k = k_.data() + m * KD;
        float* v = v_.data() + m * KD;
        for (int64_t i = 0; i < QD; ++i) q[i] += L.bq[i];
        for (int64_t i = 0; i < KD; ++i) k[i] += L.bk[i];
        for (int64_t i = 0; i < KD; ++i) v[i] += L.bv[i];
      }
    }
    if (lc.qk_norm) {
      ops::rms_norm(q_.data() + a * QD, L.q_norm.data(), (b - a) * nh, hd, c_.eps, q_.data() + a * QD);
      if (own_kv) ops::rms_norm(k_.data() + a * KD, L.k_norm.data(), (b - a) * nkv, hd, c_.eps, k_.data() + a * KD);
    }
    if (lc.v_norm && own_kv)
      ops::rms_norm(v_.data() + a * KD, L.ones.data(), (b - a) * nkv, hd, c_.eps, v_.data() + a * KD);
    if (rope != nullptr) {
      const int64_t half = rope->n_rot / 2;
      const float* cs = cos_[lc.rope].data() + a * half;
      const float* sn = sin_[lc.rope].data() + a * half;
      if (rope->type == RopeType::kNeox) {
        ops::rope_neox_partial(q_.data() + a * QD, b - a, nh, hd, rope->n_rot, cs, sn);
        if (own_kv) ops::rope_neox_partial(k_.data() + a * KD, b - a, nkv, hd, rope->n_rot, cs, sn);
      } else {
        ops::rope_norm(q_.data() + a * QD, b - a, nh, hd, rope->n_rot, cs, sn);
        if (own_kv) ops::rope_norm(k_.data() + a * KD, b - a, nkv, hd, rope->n_rot, cs, sn);
      }
    }
  });
  // Shared KV: keep this layer's step K/V for the layers that read them, or take them.
  if (kv_kept_[il]) {
    std::copy(k_.data(), k_.data() + M * KD, k_kept_[il].data());
    std::copy(v_.data(), v_.data() + M * KD, v_kept_[il].data());
  } else if (!own_kv) {
    std::copy(k_kept_[lc.kv_source].data(), k_kept_[lc.kv_source].data() + M * KD, k_.data());
    std::copy(v_kept_[lc.kv_source].data(), v_kept_[lc.kv_source].data() + M * KD, v_.data());
  }
  AttentionArgs aa;
  aa.layer = il;
  aa.n_heads = nh;
  aa.n_kv_heads = nkv;
  aa.head_dim = hd;
  aa.scale = lc.attn_scale;
  aa.softcap = lc.attn_softcap;
  aa.M = M;
  aa.B = batch.B;
  aa.rows = batch.rows;
  aa.offset = layout_.offset.data();
  aa.token_row = layout_.token_row.data();
  aa.kt = &kt;
  attention(pool, aa, state, q_.data(), k_.data(), v_.data(), attn_.data(), attn_scratch_);
  ops::matmul(pool, kt, L.wo, attn_.data(), M, o_.data(), ws_);
  add_lora(il, LoraTarget::kO, attn_.data(), QD, o_.data(), E);
  if (lc.o_bias)
    rows(M, [&](int64_t a, int64_t b) {
      for (int64_t m = a; m < b; ++m)
        for (int64_t i = 0; i < E; ++i) o_[m * E + i] += L.bo[i];
    });
}

void Transformer::per_layer_inputs(const Batch& batch, int64_t M) {
  // ple_[m, il, :] = (RMSNorm(model_proj · x0 / sqrt(E)) + embd[tok] * sqrt(P)) / sqrt(2), x0
  // the scaled token embedding (x_ on entry).
  const int64_t P = c_.n_embd_per_layer, NL = static_cast<int64_t>(c_.layers.size()), LP = P * NL;
  ops::get_rows(*kt_, ple_embd_, batch.ids, M, std::sqrt(static_cast<float>(P)), pt_.data());
  ops::matmul(*ctx_.pool, *kt_, ple_model_proj_, x_.data(), M, ple_.data(), ws_);
  const float proj_scale = 1.0f / std::sqrt(static_cast<float>(c_.n_embd));
  const float input_scale = 1.0f / std::sqrt(2.0f);
  rows(M, [&](int64_t a, int64_t b) {
    for (int64_t i = a * LP; i < b * LP; ++i) ple_[i] *= proj_scale;
    ops::rms_norm(ple_.data() + a * LP, ple_proj_norm_.data(), (b - a) * NL, P, c_.eps, ple_.data() + a * LP);
    for (int64_t i = a * LP; i < b * LP; ++i) ple_[i] = (ple_[i] + pt_[i]) * input_scale;
  });
}

void Transformer::per_layer_step(int64_t il, int64_t M) {
  // x += RMSNorm(proj · (gelu_tanh(inp_gate · x) * ple_[:, il, :]), post_norm)
  const LayerWeights& L = layers_[il];
  const int64_t P = c_.n_embd_per_layer, LP = P * static_cast<int64_t>(c_.layers.size()), E = c_.n_embd;
  ops::matmul(*ctx_.pool, *kt_, L.ple_gate, x_.data(), M, pg_.data(), ws_);
  rows(M, [&](int64_t a, int64_t b) {
    for (int64_t m = a; m < b; ++m) kt_->gelu_tanh_mul(P, pg_.data() + m * P, ple_.data() + m * LP + il * P, pg_.data() + m * P);
  });
  ops::matmul(*ctx_.pool, *kt_, L.ple_proj, pg_.data(), M, o_.data(), ws_);
  rows(M, [&](int64_t a, int64_t b) {
    ops::rms_norm(o_.data() + a * E, L.ple_norm.data(), b - a, E, c_.eps, o_.data() + a * E);
    for (int64_t i = a * E; i < b * E; ++i) x_[i] += o_[i];
  });
}

void Transformer::ffn_dense(int64_t il, const LayerConfig& lc, const LayerWeights& L, int64_t M) {
  ThreadPool& pool = *ctx_.pool;
  const kernels::KernelTable& kt = *kt_;
  const int64_t F = lc.n_ff;
  float* act = gate_.data();  // act(gate) * up, [M, F]
  if (lc.fused_gate_up) {
    ops::matmul(pool, kt, L.w_up, xn_.data(), M, gate_.data(), ws_);  // [M, 2F]: gate | up
    add_lora(il, LoraTarget::kUp, xn_.data(), c_.n_embd, gate_.data(), 2 * F);
    act = up_.data();
    rows(M, [&](int64_t a, int64_t b) {
      for (int64_t m = a; m < b; ++m) {
        const float* g = gate_.data() + m * 2 * F;
        if (lc.act == Activation::kSilu)
          ops::silu_mul(F, g, g + F, up_.data() + m * F);
        else
          kt.gelu_tanh_mul(F, g, g + F, up_.data() + m * F);
      }
    });
  } else {
    ops::matmul_many(pool, kt, xn_.data(), M, {{&L.w_gate, gate_.data()}, {&L.w_up, up_.data()}}, ws_);
    add_lora(il, LoraTarget::kGate, xn_.data(), c_.n_embd, gate_.data(), F);
    add_lora(il, LoraTarget::kUp, xn_.data(), c_.n_embd, up_.data(), F);
    if (lc.act == Activation::kSilu) {
      // Split the elementwise SwiGLU over all M*F elements (decode has M = 1).
      pool.run([&](int ith, int nth) {
        auto [a, b] = ThreadPool::split(M * F, ith, nth);
        if (a < b) ops::silu_mul(b - a, gate_.data() + a, up_.data() + a, gate_.data() + a);
      });
    } else {
      rows(M, [&](int64_t a, int64_t b) {
        kt.gelu_tanh_mul((b - a) * F, gate_.data() + a * F, up_.data() + a * F, gate_.data() + a * F);
      });
    }
  }
  ops::matmul(pool, kt, L.w_down, act, M, o_.data(), ws_);
  add_lora(il, LoraTarget::kDown, act, F, o_.data(), c_.n_embd);
}

void Transformer::add_lora(int64_t il, LoraTarget t, const float* x, int64_t n_in, float* y, int64_t n_out) {
  if (lora_ == nullptr) return;
  apply_lora(*ctx_.pool, *kt_, lora_, layout_.offset.data(), static_cast<int32_t>(layout_.offset.size()) - 1, il, t, x,
             n_in, y, n_out, lora_scratch_);
}

Result<std::shared_ptr<const LoraAdapter>> Transformer::load_lora(const std::string& path) const {
  return LoraAdapter::load(path, c_, *kt_, this);
}

void Transformer::ffn_moe(const LayerConfig& lc, const LayerWeights& L, int64_t M) {
  ThreadPool& pool = *ctx_.pool;
  const kernels::KernelTable& kt = *kt_;
  const int64_t E = c_.n_embd, F = lc.n_ff, NE = lc.n_expert, K = lc.n_expert_used;
  const auto grow = [](auto& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  };
  grow(probs_, M * NE);
  grow(topw_, M * K);
  grow(topi_, M * K);
  grow(ey_, M * K * E);
  // Router: softmax over the experts, the k most probable (ties: lower index), their
  // probabilities renormalised when norm_topk.
  ops::matmul(pool, kt, L.router, xn_.data(), M, probs_.data(), ws_);
  rows(M, [&](int64_t a, int64_t b) {
    thread_local std::vector<int32_t> idx;
    idx.resize(static_cast<size_t>(NE));
    for (int64_t m = a; m < b; ++m) {
      float* p = probs_.data() + m * NE;
      const float mx = *std::max_element(p, p + NE);
      const float inv = 1.0f / kt.exp_sub_sum(NE, mx, p);
      for (int64_t e = 0; e < NE; ++e) p[e] *= inv;
      std::iota(idx.begin(), idx.end(), 0);
      std::partial_sort(idx.begin(), idx.begin() + K, idx.end(),
                        [p](int32_t x, int32_t y) { return p[x] > p[y] || (p[x] == p[y] && x < y); });
      float sum = 0.0f;
      for (int64_t r = 0; r < K; ++r) {
        topi_[m * K + r] = idx[r];
        topw_[m * K + r] = p[idx[r]];
        sum += p[idx[r]];
      }
      if (lc.norm_topk)
        for (int64_t r = 0; r < K; ++r) topw_[m * K + r] /= sum;
      if (lc.expert_scale != 0.0f && lc.expert_scale != 1.0f)
        for (int64_t r = 0; r < K; ++r) topw_[m * K + r] *= lc.expert_scale;
    }
  });
  // Each expert runs once on the tokens routed to it (gathered rows); its output rows go to
  // (token, rank) slots, so how tokens are grouped never changes a token's result.
  routed_.resize(static_cast<size_t>(NE));
  for (auto& r : routed_) r.clear();
  for (int64_t i = 0; i < M * K; ++i) routed_[topi_[i]].push_back(i);
  for (int64_t e = 0; e < NE; ++e) {
    const std::vector<int64_t>& slots = routed_[e];
    const int64_t n = static_cast<int64_t>(slots.size());
    if (n == 0) continue;
    grow(xg_, n * E);
    grow(eg_, n * F);
    grow(eu_, n * F);
    grow(eo_, n * E);
    for (int64_t i = 0; i < n; ++i)
      std::copy(xn_.data() + (slots[i] / K) * E, xn_.data() + (slots[i] / K + 1) * E, xg_.data() + i * E);
    ops::matmul(pool, kt, L.e_gate[e], xg_.data(), n, eg_.data(), ws_);
    ops::matmul(pool, kt, L.e_up[e], xg_.data(), n, eu_.data(), ws_);
    if (lc.act == Activation::kSilu) {
      pool.run([&](int ith, int nth) {
        auto [a, b] = ThreadPool::split(n * F, ith, nth);
        if (a < b) ops::silu_mul(b - a, eg_.data() + a, eu_.data() + a, eg_.data() + a);
      });
    } else {
      rows(n, [&](int64_t a, int64_t b) {
        kt.gelu_tanh_mul((b - a) * F, eg_.data() + a * F, eu_.data() + a * F, eg_.data() + a * F);
      });
    }
    ops::matmul(pool, kt, L.e_down[e], eg_.data(), n, eo_.data(), ws_);
    for (int64_t i = 0; i < n; ++i) std::copy(eo_.data() + i * E, eo_.data() + (i + 1) * E, ey_.data() + slots[i] * E);
  }
  // o = sum over ranks, in rank order, of weight * expert output.
  rows(M, [&](int64_t a, int64_t b) {
    for (int64_t m = a; m < b; ++m) {
      float* o = o_.data() + m * E;
      for (int64_t r = 0; r < K; ++r) {
        const float w = topw_[m * K + r];
        const float* y = ey_.data() + (m * K + r) * E;
        if (r == 0)
          for (int64_t i = 0; i < E; ++i) o[i] = w * y[i];
        else
          for (int64_t i = 0; i < E; ++i) o[i] += w * y[i];
      }
    }
  });
}

void Transformer::project_logits(const float* hidden, int64_t n, float* logits) {
  ops::matmul(*ctx_.pool, *kt_, output_, hidden, n, logits, ws_);
  const int64_t V = c_.n_vocab;
  if (!output_bias_.empty())
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < V; ++i) logits[r * V + i] += output_bias_[i];
  if (c_.final_softcap > 0.0f) {
    const float cap = c_.final_softcap;
    for (int64_t i = 0; i < n * V; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
  }
}

}  // namespace specula
