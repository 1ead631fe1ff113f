// state/kv_cache.h — attention KV cache over state rows, full and sliding-window layers.
//
// A cache holds `n_rows` independent rows (one per sequence in a batch group); each
// row has its own length (= the next position to write). Per layer the layout is
//   full:    K, V [n_rows][n_ctx][n_kv_heads][head_dim]          slot = pos
//   sliding: K, V [n_rows][capacity][n_kv_heads][head_dim] ring,  slot = pos % capacity,
//            capacity = min(n_ctx, window + max_rollback)
// stored as IEEE half (llama.cpp's default cache type), read back as f32.
// A ring layer keeps only the window plus `max_rollback` older positions, which is
// what lets trim() roll back at least max_rollback tokens once the window is full.
//
// Writes happen AFTER attention for a step (the model attends to the step's own new
// keys from its activations), so a step may append more tokens than the ring holds.
// Does not do attention math, batching decisions or prompt caching.
#pragma once

#include <cstdint>
#include <vector>

#include "specula/status.h"

namespace specula {

struct KvLayerSpec {
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t window = 0;  // 0 = full attention; else a query at p sees keys (p - window, p]
};

class KvCache {
 public:
  // Errors: non-positive sizes. Memory is allocated here, once.
  static Result<KvCache> create(std::vector<KvLayerSpec> layers, int32_t n_rows, int64_t n_ctx,
                                int64_t max_rollback = 64);
  KvCache() = default;
  KvCache(KvCache&&) noexcept = default;
  KvCache& operator=(KvCache&&) noexcept = default;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int32_t n_rows() const { return n_rows_; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_layers() const { return static_cast<int64_t>(layers_.size()); }
  const KvLayerSpec& layer(int64_t il) const { return layers_[il]; }
  int64_t capacity(int64_t il) const { return cap_[il]; }

  // Number of positions stored in a row (= position of its next token).
  int64_t length(int32_t row) const { return len_[row]; }

  // Oldest position still readable in layer il of a row (0 for full layers).
  int64_t oldest(int64_t il, int32_t row) const { return lo_[il * n_rows_ + row]; }

  // K/V of one position: [n_kv_heads][head_dim] half. The position must be readable.
  const uint16_t* k(int64_t il, int32_t row, int64_t pos) const;
  const uint16_t* v(int64_t il, int32_t row, int64_t pos) const;

  // Store f32 K/V [n_kv_heads*head_dim] for `pos` in layer il (converted to half).
  void write(int64_t il, int32_t row, int64_t pos, const float* k, const float* v);

  // Mark positions [length, length + n) of a row as written (call once per step after
  // every layer wrote them). Errors when the row would exceed n_ctx.
  Status advance(int32_t row, int64_t n);

  // Roll back: drop the last n positions of a row. Errors when n > length, or when a
  // ring layer no longer holds the window the new length needs (rolled back past
  // max_rollback). On error nothing changes.
  Status trim(int32_t row, int64_t n);

  // Empty a row (length 0).
  void clear(int32_t row);

 private:
  size_t offset(int64_t il, int32_t row, int64_t pos) const;

  std::vector<KvLayerSpec> layers_;
  int32_t n_rows_ = 0;
  int64_t n_ctx_ = 0;
  std::vector<int64_t> cap_;             // [n_layers]
  std::vector<std::vector<uint16_t>> k_;  // [n_layers] of [n_rows, cap, n_kv_heads*head_dim]
  std::vector<std::vector<uint16_t>> v_;
  std::vector<int64_t> len_;  // [n_rows]
  std::vector<int64_t> lo_;   // [n_layers * n_rows] oldest readable position
};

}  // namespace specula
