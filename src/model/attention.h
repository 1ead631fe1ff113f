// model/attention.h — causal (optionally sliding-window) multi-head attention over a
// KV cache, for a batch of rows that each append T new tokens.
//
// Scaled dot-product attention (Vaswani et al. 2017) with grouped-query heads
// (Ainslie et al. 2023): query head h reads kv head h / (n_heads / n_kv_heads).
// Rows may append different numbers of tokens (ragged batch, see model.h BatchLayout).
// A query at position p sees keys at positions (p - window, p] (window 0 = all of
// [0, p]): earlier positions from the cache, the step's own positions from k_new/v_new.
// New K/V are rounded to half exactly as the cache stores them, so attending to a key
// from the cache or from the step gives bitwise the same result (cached decode ==
// one uncached forward). Each query is computed the same way whatever the batch.
// Does not write the cache (the caller does, after every layer) and does not project.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "state/kv_cache.h"

namespace specula {

struct AttentionArgs {
  int64_t layer = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t window = 0;  // 0 = full
  float scale = 1.0f;  // applied to q·k
  int64_t M = 0;                       // new tokens in the step, all rows
  const int32_t* rows = nullptr;       // [B] cache row of each batch row
  const int64_t* offset = nullptr;     // [B + 1] first token index of each batch row
  const int32_t* token_row = nullptr;  // [M] batch row of each token
  const kernels::KernelTable* kt = nullptr;
};

// q: [M, n_heads, head_dim] f32 (RoPE applied); k_new, v_new: [M, n_kv_heads, head_dim]
// f32; out: [M, n_heads, head_dim], tokens packed row after row. Token offset[b] + t of
// row b is at position cache.length(rows[b]) + t.
void attention(ThreadPool& pool, const AttentionArgs& a, const KvCache& cache, const float* q,
               const float* k_new, const float* v_new, float* out);

}  // namespace specula
