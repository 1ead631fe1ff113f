// state/kv_layout.h — the attention K/V layout: per row, per position, per kv head, one
// stored vector of K and one of V, each through its codec (state/kv_codec.h).
//
// Positions map to storage slots either 1:1 (full attention) or modulo the window (a
// ring for sliding-window layers: a query at p sees keys (p - window, p], so a row keeps
// only its newest `window` positions). Storage grows in pages of kPageTokens positions as
// a row grows (no fixed slots, no preallocated context).
//
// Delayed quantization (CacheOptions::delay = N > 0): besides the quantized tier, a row
// keeps its newest N positions in f16 (a second ring); a query at position p reads key j
// from the f16 tier when p - j < N and from the quantized tier otherwise. The choice
// depends only on (p, j), so it is the same whether p is decoded alone, verified in a
// speculative window, or prefilled in a chunk — speculative decoding stays exact.
//
// A step stages first: encode() writes the step's new K/V (in every tier's format) to a
// KvStage; attention reads stored positions through view() and the step's own positions
// from the stage, so a key is read identically whether it was stored earlier or is new
// in this step (cached decode == one uncached forward). commit() then appends the staged
// positions to the row. Inside a transaction, ring slots that a commit overwrites are
// saved first, so resolve() restores them: rollback works past the ring's wrap with no
// margin.
// Does not compute attention (model/attention.h) or decide batches.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "state/kv_codec.h"
#include "state/layout.h"

namespace specula {

constexpr int64_t kPageTokens = 64;  // positions per storage page

// One stored tensor (K or V) of one tier of one row, read-only for one step.
struct KvTierView {
  const uint8_t* const* pages = nullptr;  // page p holds slots [p*kPageTokens, (p+1)*kPageTokens)
  int64_t ring = 0;                       // 0: slot = position; else slot = position % ring
  size_t pos_bytes = 0;                   // bytes per position (all kv heads)
  size_t head_bytes = 0;                  // bytes per kv head (one codec vector)
  const uint8_t* staged = nullptr;        // this row's staged positions [base, base + n_new)

  // The stored vector of kv head g at position pos (pos >= base: the staged one).
  const uint8_t* at(int64_t pos, int64_t base, int64_t g) const {
    if (pos >= base) return staged + static_cast<size_t>(pos - base) * pos_bytes + static_cast<size_t>(g) * head_bytes;
    const int64_t slot = ring > 0 ? pos % ring : pos;
    return pages[slot / kPageTokens] + static_cast<size_t>(slot % kPageTokens) * pos_bytes +
           static_cast<size_t>(g) * head_bytes;
  }
};

// What attention needs to read one row of one layer during a step.
struct KvRowView {
  int64_t base = 0;  // the row's length before the step (first staged position)
  int64_t lo = 0;    // oldest stored position readable in the quantized/main tier
  KvTierView k, v;   // main tier
  const KvCodec* k_codec = nullptr;
  const KvCodec* v_codec = nullptr;
  // Delayed quantization: positions j with p - j < delay are read from the f16 tier.
  int64_t delay = 0;
  KvTierView k_recent, v_recent;
  const KvCodec* k_recent_codec = nullptr;
  const KvCodec* v_recent_codec = nullptr;
  // [n_kv_heads * head_dim_v] to add to each output (the stored values are v - offset), or null.
  const float* value_offset = nullptr;
  // [n_kv_heads * head_dim_k] to multiply each query by (stored keys are divided by it), or null.
  const float* key_scale = nullptr;
};

// Staging buffers for one layer's step, reused across steps (grow only).
struct KvStage {
  std::vector<uint8_t> k, v;                // [M, pos_bytes] main tier
  std::vector<uint8_t> k_recent, v_recent;  // [M, pos_bytes] f16 tier (delay > 0)
};

class KvLayout final : public Layout {
 public:
  // Errors: see make_layout() (codec names, head_dim, delay without quantization).
  static Result<std::shared_ptr<const KvLayout>> create(const AttentionSpec& spec, const CacheOptions& options,
                                                        const kernels::KernelTable& kt);

  const LayoutInfo& info() const override { return info_; }
  Result<std::unique_ptr<LayerRow>> new_row() const override;
  int64_t bytes_for(int64_t n_tokens) const override;

  const AttentionSpec& spec() const { return spec_; }
  int64_t delay() const { return delay_; }
  const KvCodec& k_codec() const { return *k_codec_; }
  const KvCodec& v_codec() const { return *v_codec_; }

  // Encode the step's new K/V — k [M, n_kv_heads, head_dim_k], v [M, n_kv_heads,
  // head_dim_v] f32, tokens packed row after row — into `stage` (every tier).
  void encode(ThreadPool& pool, const float* k, const float* v, int64_t M, KvStage& stage) const;
  // The read view of `row` for a step in which it appends n_new staged positions that
  // start at packed index `first` of `stage`.
  KvRowView view(const LayerRow& row, const KvStage& stage, int64_t first, int64_t n_new) const;
  // Append those staged positions to `row` (after attention read them).
  void commit(LayerRow& row, const KvStage& stage, int64_t first, int64_t n_new) const;

 private:
  KvLayout() = default;
  AttentionSpec spec_;
  LayoutInfo info_;
  std::shared_ptr<const KvCodec> k_codec_, v_codec_;                // main tier
  std::shared_ptr<const KvCodec> k_recent_codec_, v_recent_codec_;  // f16 tier (delay > 0)
  int64_t delay_ = 0;
  int64_t ring_ = 0;  // main tier ring size (window), 0 = full
  const float* k_offset_ = nullptr;  // from spec_, when the K codec quantizes
  const float* v_offset_ = nullptr;
  const float* k_scale_ = nullptr;
  size_t k_pos_bytes_ = 0, v_pos_bytes_ = 0, kr_pos_bytes_ = 0, vr_pos_bytes_ = 0;
  friend class KvRow;
};

}  // namespace specula
