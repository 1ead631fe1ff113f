// state/state_rows.h — the cache state of one batch group: rows × layers.
//
// A StateRows holds one Layout per layer (shared, immutable) and a list of rows; each
// row (RowState) holds one LayerRow per layer. Batch row b of a forward names state row
// rows[b]. Membership changes apply the same operation to every layer (docs/ARCHITECTURE.md, "State
// rows"), only between committed steps:
//   new_row()  an empty row for admission — the fallible half (allocation);
//   insert()   the row joins the group — the commit half, which cannot fail once
//              reserve() made room (a failed admission leaves running rows untouched);
//   filter()   keep some rows, in a given order (retire the rest);
//   extract()  a deep copy of one row (for a prompt cache or another group);
//   clone()    a deep copy of the whole group;  clear()  no rows.
// There are no fixed slots: rows come and go, and a row's memory grows with its length.
// Memory is bounded by admission (engine/), which reserves bytes_for(n) per request.
//
// The speculative transaction (docs/ARCHITECTURE.md): begin(rows) before the verify forward;
// resolve(rows, keep) after the acceptance walk keeps, per row, keep[i] of the positions
// appended since begin (the pending token plus the accepted drafts) and drops the rest —
// by trim, by restoring overwritten ring slots, or by snapshot + replay, as each layer's
// layout does it. A failed resolve leaves the group's state untrusted: the caller
// discards those rows.
// Does not compute (model/), schedule (engine/) or persist to disk (prompt cache).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "state/layout.h"

namespace specula {

// One row's state in every layer; moves between groups whole.
struct RowState {
  std::vector<std::unique_ptr<LayerRow>> layers;  // [n_layers]
  int64_t length = 0;                             // positions held (every layer agrees)

  int64_t bytes() const;
  // Errors: out of memory.
  Result<RowState> clone() const;
  // The shortest prefix from which this row's state can be reused (max over layers).
  int64_t min_length() const;
  // Cut back to `length` positions in every layer. Errors (nothing changes): length below
  // min_length() or above length, or a layer in a transaction.
  Status truncate(int64_t length);
};

class StateRows {
 public:
  // One layout per layer spec (make_layout). max_length: the most positions any row may
  // hold (the per-request context). Errors: a layer's layout error, prefixed with the
  // layer index ("[state] layer 3: [kv_codec] unknown cache type 'q9' (valid: ...)").
  static Result<StateRows> create(const std::vector<LayerSpec>& specs, const CacheOptions& options,
                                  const kernels::KernelTable& kt, int64_t max_length);
  StateRows() = default;
  StateRows(StateRows&&) noexcept = default;
  StateRows& operator=(StateRows&&) noexcept = default;
  StateRows(const StateRows&) = delete;
  StateRows& operator=(const StateRows&) = delete;

  int32_t n_rows() const { return static_cast<int32_t>(rows_.size()); }
  int64_t n_layers() const { return static_cast<int64_t>(layouts_.size()); }
  int64_t max_length() const { return max_length_; }
  const Layout& layout(int64_t il) const { return *layouts_[il]; }
  // The layout of layer il as a concrete type (nullptr when it is another kind).
  template <class T>
  const T* layout_as(int64_t il) const {
    return dynamic_cast<const T*>(layouts_[il].get());
  }
  LayerRow& layer_row(int32_t row, int64_t il) { return *rows_[row].layers[il]; }
  const LayerRow& layer_row(int32_t row, int64_t il) const { return *rows_[row].layers[il]; }
  int64_t length(int32_t row) const { return rows_[row].length; }
  const RowState& row(int32_t row) const { return rows_[row]; }

  // After a forward appended n positions to every layer of a row.
  void advance(int32_t row, int64_t n) { rows_[row].length += n; }

  // --- membership ---
  // An empty row of this group's layouts. Errors: out of memory.
  Result<RowState> new_row() const;
  // Room for `extra` more rows, so that insert() cannot fail. Errors: out of memory.
  Status reserve(int32_t extra);
  // The row joins at index n_rows(). Requires reserve() room and a row of these layouts
  // (checked: layer count). Returns its index.
  int32_t insert(RowState row);
  // Keep rows keep[0], keep[1], ... (distinct, in range) as rows 0, 1, ...; the rest are
  // released.
  void filter(std::span<const int32_t> keep);
  // A deep copy of one row. Errors: out of memory.
  Result<RowState> extract(int32_t row) const;
  // A deep copy of the group. Errors: out of memory.
  Result<StateRows> clone() const;
  void clear() { rows_.clear(); }
  // Empty one row in place (fresh layer rows). Errors: out of memory (the row is unchanged).
  Status reset(int32_t row);
  // Moves a row's state out (for a prompt cache), leaving the row empty-handed: the caller
  // then drops the row with filter(). Never fails.
  RowState take(int32_t row) { return std::move(rows_[row]); }
  // Whether every layer can be cut back to any prefix (full K/V only: no ring, no recurrent
  // state), so a single stored state serves every prefix of its tokens.
  bool any_prefix_reusable() const;

  // Outside a transaction: cut a row back to `length` positions in every layer. Errors
  // (nothing changes): length below the row's min_length() (a wrapped ring, recurrent
  // state) or above its length.
  Status truncate(int32_t row, int64_t length);

  // --- speculative transaction ---
  void begin(std::span<const int32_t> rows);
  // keep[i]: positions of rows[i] kept out of those appended since begin. Errors: a
  // layer's resolve failed (the group's state is then untrusted).
  Status resolve(std::span<const int32_t> rows, std::span<const int64_t> keep);

  // --- memory ---
  int64_t bytes() const;                       // held by all rows now
  int64_t bytes_for(int64_t n_tokens) const;   // one row of n_tokens positions, at most
  double bytes_per_token() const;              // sum over layers
  int64_t fixed_bytes_per_row() const;         // sum over layers
  // One line per distinct layout: "18 layers: kv q8_0/q8_0 ring 512 (…)".
  std::string describe() const;

 private:
  std::vector<std::shared_ptr<const Layout>> layouts_;
  std::vector<RowState> rows_;
  int64_t max_length_ = 0;
};

}  // namespace specula
