// model/arch/qwen2.cpp — Qwen2 / Qwen2.5 (text): the configuration of the shared
// transformer blocks (model/blocks.h) for llama.cpp's `qwen2` GGUF files.
//
// Architecture (Yang et al. 2024, "Qwen2 Technical Report"; llama.cpp's LLM_ARCH_QWEN2
// graph for tensor names): token embedding (no scaling); pre-norm blocks with RMSNorm,
// Q/K/V projections with biases, NEOX RoPE (qwen2.rope.freq_base, optional linear
// scaling), grouped-query attention scaled by 1/sqrt(head_dim) over the full context, a
// SwiGLU FFN (Shazeer 2020); final RMSNorm; output.weight or the tied token embedding,
// with an optional output.bias.
// Does not support fused attn_qkv tensors or sliding-window layers (Qwen2's
// use_sliding_window is off in released models); YaRN scaling is rejected by name.
// Hugging Face folders: Qwen2ForCausalLM (formats/hf_folder.h), mapped below.
#include "model/blocks.h"
#include "formats/hf_folder.h"

namespace specula {
namespace {

Result<TransformerConfig> qwen2_config(const gguf::GgufFile& f) {
  auto c = standard_config(f, "qwen2");
  if (!c) return c;
  for (LayerConfig& l : c->layers) l.qkv_bias = true;
  return c;
}

const bool kRegistered = register_transformer("qwen2", &qwen2_config);

// config.json (Qwen2Config): the standard keys; use_sliding_window must be off.
void qwen2_hf(hf::Config& cfg, hf::Conversion& c) {
  hf::standard_config(cfg, c);
  if (cfg.b("use_sliding_window", false)) cfg.fail("'use_sliding_window': true is not supported (no sliding layers)");
  c.map = hf::llama_tensor_rule(false, 0);
}

const bool kHf = hf::register_hf_architecture("Qwen2ForCausalLM", {"qwen2", &qwen2_hf, false});

}  // namespace
}  // namespace specula
