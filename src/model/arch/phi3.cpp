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
#include "model/blocks.h"

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

}  // namespace
}  // namespace specula
