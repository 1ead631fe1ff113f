// model/arch/qwen3.cpp — Qwen3 dense models (llama.cpp's `qwen3` GGUF architecture): a
// configuration of the shared transformer blocks (model/blocks.h).
//
// Architecture (Qwen team 2025, "Qwen3 Technical Report"; llama.cpp's qwen3 graph): as
// Qwen2 without Q/K/V biases and with per-head RMSNorm of Q and K (attn_q_norm,
// attn_k_norm) before NEOX RoPE; head_dim from attention.key_length (may differ from
// n_embd / n_heads); SwiGLU FFN; output or tied embedding.
// Hugging Face folders: Qwen3ForCausalLM (formats/hf_folder.h), mapped below.
#include "model/blocks.h"
#include "formats/hf_folder.h"

namespace specula {
namespace {

Result<TransformerConfig> qwen3_config(const gguf::GgufFile& f) {
  auto c = standard_config(f, "qwen3");
  if (!c) return c;
  probe_attention_tensors(f, *c);
  for (LayerConfig& l : c->layers) l.qk_norm = true;
  return c;
}

const bool kRegistered = register_transformer("qwen3", &qwen3_config);

// config.json (Qwen3Config): the standard keys (head_dim); use_sliding_window must be off.
void qwen3_hf(hf::Config& cfg, hf::Conversion& c) {
  hf::standard_config(cfg, c);
  if (cfg.b("use_sliding_window", false)) cfg.fail("'use_sliding_window': true is not supported (no sliding layers)");
  c.map = hf::llama_tensor_rule(false, 0);
}

const bool kHf = hf::register_hf_architecture("Qwen3ForCausalLM", {"qwen3", &qwen3_hf, false});

}  // namespace
}  // namespace specula
