// model/arch/smollm3.cpp — SmolLM3 (llama.cpp's `smollm3` GGUF architecture): a
// configuration of the shared transformer blocks (model/blocks.h).
//
// Architecture (Hugging Face 2025, SmolLM3 model card; llama.cpp's smollm3 graph): the
// Llama block (RMSNorm, GQA, SwiGLU, NORM RoPE pairs) with NoPE layers: every 4th layer
// ((il + 1) % 4 == 0) applies no rotary embedding at all.
#include "model/blocks.h"

namespace specula {
namespace {

Result<TransformerConfig> smollm3_config(const gguf::GgufFile& f) {
  auto c = standard_config(f, "smollm3");
  if (!c) return c;
  c->ropes[0].type = RopeType::kNorm;
  SPECULA_RETURN_IF_ERROR(read_freq_factors(f, c->ropes[0]));
  probe_attention_tensors(f, *c);
  for (size_t il = 0; il < c->layers.size(); ++il)
    if ((il + 1) % 4 == 0) c->layers[il].rope = -1;
  return c;
}

const bool kRegistered = register_transformer("smollm3", &smollm3_config);

}  // namespace
}  // namespace specula
