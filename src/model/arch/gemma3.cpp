// model/arch/gemma3.cpp — Gemma 3 (text): the configuration of the shared transformer
// blocks (model/blocks.h) for llama.cpp's `gemma3` GGUF files.
//
// Architecture (Gemma Team 2025, "Gemma 3 Technical Report"; llama.cpp's loader for the
// keys): embeddings scaled by sqrt(n_embd); sandwich blocks (pre- and post-attention,
// pre- and post-FFN RMSNorms; the GGUF norm weights already include Gemma's +1), per-head
// RMSNorm of Q and K, NEOX RoPE — base rope.freq_base_swa (default 10000) on sliding-window
// layers, gemma3.rope.freq_base
// (with optional linear scaling) on global ones; sliding_window_pattern (default 6: every
// 6th layer global, or a per-layer array) — a sliding window of
// gemma3.attention.sliding_window tokens, a GELU-tanh gated FFN, optional final logit
// soft-capping, output tied to the token embedding unless output.weight exists. The
// attention scale is 1/sqrt(head_dim), except for the 62-layer (27B) model, which uses
// 1/sqrt(n_embd / n_heads) (its query_pre_attn_scalar; llama.cpp chooses it the same way,
// from the layer count, since the GGUF has no key for it).
// Does not support the vision tower (mmproj).
// Hugging Face folders: Gemma3ForCausalLM (formats/hf_folder.h), mapped below.
#include <cmath>

#include "model/blocks.h"
#include "formats/hf_folder.h"

namespace specula {
namespace {

Result<TransformerConfig> gemma3_config(const gguf::GgufFile& f) {
  Hparams h(f, "gemma3");
  TransformerConfig c = standard_config(h);
  const int64_t n_layers = static_cast<int64_t>(c.layers.size());
  const int64_t window = h.i("attention.sliding_window", 1, int64_t{1} << 30);
  const std::vector<bool> sliding = sliding_layers(h, n_layers, 6);
  c.final_softcap = static_cast<float>(h.f("final_logit_softcapping", 0.0, 1e6, 0.0, false));
  const float base_swa = static_cast<float>(h.f("rope.freq_base_swa", 1.0, 1e12, 10000.0));
  if (!h.status().is_ok()) return h.status();
  c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
  RopeConfig local = c.ropes[0];  // the global table keeps freq_base and the scaling
  local.base = base_swa;
  local.freq_scale = 1.0f;
  c.ropes.insert(c.ropes.begin(), local);
  for (int64_t il = 0; il < n_layers; ++il) {
    LayerConfig& l = c.layers[il];
    l.window = sliding[il] ? window : 0;
    l.rope = sliding[il] ? 0 : 1;
    l.qk_norm = l.sandwich = true;
    l.act = Activation::kGeluTanh;
    l.attn_scale = 1.0f / std::sqrt(static_cast<float>(n_layers == 62 ? c.n_embd / l.n_heads : l.head_dim));
  }
  return c;
}

const bool kRegistered = register_transformer("gemma3", &gemma3_config);

// config.json (Gemma3TextConfig, or a Gemma3Config's text_config): the standard keys plus
// sliding_window, the layer pattern (layer_types, else sliding_window_pattern, default 6),
// rope_local_base_freq -> rope.freq_base_swa, final_logit_softcapping; attention scaled by
// 1/sqrt(head_dim), so query_pre_attn_scalar must equal head_dim; attn_logit_softcapping must
// be unset. Norm gains are stored + 1 (hf::gemma_tensor_rule).
void gemma3_hf(hf::Config& cfg, hf::Conversion& c) {
  hf::standard_config(cfg, c);
  const int64_t n_layers = cfg.i("num_hidden_layers", 1, 4096);
  hf::gemma_attention(cfg, c, 62);
  if (auto types = cfg.strings("layer_types")) {
    std::vector<bool> swa;
    for (const std::string& t : *types) {
      if (t != "sliding_attention" && t != "full_attention") cfg.fail("'layer_types': unknown entry '" + t + "'");
      swa.push_back(t == "sliding_attention");
    }
    if (static_cast<int64_t>(swa.size()) != n_layers) cfg.fail("'layer_types' must have num_hidden_layers entries");
    c.bools("attention.sliding_window_pattern", swa);
  } else if (cfg.has("sliding_window_pattern")) {
    c.u32("attention.sliding_window_pattern", cfg.i("sliding_window_pattern", 1, 4096));
  }
  c.f32("rope.freq_base_swa", cfg.f("rope_local_base_freq", 1.0, 1e12, 10000.0));
  if (cfg.has("final_logit_softcapping")) c.f32("final_logit_softcapping", cfg.f("final_logit_softcapping", 0.0, 1e6));
  if (cfg.has("attn_logit_softcapping")) cfg.fail("'attn_logit_softcapping' is not supported for gemma3");
  c.map = hf::gemma_tensor_rule();
}

const bool kHf = hf::register_hf_architecture("Gemma3ForCausalLM", {"gemma3", &gemma3_hf, true});

}  // namespace
}  // namespace specula
