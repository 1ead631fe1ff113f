// model/arch/smollm3.cpp — SmolLM3 (llama.cpp's `smollm3` GGUF architecture): a
// configuration of the shared transformer blocks (model/blocks.h).
//
// Architecture (Hugging Face 2025, SmolLM3 model card; llama.cpp's smollm3 graph): the
// Llama block (RMSNorm, GQA, SwiGLU, NORM RoPE pairs) with NoPE layers: every 4th layer
// ((il + 1) % 4 == 0) applies no rotary embedding at all.
// Hugging Face folders: SmolLM3ForCausalLM (formats/hf_folder.h), mapped below.
#include "model/blocks.h"
#include "formats/hf_folder.h"

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

// config.json (SmolLM3Config): the Llama mapping (Q/K permuted); no_rope_layers must be the
// pattern the GGUF graph hard-codes (every 4th layer without RoPE: 0 there, 1 elsewhere).
void smollm3_hf(hf::Config& cfg, hf::Conversion& c) {
  hf::standard_config(cfg, c);
  const int64_t n_layers = cfg.i("num_hidden_layers", 1, 4096);
  std::vector<int64_t> pattern(static_cast<size_t>(n_layers));
  for (int64_t il = 0; il < n_layers; ++il) pattern[il] = (il + 1) % 4 == 0 ? 0 : 1;
  hf::expect_layers(cfg, "no_rope_layers", pattern);
  if (cfg.i("no_rope_layer_interval", 1, 4096, 4) != 4) cfg.fail("'no_rope_layer_interval' other than 4 is not supported");
  if (cfg.b("use_sliding_window", false)) cfg.fail("'use_sliding_window': true is not supported");
  c.map = hf::llama_tensor_rule(true, 0);
}

const bool kHf = hf::register_hf_architecture("SmolLM3ForCausalLM", {"smollm3", &smollm3_hf, true, true});

}  // namespace
}  // namespace specula
