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
// Hugging Face folders: LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM
// (formats/hf_folder.h), mapped below.
#include "model/blocks.h"
#include "formats/hf_folder.h"

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

// config.json (LlamaConfig, MistralConfig, MixtralConfig): the standard keys (rope_scaling
// "llama3" becomes rope_freqs.weight), Q/K rows permuted to the NORM pairing; Mixtral's
// num_local_experts / num_experts_per_tok -> expert_count / expert_used_count. A sliding
// window (Mistral v0.1) is refused, not ignored; so is mlp_bias.
void llama_hf(hf::Config& cfg, hf::Conversion& c) {
  hf::standard_config(cfg, c);
  int64_t n_expert = 0;
  if (cfg.has("num_local_experts")) {
    n_expert = cfg.i("num_local_experts", 1, 1024);
    c.u32("expert_count", n_expert);
    c.u32("expert_used_count", cfg.i("num_experts_per_tok", 1, n_expert > 0 ? n_expert : 1));
  }
  if (cfg.has("sliding_window")) cfg.fail("'sliding_window' is not supported for this architecture (llama)");
  if (cfg.b("mlp_bias", false)) cfg.fail("'mlp_bias': true is not supported");
  c.map = hf::llama_tensor_rule(true, n_expert);
}

const bool kHf = hf::register_hf_architecture("LlamaForCausalLM", {"llama", &llama_hf, false, true}) &&
                 hf::register_hf_architecture("MistralForCausalLM", {"llama", &llama_hf, false, true}) &&
                 hf::register_hf_architecture("MixtralForCausalLM", {"llama", &llama_hf, false, true});

}  // namespace
}  // namespace specula
