// model/arch/qwen3moe.cpp — Qwen3 mixture-of-experts models (llama.cpp's `qwen3moe`, e.g.
// Qwen3-30B-A3B): a configuration of the shared transformer blocks (model/blocks.h).
//
// Architecture (Qwen team 2025, "Qwen3 Technical Report"; llama.cpp's qwen3moe graph): the
// Qwen3 attention (QK-norm, NEOX RoPE) and in every layer an MoE FFN: router
// ffn_gate_inp, softmax over qwen3moe.expert_count experts, the expert_used_count most
// probable, their weights renormalised to sum 1, each expert a SwiGLU FFN of
// expert_feed_forward_length; no shared expert.
// Hugging Face folders: Qwen3MoeForCausalLM (formats/hf_folder.h), mapped below.
#include "model/blocks.h"
#include "formats/hf_folder.h"

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

// config.json (Qwen3MoeConfig): the standard keys plus num_experts -> expert_count,
// num_experts_per_tok -> expert_used_count, moe_intermediate_size ->
// expert_feed_forward_length. The GGUF graph has every layer sparse with renormalised top-k
// weights: decoder_sparse_step 1, no mlp_only_layers, norm_topk_prob true, or an error.
void qwen3moe_hf(hf::Config& cfg, hf::Conversion& c) {
  hf::standard_config(cfg, c);
  const int64_t n_expert = cfg.i("num_experts", 1, 1024);
  c.u32("expert_count", n_expert);
  c.u32("expert_used_count", cfg.i("num_experts_per_tok", 1, n_expert > 0 ? n_expert : 1));
  c.u32("expert_feed_forward_length", cfg.i("moe_intermediate_size", 1, int64_t{1} << 24));
  if (cfg.i("decoder_sparse_step", 1, 1024, 1) != 1) cfg.fail("'decoder_sparse_step' other than 1 is not supported");
  if (auto dense = cfg.ints("mlp_only_layers"); dense && !dense->empty()) cfg.fail("'mlp_only_layers' must be empty");
  if (!cfg.b("norm_topk_prob", true)) cfg.fail("'norm_topk_prob': false is not supported");
  if (cfg.b("use_sliding_window", false)) cfg.fail("'use_sliding_window': true is not supported (no sliding layers)");
  c.map = hf::llama_tensor_rule(false, n_expert);
}

const bool kHf = hf::register_hf_architecture("Qwen3MoeForCausalLM", {"qwen3moe", &qwen3moe_hf, false});

}  // namespace
}  // namespace specula
