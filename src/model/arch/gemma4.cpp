// model/arch/gemma4.cpp — Gemma 4 dense models (llama.cpp's `gemma4` GGUF architecture: the
// E2B/E4B and 31B layouts): a configuration of the shared transformer blocks (model/blocks.h).
//
// Architecture (Google's Gemma 4 release; llama.cpp's gemma4 loader and graph, and its
// converter for the proportional RoPE): embeddings scaled by sqrt(n_embd); sandwich blocks
// with per-head RMSNorm of Q and K and a weightless RMSNorm of V (V is the K projection
// when attn_v is absent); no query scaling (attention scale 1); sliding-window layers as the
// per-layer bool array attention.sliding_window_pattern says, with their own head size
// (attention.key_length_swa), rope dims (rope.dimension_count_swa) and base
// (rope.freq_base_swa, default 10000); full layers with attention.key_length, NEOX RoPE with
// rope_freqs.weight (proportional RoPE: factors of 1e30 freeze the pairs past the rotated
// fraction); GELU-tanh gated FFN (per-layer widths); per-layer inputs
// (embedding_length_per_layer_input, model/blocks.h); the last attention.shared_kv_layers
// layers reuse the K/V of the last sliding and full layers before them; optional
// layer_output_scale; final logits soft-capped (final_logit_softcapping, default 30).
// Does not support the MoE variant (26B-A4B: its ffn_gate_inp tensors are refused by name)
// or the vision / audio towers.
// Hugging Face folders: Gemma4ForCausalLM and Gemma4ForConditionalGeneration's text model
// (formats/hf_folder.h), mapped below.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include <nlohmann/json.hpp>

#include "model/blocks.h"
#include "formats/hf_folder.h"

namespace specula {
namespace {

Result<TransformerConfig> gemma4_config(const gguf::GgufFile& f) {
  Hparams h(f, "gemma4");
  TransformerConfig c = standard_config(h);
  const int64_t n_layers = static_cast<int64_t>(c.layers.size());
  if (h.status().is_ok() && !h.ints("attention.sliding_window_pattern"))
    h.fail("[gemma4] missing metadata key 'gemma4.attention.sliding_window_pattern' (a per-layer bool array)");
  const std::vector<bool> sliding = sliding_layers(h, n_layers, 0);
  const int64_t window = h.i("attention.sliding_window", 1, int64_t{1} << 30);
  const int64_t hd_swa = h.i("attention.key_length_swa", 2, 4096);
  const int64_t hd_swa_v = h.i("attention.value_length_swa", 2, 4096, hd_swa);
  const int64_t n_rot_swa = h.i("rope.dimension_count_swa", 2, 4096, hd_swa);
  const float base_swa = static_cast<float>(h.f("rope.freq_base_swa", 1.0, 1e12, 10000.0));
  c.n_embd_per_layer = h.i("embedding_length_per_layer_input", 0, 1 << 16, 0);
  const int64_t shared = h.i("attention.shared_kv_layers", 0, n_layers, 0);
  c.final_softcap = static_cast<float>(h.f("final_logit_softcapping", 0.0, 1e6, 30.0, false));
  if (!h.status().is_ok()) return h.status();
  if (hd_swa_v != hd_swa || hd_swa % 2 != 0 || n_rot_swa % 2 != 0 || n_rot_swa > hd_swa)
    return Status::error("[gemma4] sliding layers: key_length_swa " + std::to_string(hd_swa) + ", value_length_swa " +
                         std::to_string(hd_swa_v) + ", rope dims " + std::to_string(n_rot_swa) +
                         " (must be equal, even, rope dims <= head size)");
  c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
  RopeConfig swa = c.ropes[0];
  swa.base = base_swa;
  swa.n_rot = n_rot_swa;
  swa.freq_scale = 1.0f;
  c.ropes.push_back(swa);  // [0] full layers, [1] sliding layers
  bool any_full = false;
  for (bool s : sliding) any_full = any_full || !s;
  if (any_full) {
    if (f.find_tensor("rope_freqs.weight") == nullptr)
      return Status::error("[gemma4] missing tensor 'rope_freqs.weight' (the full layers' proportional RoPE)");
    SPECULA_RETURN_IF_ERROR(read_freq_factors(f, c.ropes[0]));
  }
  // Shared KV: layers from kv_from on read the last sliding (kv_from - 2) or full
  // (kv_from - 1) layer's K/V.
  const int64_t kv_from = n_layers - shared;
  if (shared > 0 && (kv_from < 2 || !sliding[kv_from - 2] || sliding[kv_from - 1]))
    return Status::error("[gemma4] attention.shared_kv_layers " + std::to_string(shared) +
                         ": the two layers before the shared ones must be a sliding and a full layer");
  for (int64_t il = 0; il < n_layers; ++il) {
    LayerConfig& l = c.layers[il];
    if (sliding[il]) {
      l.head_dim = hd_swa;
      l.window = window;
      l.rope = 1;
    }
    l.qk_norm = l.v_norm = l.sandwich = true;
    l.act = Activation::kGeluTanh;
    l.attn_scale = 1.0f;
    if (il >= kv_from) l.kv_source = static_cast<int>(sliding[il] ? kv_from - 2 : kv_from - 1);
    l.fused_qkv = has_layer_tensor(f, il, "attn_qkv.weight");
    l.v_from_k = l.kv_source < 0 && !l.fused_qkv && !has_layer_tensor(f, il, "attn_v.weight");
    l.out_scale = has_layer_tensor(f, il, "layer_output_scale.weight");
  }
  return c;
}

const bool kRegistered = register_transformer("gemma4", &gemma4_config);

// config.json (Gemma4TextConfig, or Gemma4Config's text_config), as llama.cpp's converter
// (conversion/gemma.py Gemma4Model, over Gemma3Model and TextModel) writes it:
//   hidden_size, num_hidden_layers, intermediate_size (x 2 on the KV-shared layers with
//   use_double_wide_mlp: a per-layer array), num_attention_heads (default 8),
//   max_position_embeddings (131072), rms_norm_eps (1e-6);
//   head_dim -> key/value_length_swa; global_head_dim (else the full layers' head_dim in
//   per_layer_config) -> key/value_length and rope.dimension_count;
//   num_key_value_heads (4) -> head_count_kv, a per-layer array when num_global_key_value_heads
//   (else the full layers' num_key_value_heads in per_layer_config) is given;
//   layer_types -> attention.sliding_window_pattern; sliding_window; num_kv_shared_layers ->
//   attention.shared_kv_layers; hidden_size_per_layer_input (or 0) ->
//   embedding_length_per_layer_input; final_logit_softcapping;
//   rope_parameters.full_attention: rope_type "proportional", rope_theta (1e6) ->
//   rope.freq_base, partial_rotary_factor -> rope_freqs.weight (1 for the first
//   int(global_head_dim * factor / 2) pairs, 1e30 for the rest: those do not rotate);
//   rope_parameters.sliding_attention.rope_theta -> rope.freq_base_swa;
//   rope.dimension_count_swa = head_dim * rope_parameters.partial_rotary_factor (1).
// Norm gains as stored (Gemma 4's RMSNorm multiplies by w, not 1 + w: the converter's
// norm_shift is 0). Refused: the MoE variant (enable_moe_block), attention biases, another
// activation than gelu_pytorch_tanh, bidirectional attention ("all"), attention soft-capping,
// no final soft-capping (null or 0: the converter then writes no key and llama.cpp caps at 30),
// a last layer that is not full_attention (transformers forces it to full; the converter
// would not), rope types other than proportional (full) / default (sliding).
void gemma4_hf(hf::Config& cfg, hf::Conversion& c) {
  const int64_t n_layers = cfg.i("num_hidden_layers", 1, 4096);
  const int64_t n_embd = cfg.i("hidden_size", 1, int64_t{1} << 20);
  const int64_t n_ff = cfg.i("intermediate_size", 1, int64_t{1} << 24);
  const int64_t n_heads = cfg.i("num_attention_heads", 1, 4096, 8);
  const int64_t n_kv = cfg.i("num_key_value_heads", 1, 4096, 4);
  const int64_t head_dim = cfg.i("head_dim", 2, 4096);
  const int64_t n_shared = cfg.i("num_kv_shared_layers", 0, 4096);
  if (cfg.b("enable_moe_block", false))
    cfg.fail("'enable_moe_block': the Gemma 4 MoE variant (e.g. 26B-A4B) is not supported");
  if (cfg.b("attention_bias", false)) cfg.fail("'attention_bias': true is not supported for gemma4");
  if (const std::string act = cfg.s("hidden_activation", "gelu_pytorch_tanh"); act != "gelu_pytorch_tanh")
    cfg.fail("'hidden_activation' " + act + " is not supported (gelu_pytorch_tanh)");
  if (cfg.s("use_bidirectional_attention", "") == "all")
    cfg.fail("'use_bidirectional_attention': \"all\" (non-causal) is not supported");
  if (cfg.has("attn_logit_softcapping")) cfg.fail("'attn_logit_softcapping' is not supported for gemma4");
  if (!cfg.has("final_logit_softcapping") || cfg.f("final_logit_softcapping", 0.0, 1e6, 0.0) == 0.0)
    cfg.fail("'final_logit_softcapping' null or 0 (no capping) is not supported: the converter writes no key "
             "and the GGUF graph then caps at 30");
  if (!cfg.status().is_ok()) return;
  if (n_shared >= n_layers) return cfg.fail("'num_kv_shared_layers' must be less than num_hidden_layers");

  // Layer pattern.
  std::vector<bool> swa;
  if (auto types = cfg.strings("layer_types")) {
    for (const std::string& t : *types) {
      if (t != "sliding_attention" && t != "full_attention") cfg.fail("'layer_types': unknown entry '" + t + "'");
      swa.push_back(t == "sliding_attention");
    }
  } else if (cfg.status().is_ok()) {
    cfg.fail("missing 'layer_types' (sliding_attention / full_attention per layer)");
  }
  if (!cfg.status().is_ok()) return;
  if (static_cast<int64_t>(swa.size()) != n_layers) return cfg.fail("'layer_types' must have num_hidden_layers entries");
  if (swa.back()) return cfg.fail("'layer_types': the last layer must be full_attention");

  // Full layers' head size and KV heads: global_* keys, else per_layer_config's full layers
  // (all of which must agree).
  std::optional<int64_t> hd_full, kv_full;
  if (cfg.has("global_head_dim")) hd_full = cfg.i("global_head_dim", 2, 4096);
  if (cfg.has("num_global_key_value_heads")) kv_full = cfg.i("num_global_key_value_heads", 1, 4096);
  if (const nlohmann::json* plc = cfg.object("per_layer_config")) {
    for (auto it = plc->begin(); it != plc->end(); ++it) {
      const std::string& k = it.key();
      if (k.empty() || k.size() > 5 || !std::all_of(k.begin(), k.end(), ::isdigit) || !it->is_object())
        return cfg.bad("per_layer_config", "an object of layer index -> {\"head_dim\", \"num_key_value_heads\"}", *plc);
      const int64_t il = std::stoll(k);
      if (il >= n_layers || swa[il]) continue;  // the converter reads only full layers' entries
      for (auto [field, dst, lo] : {std::tuple{"head_dim", &hd_full, 2}, std::tuple{"num_key_value_heads", &kv_full, 1}}) {
        if (field == std::string("head_dim") ? cfg.has("global_head_dim") : cfg.has("num_global_key_value_heads")) continue;
        auto f = it->find(field);
        if (f == it->end() || f->is_null()) continue;
        if (!f->is_number_integer() || f->get<int64_t>() < lo || f->get<int64_t>() > 4096)
          return cfg.bad("per_layer_config." + k + "." + field, "an integer in [" + std::to_string(lo) + ", 4096]", *f);
        if (dst->has_value() && **dst != f->get<int64_t>())
          return cfg.fail(std::string("'per_layer_config': full layers with different ") + field + " are not supported");
        *dst = f->get<int64_t>();
      }
    }
  }
  if (!hd_full) return cfg.fail("missing 'global_head_dim' (or a full layer's head_dim in 'per_layer_config')");

  // RoPE: rope_parameters {"full_attention": {...}, "sliding_attention": {...}}.
  const nlohmann::json* rp = cfg.object("rope_parameters");
  const auto sub = [&](const char* k) -> const nlohmann::json* {
    if (rp == nullptr) return nullptr;
    auto it = rp->find(k);
    return it != rp->end() && it->is_object() ? &*it : nullptr;
  };
  const auto num = [&](const nlohmann::json* o, const std::string& where, const char* k, std::optional<double> fallback,
                       double lo, double hi) -> double {
    auto it = o == nullptr ? nlohmann::json::const_iterator{} : o->find(k);
    if (o == nullptr || it == o->end() || it->is_null()) {
      if (!fallback) cfg.fail("missing '" + where + "." + k + "'");
      return fallback.value_or(0.0);
    }
    if (!it->is_number() || it->get<double>() < lo || it->get<double>() > hi) {
      cfg.bad(where + "." + k, "a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", *it);
      return fallback.value_or(0.0);
    }
    return it->get<double>();
  };
  const auto type_of = [](const nlohmann::json* o) {
    if (o == nullptr) return std::string();
    for (const char* k : {"rope_type", "type"})
      if (auto it = o->find(k); it != o->end() && it->is_string()) return it->get<std::string>();
    return std::string();
  };
  const nlohmann::json* full = sub("full_attention");
  const nlohmann::json* sliding = sub("sliding_attention");
  if (full == nullptr)
    return cfg.fail("'rope_parameters' must have a \"full_attention\" object (rope_type \"proportional\")");
  if (type_of(full) != "proportional")
    return cfg.fail("rope_parameters.full_attention: rope_type '" + type_of(full) + "' is not supported (proportional)");
  if (sliding != nullptr && !type_of(sliding).empty() && type_of(sliding) != "default")
    return cfg.fail("rope_parameters.sliding_attention: rope_type '" + type_of(sliding) + "' is not supported (default)");
  if (sliding != nullptr && num(sliding, "rope_parameters.sliding_attention", "partial_rotary_factor", 1.0, 0.0, 1.0) != 1.0)
    return cfg.fail("rope_parameters.sliding_attention.partial_rotary_factor other than 1 is not supported");
  const double theta = num(full, "rope_parameters.full_attention", "rope_theta", 1e6, 1e-3, 1e12);
  const double factor = num(full, "rope_parameters.full_attention", "partial_rotary_factor", std::nullopt, 0.0, 1.0);
  const double factor_swa = num(rp, "rope_parameters", "partial_rotary_factor", 1.0, 0.0, 1.0);
  if (!cfg.status().is_ok()) return;

  c.u32("context_length", cfg.i("max_position_embeddings", 1, int64_t{1} << 26, 131072));
  c.u32("embedding_length", n_embd);
  c.u32("block_count", n_layers);
  const int64_t kv_from = n_layers - n_shared;
  if (cfg.b("use_double_wide_mlp", false)) {
    std::vector<int64_t> ff;
    for (int64_t il = 0; il < n_layers; ++il) ff.push_back(il < kv_from ? n_ff : 2 * n_ff);
    c.i32s("feed_forward_length", ff);
  } else {
    c.u32("feed_forward_length", n_ff);
  }
  c.u32("attention.head_count", n_heads);
  if (kv_full) {
    std::vector<int64_t> kv;
    for (bool s : swa) kv.push_back(s ? n_kv : *kv_full);
    c.i32s("attention.head_count_kv", kv);
  } else {
    c.u32("attention.head_count_kv", n_kv);
  }
  c.u32("attention.key_length", *hd_full);
  c.u32("attention.value_length", *hd_full);
  c.u32("attention.key_length_swa", head_dim);
  c.u32("attention.value_length_swa", head_dim);
  c.u32("rope.dimension_count", *hd_full);
  c.u32("rope.dimension_count_swa", static_cast<int64_t>(static_cast<double>(head_dim) * factor_swa));
  c.f32("rope.freq_base", theta);
  if (sliding != nullptr && sliding->contains("rope_theta"))
    c.f32("rope.freq_base_swa", num(sliding, "rope_parameters.sliding_attention", "rope_theta", std::nullopt, 1e-3, 1e12));
  c.f32("attention.layer_norm_rms_epsilon", cfg.f("rms_norm_eps", 1e-12, 1.0, 1e-6));
  c.u32("attention.sliding_window", cfg.i("sliding_window", 1, int64_t{1} << 30));
  c.bools("attention.sliding_window_pattern", swa);
  c.u32("attention.shared_kv_layers", n_shared);
  c.u32("embedding_length_per_layer_input", cfg.i("hidden_size_per_layer_input", 0, 1 << 16, 0));
  c.f32("final_logit_softcapping", cfg.f("final_logit_softcapping", 0.0, 1e6));
  const int64_t n_rot = static_cast<int64_t>(static_cast<double>(*hd_full) * factor / 2);
  std::vector<float> freqs(static_cast<size_t>(*hd_full / 2), 1e30f);
  std::fill(freqs.begin(), freqs.begin() + std::min<int64_t>(n_rot, *hd_full / 2), 1.0f);
  c.add_f32_tensor("rope_freqs.weight", std::move(freqs));
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv;

  // Tensors: "language_model." dropped (Gemma4ForConditionalGeneration), the vision / audio
  // towers and their embedders dropped (the converter's TextModel.filter_tensors), the K/V
  // projections and norms of KV-shared layers dropped (transformers ignores them; the GGUF
  // graph reads the shared layers' K/V).
  c.map = [kv_from](const std::string& full_name) -> std::optional<hf::Target> {
    std::string name = full_name;
    if (auto p = name.find("language_model."); p != std::string::npos) name.erase(p, 15);
    for (const char* mm : {"vision_", "audio_", "vision.", "audio."})
      if (name.find(mm) != std::string::npos) return hf::Target{};
    static const std::map<std::string, std::string> kGlobal = {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"},
        {"model.embed_tokens_per_layer.weight", "per_layer_token_embd.weight"},
        {"model.per_layer_model_projection.weight", "per_layer_model_proj.weight"},
        {"model.per_layer_projection_norm.weight", "per_layer_proj_norm.weight"},
    };
    if (auto it = kGlobal.find(name); it != kGlobal.end()) return hf::Target{it->second};
    const auto layer = hf::split_layer_name(name);
    if (!layer) return std::nullopt;
    const int64_t il = layer->first;
    const std::string& rest = layer->second;
    if (rest.find("rotary_emb.") != std::string::npos) return hf::Target{};  // buffers
    static const std::map<std::string, std::string> kLayer = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_norm.weight", "attn_q_norm.weight"},
        {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        {"post_attention_layernorm.weight", "post_attention_norm.weight"},
        {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
        {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
        {"per_layer_input_gate.weight", "inp_gate.weight"},
        {"per_layer_projection.weight", "proj.weight"},
        {"post_per_layer_input_norm.weight", "post_norm.weight"},
        {"layer_scalar", "layer_output_scale.weight"},
    };
    auto it = kLayer.find(rest);
    if (it == kLayer.end()) return std::nullopt;
    if (il >= kv_from && (rest == "self_attn.k_proj.weight" || rest == "self_attn.v_proj.weight" ||
                          rest == "self_attn.k_norm.weight"))
      return hf::Target{};
    return hf::Target{"blk." + std::to_string(il) + "." + it->second};
  };
}

const bool kHf = hf::register_hf_architecture("Gemma4ForCausalLM", {"gemma4", &gemma4_hf, true});
const bool kHfMm = hf::register_hf_architecture("Gemma4ForConditionalGeneration", {"gemma4", &gemma4_hf, true});

}  // namespace
}  // namespace specula
