// model/arch/llama.cpp — Llama 2 / 3.x and the models that ship as llama.cpp's `llama`
// GGUF architecture (Mistral 7B, TinyLlama, SmolLM, Mixtral): a configuration of the
// shared transformer blocks (model/blocks.h).
//
// Architecture (Touvron et al. 2023, "Llama 2"; Meta's Llama 3 / 3.1 model cards; llama.cpp's
// llama_model_llama loader and graph for keys and tensors): pre-norm RMSNorm blocks, Q/K/V
// projections (fused attn_qkv or separate, optional biases and output bias), RoPE with the
// NORM pairing (2i, 2i+1) — the GGUF converter permutes Q/K rows for it — over
// rope.dimension_count dims, base rope.freq_base, Llama 3.1 frequency factors from
// rope_freqs.weight when present, optional linear scaling; grouped-query attention scaled by
// 1/sqrt(head_dim), a SwiGLU FFN, or with llama.expert_count a Mixtral-style MoE FFN
// (softmax router, top-k, weights renormalised); final RMSNorm, output or tied embedding.
// LongRoPE factor tensors are used when present (as phi3). Does not support FFN biases,
// shared experts or YaRN (errors name them).
#include "model/blocks.h"

namespace specula {
namespace {

Result<TransformerConfig> llama_config(const gguf::GgufFile& f) {
  Hparams h(f, "llama");
  TransformerConfig c = standard_config(h);
  read_moe(h, c, false, false);
  if (h.status().is_ok()) read_longrope(h, c.ropes[0], c.n_ctx_train);
  if (!h.status().is_ok()) return h.status();
  c.ropes[0].type = RopeType::kNorm;
  SPECULA_RETURN_IF_ERROR(read_freq_factors(f, c.ropes[0]));
  probe_attention_tensors(f, c);
  return c;
}

const bool kRegistered = register_transformer("llama", &llama_config);

}  // namespace
}  // namespace specula
