// model/attention.h — causal (optionally sliding-window) multi-head attention over the
// K/V layout of one layer, for a batch of rows that each append T new tokens.
//
// Scaled dot-product attention (Vaswani et al. 2017) with grouped-query heads
// (Ainslie et al. 2023): query head h reads kv head h / (n_heads / n_kv_heads).
// Rows may append different numbers of tokens (ragged batch, see model.h BatchLayout).
// A query at position p sees keys at positions (p - window, p] (window 0 = all of
// [0, p]; the window is the layer's, from its layout): earlier positions from the row's
// stored state, the step's own positions from the stage. The step's new K/V are encoded
// by the layer's layout first (state/kv_layout.h) and read back exactly as they will be
// stored, so a key gives bitwise the same result whether it is read from storage or is
// new in this step (cached decode == one uncached forward); after attention the staged
// positions are committed to each row. Stored vectors are decoded to f32 per key and
// multiplied with the kernel table's f32 multi-query kernels; for f16 storage that is
// bitwise the half kernels' result. Rotated codecs (TurboQuant) get rotated queries and
// un-rotated outputs. Optional score soft-capping c·tanh(s/c) before the softmax (Gemma 2;
// with it a layout's key offset is not exact, so models give none). Each query is computed
// the same way whatever the batch.
// Does not project Q/K/V or the output.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "state/kv_layout.h"
#include "state/state_rows.h"

namespace specula {

struct AttentionArgs {
  int64_t layer = 0;                   // the layer's index in the StateRows
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;                  // applied to q·k
  float softcap = 0.0f;                // > 0: scores become softcap * tanh(score / softcap) (Gemma 2)
  int64_t M = 0;                       // new tokens in the step, all rows
  int32_t B = 0;                       // batch rows
  const int32_t* rows = nullptr;       // [B] state row of each batch row
  const int64_t* offset = nullptr;     // [B + 1] first token index of each batch row
  const int32_t* token_row = nullptr;  // [M] batch row of each token
  const kernels::KernelTable* kt = nullptr;
};

// Reusable buffers of one model's attention calls (grow only).
struct AttentionScratch {
  KvStage stage;
  std::vector<KvRowView> views;
  std::vector<LayerRow*> layer_rows;
  std::vector<float> qs, acc, scores;  // one pair's queries, accumulators, scores (keys split across threads)
};

// q: [M, n_heads, head_dim] f32 (RoPE applied); k_new, v_new: [M, n_kv_heads, head_dim]
// f32; out: [M, n_heads, head_dim], tokens packed row after row. Token offset[b] + t of
// row b is at position state.length(rows[b]) + t. Appends the step's K/V to each row's
// layer `layer` (the caller advances the row lengths once every layer is done).
// The layer must be an attention layer whose geometry matches the arguments (checked).
void attention(ThreadPool& pool, const AttentionArgs& a, StateRows& state, const float* q, const float* k_new,
               const float* v_new, float* out, AttentionScratch& scratch);

}  // namespace specula
