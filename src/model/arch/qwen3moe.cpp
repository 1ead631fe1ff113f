// model/arch/qwen3moe.cpp — Qwen3 mixture-of-experts models (llama.cpp's `qwen3moe`, e.g.
// Qwen3-30B-A3B): a configuration of the shared transformer blocks (model/blocks.h).
//
// Architecture (Qwen team 2025, "Qwen3 Technical Report"; llama.cpp's qwen3moe graph): the
// Qwen3 attention (QK-norm, NEOX RoPE) and in every layer an MoE FFN: router
// ffn_gate_inp, softmax over qwen3moe.expert_count experts, the expert_used_count most
// probable, their weights renormalised to sum 1, each expert a SwiGLU FFN of
// expert_feed_forward_length; no shared expert.
#include "model/blocks.h"

namespace specula {
namespace {

Result<TransformerConfig> qwen3moe_config(const gguf::GgufFile& f) {
  Hparams h(f, "qwen3moe");
  TransformerConfig c = standard_config(h);
  read_moe(h, c, true, true);
  if (!h.status().is_ok()) return h.status();
  probe_attention_tensors(f, c);
  for (LayerConfig& l : c.layers) l.qk_norm = true;
  return c;
}

const bool kRegistered = register_transformer("qwen3moe", &qwen3moe_config);

}  // namespace
}  // namespace specula
