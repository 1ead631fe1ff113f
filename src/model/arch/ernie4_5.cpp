// model/arch/ernie4_5.cpp — ERNIE 4.5 dense models (llama.cpp's `ernie4_5`, e.g.
// ERNIE-4.5-0.3B): a configuration of the shared transformer blocks (model/blocks.h).
//
// Architecture (Baidu 2025, "ERNIE 4.5 Technical Report"; llama.cpp's ernie4_5 graph): the
// Llama block — RMSNorm pre-norms, GQA attention scaled by 1/sqrt(head_dim), RoPE with NORM
// pairs over the whole head, SwiGLU FFN — with Q/K/V fused or separate. llama.cpp loads an
// optional attn_output.bias but does not add it; such a file is refused here by name rather
// than run differently. rope.dimension_sections (for the vision model) does not apply to
// text. Does not support the MoE variant (ernie4_5-moe).
#include "model/blocks.h"

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

}  // namespace
}  // namespace specula
