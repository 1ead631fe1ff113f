// model/arch/phi3.cpp — Phi-3 / Phi-3.5 / Phi-4 mini (llama.cpp's `phi3` GGUF
// architecture): a configuration of the shared transformer blocks (model/blocks.h).
//
// Architecture (Abdin et al. 2024, "Phi-3 Technical Report"; llama.cpp's phi3 loader and
// graph): pre-norm RMSNorm blocks; Q/K/V as one fused attn_qkv (q | k | v) or separate;
// NEOX RoPE over rope.dimension_count dims; attention scaled by 1/sqrt(head_dim) over the
// full context (llama.cpp disables Phi's sliding window, and so does this); the FFN's
// ffn_up holds gate and up stacked ([n_embd, 2 n_ff]: silu(first half) * second half);
// final RMSNorm, output projection with optional output.bias. The 128k-context variants'
// LongRoPE: rope_factors_short / rope_factors_long (long ones when a row holds more than
// rope.scaling.original_context_length positions) and attn_factor on cos and sin.
// Does not support the MoE variant (phimoe).
// Hugging Face folders: Phi3ForCausalLM (formats/hf_folder.h), mapped below.
#include <cmath>

#include "model/blocks.h"
#include "formats/hf_folder.h"

namespace specula {
namespace {

Result<TransformerConfig> phi3_config(const gguf::GgufFile& f) {
  Hparams h(f, "phi3");
  TransformerConfig c = standard_config(h);
  if (h.status().is_ok()) read_longrope(h, c.ropes[0], c.n_ctx_train);
  if (!h.status().is_ok()) return h.status();
  probe_attention_tensors(f, c);
  for (LayerConfig& l : c.layers) l.fused_gate_up = true;
  return c;
}

const bool kRegistered = register_transformer("phi3", &phi3_config);

// config.json (Phi3Config): the standard keys with rope.dimension_count =
// int(partial_rotary_factor * hidden_size) / num_attention_heads (as the converter),
// rope_scaling "longrope" -> rope_factors_short/long.weight, original_max_position_embeddings
// and attn_factor sqrt(1 + ln(s) / ln(orig)) for s = max_position_embeddings / orig > 1.
// Fused self_attn.qkv_proj -> attn_qkv, mlp.gate_up_proj -> ffn_up.
void phi3_hf(hf::Config& cfg, hf::Conversion& c) {
  hf::standard_config(cfg, c);
  const int64_t n_embd = cfg.i("hidden_size", 1, int64_t{1} << 20);
  const int64_t n_heads = cfg.i("num_attention_heads", 1, 4096);
  const double rot = cfg.f("partial_rotary_factor", 0.0, 1.0, 1.0);
  c.u32("rope.dimension_count", static_cast<int64_t>(rot * static_cast<double>(n_embd)) / std::max<int64_t>(n_heads, 1));
  if (cfg.rope_scaling() != nullptr) {
    const int64_t max_pos = cfg.i("max_position_embeddings", 1, int64_t{1} << 26);
    const int64_t orig = cfg.i("original_max_position_embeddings", 1, int64_t{1} << 26);
    c.u32("rope.scaling.original_context_length", orig);
    const double scale = static_cast<double>(max_pos) / static_cast<double>(std::max<int64_t>(orig, 1));
    c.f32("rope.scaling.attn_factor", scale > 1.0 ? std::sqrt(1 + std::log(scale) / std::log(static_cast<double>(orig))) : 1.0);
    for (const char* k : {"long_factor", "short_factor"}) {
      std::optional<std::vector<double>> v = cfg.rope_list(k);
      if (!v) return;
      c.add_f32_tensor(std::string("rope_factors_") + (k[0] == 'l' ? "long" : "short") + ".weight",
                       std::vector<float>(v->begin(), v->end()));
    }
  }
  auto base = hf::llama_tensor_rule(false, 0);
  c.map = [base](const std::string& name) -> std::optional<hf::Target> {
    for (const auto& [hf_suffix, gguf_suffix] : {std::pair{".self_attn.qkv_proj.weight", "attn_qkv.weight"},
                                                 std::pair{".mlp.gate_up_proj.weight", "ffn_up.weight"}}) {
      const std::string s = hf_suffix;
      if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        auto t = base(name.substr(0, name.size() - s.size()) + ".mlp.down_proj.weight");
        if (!t) return t;
        t->name = t->name.substr(0, t->name.size() - std::string("ffn_down.weight").size()) + gguf_suffix;
        return t;
      }
    }
    return base(name);
  };
}

const bool kHf = hf::register_hf_architecture("Phi3ForCausalLM", {"phi3", &phi3_hf, false});

}  // namespace
}  // namespace specula
