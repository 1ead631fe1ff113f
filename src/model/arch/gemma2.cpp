// model/arch/gemma2.cpp — Gemma 2 (llama.cpp's `gemma2` GGUF architecture): a
// configuration of the shared transformer blocks (model/blocks.h).
//
// Architecture (Gemma Team 2024, "Gemma 2: Improving Open Language Models at a Practical
// Size"; llama.cpp's gemma2 loader and graph): embeddings scaled by sqrt(n_embd); sandwich
// blocks (pre/post attention and FFN RMSNorms, GGUF weights holding Gemma's +1); NEOX RoPE
// (rope.freq_base; rope.freq_base_swa on sliding layers, default the same); sliding window
// attention.sliding_window (default 4096) on the layers sliding_window_pattern marks (default
// 2: even layers slide, odd ones are global); attention logits soft-capped at
// attn_logit_softcapping (default 50) and final logits at final_logit_softcapping (default
// 30), both c·tanh(x/c); a GELU-tanh gated FFN; query scale 1/sqrt(head_dim), or
// 1/sqrt(n_embd / n_heads) for the 46-layer 27B (its query_pre_attn_scalar, chosen by layer
// count as llama.cpp does); output tied to the token embedding.
// Hugging Face folders: Gemma2ForCausalLM (formats/hf_folder.h), mapped below.
#include <cmath>

#include "model/blocks.h"
#include "formats/hf_folder.h"

namespace specula {
namespace {

Result<TransformerConfig> gemma2_config(const gguf::GgufFile& f) {
  Hparams h(f, "gemma2");
  TransformerConfig c = standard_config(h);
  const int64_t n_layers = static_cast<int64_t>(c.layers.size());
  const int64_t window = h.i("attention.sliding_window", 1, int64_t{1} << 30, 4096);
  const std::vector<bool> sliding = sliding_layers(h, n_layers, 2);
  const float base_swa = static_cast<float>(h.f("rope.freq_base_swa", 1.0, 1e12, c.ropes.empty() ? 1e4 : c.ropes[0].base));
  const float attn_cap = static_cast<float>(h.f("attn_logit_softcapping", 0.0, 1e6, 50.0));
  c.final_softcap = static_cast<float>(h.f("final_logit_softcapping", 0.0, 1e6, 30.0));
  if (!h.status().is_ok()) return h.status();
  probe_attention_tensors(f, c);
  c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.tied_output = true;  // llama.cpp's gemma2 always projects with the token embedding
  RopeConfig local = c.ropes[0];
  local.base = base_swa;
  c.ropes.push_back(local);
  for (int64_t il = 0; il < n_layers; ++il) {
    LayerConfig& l = c.layers[il];
    l.window = sliding[il] ? window : 0;
    l.rope = sliding[il] ? 1 : 0;
    l.sandwich = true;
    l.o_bias = false;
    l.act = Activation::kGeluTanh;
    l.attn_softcap = attn_cap;
    l.attn_scale = 1.0f / std::sqrt(static_cast<float>(n_layers == 46 ? c.n_embd / l.n_heads : l.head_dim));
  }
  return c;
}

const bool kRegistered = register_transformer("gemma2", &gemma2_config);

// config.json (Gemma2Config): the standard keys plus sliding_window, attn_logit_softcapping,
// final_logit_softcapping; layers alternate sliding / full starting with sliding (layer_types,
// when given, must say so); query_pre_attn_scalar must equal head_dim. Norm gains + 1.
void gemma2_hf(hf::Config& cfg, hf::Conversion& c) {
  hf::standard_config(cfg, c);
  const int64_t n_layers = cfg.i("num_hidden_layers", 1, 4096);
  hf::gemma_attention(cfg, c, 46);
  if (auto types = cfg.strings("layer_types")) {
    bool ok = static_cast<int64_t>(types->size()) == n_layers;
    for (size_t il = 0; ok && il < types->size(); ++il)
      ok = (*types)[il] == (il % 2 == 0 ? "sliding_attention" : "full_attention");
    if (!ok) cfg.fail("'layer_types' must alternate sliding_attention / full_attention from layer 0");
  }
  for (const char* k : {"attn_logit_softcapping", "final_logit_softcapping"})
    if (cfg.explicit_null(k)) cfg.fail(std::string("'") + k + "': null (no soft-capping) is not supported for gemma2");
  if (cfg.has("attn_logit_softcapping")) c.f32("attn_logit_softcapping", cfg.f("attn_logit_softcapping", 0.0, 1e6));
  if (cfg.has("final_logit_softcapping")) c.f32("final_logit_softcapping", cfg.f("final_logit_softcapping", 0.0, 1e6));
  c.map = hf::gemma_tensor_rule();
}

const bool kHf = hf::register_hf_architecture("Gemma2ForCausalLM", {"gemma2", &gemma2_hf, true});

}  // namespace
}  // namespace specula
