// model/arch/gemma4.cpp — Gemma 4 dense models (llama.cpp's `gemma4` GGUF architecture: the
// E2B/E4B and 31B layouts): a configuration of the shared transformer blocks (model/blocks.h).
//
// Architecture (Google's Gemma 4 release; llama.cpp's gemma4 loader and graph, and its
// converter for the proportional RoPE): embeddings scaled by sqrt(n_embd); sandwich blocks
// with per-head RMSNorm of Q and K and a weightless RMSNorm of V (V is the K projection
// when attn_v is absent); no query scaling (attention scale 1); sliding-window layers as the
// per-layer bool array attention.sliding_window_pattern says, with their own head size
// (attention.key_length_swa), rope dims (rope.dimension_count_swa) and base
// (rope.freq_base_swa, default 10000); full layers with attention.key_length, NEOX RoPE with
// rope_freqs.weight (proportional RoPE: factors of 1e30 freeze the pairs past the rotated
// fraction); GELU-tanh gated FFN (per-layer widths); per-layer inputs
// (embedding_length_per_layer_input, model/blocks.h); the last attention.shared_kv_layers
// layers reuse the K/V of the last sliding and full layers before them; optional
// layer_output_scale; final logits soft-capped (final_logit_softcapping, default 30).
// Does not support the MoE variant (26B-A4B: its ffn_gate_inp tensors are refused by name)
// or the vision / audio towers.
#include <cmath>

#include "model/blocks.h"

namespace specula {
namespace {

Result<TransformerConfig> gemma4_config(const gguf::GgufFile& f) {
  Hparams h(f, "gemma4");
  TransformerConfig c = standard_config(h);
  const int64_t n_layers = static_cast<int64_t>(c.layers.size());
  if (h.status().is_ok() && !h.ints("attention.sliding_window_pattern"))
    h.fail("[gemma4] missing metadata key 'gemma4.attention.sliding_window_pattern' (a per-layer bool array)");
  const std::vector<bool> sliding = sliding_layers(h, n_layers, 0);
  const int64_t window = h.i("attention.sliding_window", 1, int64_t{1} << 30);
  const int64_t hd_swa = h.i("attention.key_length_swa", 2, 4096);
  const int64_t hd_swa_v = h.i("attention.value_length_swa", 2, 4096, hd_swa);
  const int64_t n_rot_swa = h.i("rope.dimension_count_swa", 2, 4096, hd_swa);
  const float base_swa = static_cast<float>(h.f("rope.freq_base_swa", 1.0, 1e12, 10000.0));
  c.n_embd_per_layer = h.i("embedding_length_per_layer_input", 0, 1 << 16, 0);
  const int64_t shared = h.i("attention.shared_kv_layers", 0, n_layers, 0);
  c.final_softcap = static_cast<float>(h.f("final_logit_softcapping", 0.0, 1e6, 30.0, false));
  if (!h.status().is_ok()) return h.status();
  if (hd_swa_v != hd_swa || hd_swa % 2 != 0 || n_rot_swa % 2 != 0 || n_rot_swa > hd_swa)
    return Status::error("[gemma4] sliding layers: key_length_swa " + std::to_string(hd_swa) + ", value_length_swa " +
                         std::to_string(hd_swa_v) + ", rope dims " + std::to_string(n_rot_swa) +
                         " (must be equal, even, rope dims <= head size)");
  c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
  RopeConfig swa = c.ropes[0];
  swa.base = base_swa;
  swa.n_rot = n_rot_swa;
  swa.freq_scale = 1.0f;
  c.ropes.push_back(swa);  // [0] full layers, [1] sliding layers
  bool any_full = false;
  for (bool s : sliding) any_full = any_full || !s;
  if (any_full) {
    if (f.find_tensor("rope_freqs.weight") == nullptr)
      return Status::error("[gemma4] missing tensor 'rope_freqs.weight' (the full layers' proportional RoPE)");
    SPECULA_RETURN_IF_ERROR(read_freq_factors(f, c.ropes[0]));
  }
  // Shared KV: layers from kv_from on read the last sliding (kv_from - 2) or full
  // (kv_from - 1) layer's K/V.
  const int64_t kv_from = n_layers - shared;
  if (shared > 0 && (kv_from < 2 || !sliding[kv_from - 2] || sliding[kv_from - 1]))
    return Status::error("[gemma4] attention.shared_kv_layers " + std::to_string(shared) +
                         ": the two layers before the shared ones must be a sliding and a full layer");
  for (int64_t il = 0; il < n_layers; ++il) {
    LayerConfig& l = c.layers[il];
    if (sliding[il]) {
      l.head_dim = hd_swa;
      l.window = window;
      l.rope = 1;
    }
    l.qk_norm = l.v_norm = l.sandwich = true;
    l.act = Activation::kGeluTanh;
    l.attn_scale = 1.0f;
    if (il >= kv_from) l.kv_source = static_cast<int>(sliding[il] ? kv_from - 2 : kv_from - 1);
    l.fused_qkv = has_layer_tensor(f, il, "attn_qkv.weight");
    l.v_from_k = l.kv_source < 0 && !l.fused_qkv && !has_layer_tensor(f, il, "attn_v.weight");
    l.out_scale = has_layer_tensor(f, il, "layer_output_scale.weight");
  }
  return c;
}

const bool kRegistered = register_transformer("gemma4", &gemma4_config);

}  // namespace
}  // namespace specula
