// model/arch/qwen35.h — the parts of the Qwen3.5 forward (qwen35.cpp) that its
// multi-token-prediction block (decoding/mtp.h) runs too: the rotary tables of a text
// position and the gated attention layer.
// Rotary embedding: llama.cpp's interleaved multi-section rope (IMROPE) at a text position
// rotates, NEOX-paired, the pairs whose sector a section covers and leaves the others at
// position 0 (qwen35.cpp explains the layout).
// Gated attention: Q projection with a per-head [q | gate] layout, per-head RMSNorm of q and
// k, that rope over the first n_rot dims, GQA attention scaled by 1/sqrt(head_dim), the
// output times sigmoid(gate), then attn_output.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "kernels/kernels.h"
#include "model/attention.h"
#include "model/model.h"
#include "ops/ops.h"
#include "specula/status.h"
#include "state/state_rows.h"

namespace specula::qwen35 {

// The rope metadata of a qwen35 file: qwen35.rope.freq_base (default 10000),
// rope.scaling.type none | linear (rope.scaling.factor: freq_scale = 1 / factor) and
// rope.dimension_sections (4 non-negative entries; section_dims their sum). Errors (prefixed
// with `who`) name the key: missing or misshapen sections, another scaling type, a value
// out of range.
struct RopeParams {
  float base = 10000.0f, freq_scale = 1.0f;
  int32_t sections[4] = {0, 0, 0, 0};
  int64_t section_dims = 0;
};
Result<RopeParams> read_rope(const gguf::GgufFile& f, const char* who);

// [n_rot / 2]: 1 where pair i rotates with the position, 0 where it stays at position 0.
std::vector<float> rope_mask(const int32_t sections[4], int64_t n_rot);

// cos/sin [M, n_rot / 2] of the positions pos [M], the mask applied.
void rope_tables(const int32_t* pos, int64_t M, int64_t n_rot, float base, float freq_scale,
                 const std::vector<float>& mask, std::vector<float>& cos_t, std::vector<float>& sin_t);

struct AttentionWeights {
  // wq [2*H*hd, n_embd] (per head [q | gate]), wk/wv [Hkv*hd, n_embd], wo [n_embd, H*hd]
  TensorView wq, wk, wv, wo;
  std::vector<float> q_norm, k_norm;  // [hd]
};

struct AttentionShape {
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0, n_rot = 0;
  float eps = 1e-6f;
};

// The layer's forward with its scratch (grow-only buffers). Thread-compatible.
class GatedAttention {
 public:
  // o [M, n_embd] = the layer on xn [M, n_embd] (normed input) for layout's tokens, the
  // layer `layer` of `state` read and written (the caller advances the rows afterwards).
  // cos_t/sin_t [M, n_rot / 2] from rope_tables.
  void forward(ThreadPool& pool, const kernels::KernelTable& kt, const AttentionWeights& w, const AttentionShape& s,
               int64_t layer, const Batch& batch, const BatchLayout& layout, StateRows& state, const float* xn,
               const float* cos_t, const float* sin_t, float* o, ops::Workspace& ws);

 private:
  std::vector<float> qg_, q_, gate_, k_, v_, attn_;
  AttentionScratch scratch_;
};

}  // namespace specula::qwen35
