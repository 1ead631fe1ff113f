// model/arch/ernie4_5.cpp — ERNIE 4.5 dense models (llama.cpp's `ernie4_5`, e.g.
// ERNIE-4.5-0.3B): a configuration of the shared transformer blocks (model/blocks.h).
//
// Architecture (Baidu 2025, "ERNIE 4.5 Technical Report"; llama.cpp's ernie4_5 graph): the
// Llama block — RMSNorm pre-norms, GQA attention scaled by 1/sqrt(head_dim), RoPE with NORM
// pairs over the whole head, SwiGLU FFN — with Q/K/V fused or separate. llama.cpp loads an
// optional attn_output.bias but does not add it; such a file is refused here by name rather
// than run differently. rope.dimension_sections (for the vision model) does not apply to
// text. Does not support the MoE variant (ernie4_5-moe).
// Hugging Face folders: Ernie4_5ForCausalLM (formats/hf_folder.h), mapped below.
#include "model/blocks.h"
#include "formats/hf_folder.h"

namespace specula {
namespace {

Result<TransformerConfig> ernie4_5_config(const gguf::GgufFile& f) {
  auto c = standard_config(f, "ernie4_5");
  if (!c) return c;
  c->ropes[0].type = RopeType::kNorm;
  probe_attention_tensors(f, *c);
  for (LayerConfig& l : c->layers) l.o_bias = false;
  return c;
}

const bool kRegistered = register_transformer("ernie4_5", &ernie4_5_config);

// config.json (Ernie4_5Config): the standard keys; Q/K stay as stored (HF's ERNIE rotates
// interleaved pairs already); use_bias must be off.
void ernie4_5_hf(hf::Config& cfg, hf::Conversion& c) {
  hf::standard_config(cfg, c);
  if (cfg.b("use_bias", false)) cfg.fail("'use_bias': true is not supported");
  c.map = hf::llama_tensor_rule(false, 0);
}

const bool kHf = hf::register_hf_architecture("Ernie4_5ForCausalLM", {"ernie4_5", &ernie4_5_hf, true});

}  // namespace
}  // namespace specula
