// model/arch/qwen3.cpp — Qwen3 dense models (llama.cpp's `qwen3` GGUF architecture): a
// configuration of the shared transformer blocks (model/blocks.h).
//
// Architecture (Qwen team 2025, "Qwen3 Technical Report"; llama.cpp's qwen3 graph): as
// Qwen2 without Q/K/V biases and with per-head RMSNorm of Q and K (attn_q_norm,
// attn_k_norm) before NEOX RoPE; head_dim from attention.key_length (may differ from
// n_embd / n_heads); SwiGLU FFN; output or tied embedding.
#include "model/blocks.h"

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

}  // namespace
}  // namespace specula
