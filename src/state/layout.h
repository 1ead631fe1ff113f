// state/layout.h — cache layouts: what a model declares per layer, what a layout can do.
//
// A model declares one LayerSpec per layer (its kind and geometry); it never builds a
// cache. make_layout() maps a spec plus the user's CacheOptions to a Layout: the
// per-layer descriptor that owns how that layer's state is encoded and stored, and that
// creates the per-row storage (LayerRow) a StateRows group holds (state/state_rows.h).
// What a layout can do is stated through what it provides (docs/ARCHITECTURE.md, Layout capability),
// never by checks of the model family:
//   LayoutInfo           name, bytes per token / fixed bytes per row, whether rollback
//                        needs a snapshot, whether rows persist (save/load);
//   LayerRow::begin/resolve   the speculative transaction (keep a prefix of what was
//                        appended since begin);
//   LayerRow::truncate / min_length   how far a row can be cut back outside a transaction,
//                        i.e. the smallest prefix from which its state can be reused;
//   LayerRow::save/load  the persistence codec.
// Kinds today: attention K/V (full or sliding window; codecs per K and V; optionally
// delayed quantization) — state/kv_layout.h; recurrent state (conv + linear-attention
// state, snapshot + replay) — state/recurrent_layout.h. A new layout is a new file that
// registers a factory for its kind; the engine and the architectures do not change.
// Does not schedule, batch or attend.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/kernels.h"
#include "specula/status.h"

namespace specula {

class RecurrentRule;  // state/recurrent_layout.h

enum class LayerKind {
  kAttention,  // K/V per position (full, or a sliding window)
  kRecurrent,  // a fixed-size state per row (SSM / linear attention), updated per token
};

struct AttentionSpec {
  int64_t n_kv_heads = 0;
  int64_t head_dim_k = 0;
  int64_t head_dim_v = 0;
  int64_t window = 0;  // 0 = full attention; else a query at p sees keys (p - window, p]
  // Optional constant parts of K and V, [n_kv_heads * head_dim] (null = none): a
  // quantizing layout stores k - key_offset and v - value_offset, so a large constant
  // component (e.g. Qwen2's K/V projection biases, hundreds in a few channels) does not eat
  // the quantizer's range. Exact for attention: every score of a query shifts by the same
  // q·key_offset (softmax is shift-invariant), and value_offset is added back to the output
  // (the weights sum to 1). Plain float layouts ignore them (their numbers stay unchanged).
  std::shared_ptr<const std::vector<float>> key_offset, value_offset;
  // Optional per-channel scale of K, [n_kv_heads * head_dim_k] (null = none; entries > 0):
  // a quantizing layout stores (k - key_offset) / key_scale and attention multiplies each
  // query by key_scale, which leaves q·k unchanged. Models whose keys carry a learned
  // per-channel gain (QK-norm weights) provide it, so no channel dominates the quantizer.
  std::shared_ptr<const std::vector<float>> key_scale;
};

// An attention layer with equal K and V head sizes and no offsets.
inline AttentionSpec attention_spec(int64_t n_kv_heads, int64_t head_dim, int64_t window) {
  AttentionSpec s;
  s.n_kv_heads = n_kv_heads;
  s.head_dim_k = s.head_dim_v = head_dim;
  s.window = window;
  return s;
}

struct RecurrentSpec {
  // The mixer's state update (owned by the model block, run by the layout). Its sizes
  // (conv and recurrent state floats, per-token inputs) are the layout's geometry.
  std::shared_ptr<const RecurrentRule> rule;
};

struct LayerSpec {
  LayerKind kind = LayerKind::kAttention;
  AttentionSpec attention;  // kAttention
  RecurrentSpec recurrent;  // kRecurrent
};

// The user's choice of cache precision (CLI --cache-type-k/-v, --kv-delay).
struct CacheOptions {
  std::string type_k = "f16";  // a KV codec name (state/kv_codec.h)
  std::string type_v = "f16";
  // Delayed quantization: a query sees keys/values of its own newest `delay` positions in
  // f16 and older ones through type_k/type_v (0 = off; needs a quantized type).
  int64_t delay = 0;
};

struct LayoutInfo {
  std::string name;              // e.g. "kv f16/f16", "kv q8_0/q8_0 ring 512", "recurrent"
  LayerKind kind = LayerKind::kAttention;
  double bytes_per_token = 0;    // per row, per stored position (0 for recurrent state)
  int64_t max_positions = 0;     // stored positions per row at most (ring size; 0 = unbounded)
  int64_t fixed_bytes_per_row = 0;  // independent of length (recurrent state, f16 recent tier)
  bool needs_snapshot = false;   // rollback restores a snapshot (and replays), not a trim
  bool any_prefix = true;        // a row can always be cut back to any prefix (min_length 0)
  bool persistable = true;       // LayerRow::save/load work
};

// One layer's state for ONE row. Created by its Layout; moved between groups whole.
class LayerRow {
 public:
  virtual ~LayerRow() = default;
  // Positions the row holds (= the position of its next token).
  virtual int64_t length() const = 0;
  // Bytes of memory held now.
  virtual int64_t bytes() const = 0;
  // A deep copy. Errors: out of memory.
  virtual Result<std::unique_ptr<LayerRow>> clone() const = 0;

  // Speculative transaction: begin() marks the current length L0; positions appended
  // after it may be dropped by resolve(keep), which keeps L0 + keep positions (keep <=
  // appended). A layout that cannot trim snapshots at begin and restores + replays.
  // Errors: keep out of range, or no transaction open.
  virtual void begin() = 0;
  virtual Status resolve(int64_t keep) = 0;
  virtual bool in_transaction() const = 0;

  // Outside a transaction: cut the row back to `length` positions. Errors (nothing
  // changes) when length < min_length() or > length().
  virtual Status truncate(int64_t length) = 0;
  // The shortest length truncate() accepts: 0 for full K/V, the window edge for a ring
  // that has wrapped, length() for recurrent state (reusable only as a whole).
  virtual int64_t min_length() const = 0;

  // Persistence codec: the row's whole state as bytes, and back (into an empty row of
  // the same layout). Errors: a blob of another layout, size or version.
  virtual void save(std::string& out) const = 0;
  virtual Status load(std::string_view blob) = 0;
};

// One layer's layout: immutable after creation, shared by every row and group using it.
class Layout {
 public:
  virtual ~Layout() = default;
  virtual const LayoutInfo& info() const = 0;
  // An empty row. Errors: out of memory.
  virtual Result<std::unique_ptr<LayerRow>> new_row() const = 0;
  // Bytes one row holds at most when it stores n_tokens positions (what admission
  // reserves for a request of that many tokens).
  virtual int64_t bytes_for(int64_t n_tokens) const = 0;
};

// The layout for one layer. Errors name the layer's problem: an unknown cache type (the
// valid ones are listed), a codec that cannot store this head_dim, a delay without a
// quantized type, a spec without a rule.
Result<std::shared_ptr<const Layout>> make_layout(const LayerSpec& spec, const CacheOptions& options,
                                                  const kernels::KernelTable& kt);

// Registration of a layout kind's factory (state/kv_layout.cpp, state/recurrent_layout.cpp).
using LayoutFactory = Result<std::shared_ptr<const Layout>> (*)(const LayerSpec&, const CacheOptions&,
                                                                const kernels::KernelTable&);
bool register_layout(LayerKind kind, LayoutFactory factory);

// Serialization helpers shared by layouts' save/load: little-endian PODs.
void put_u64(std::string& out, uint64_t v);
bool get_u64(std::string_view& in, uint64_t& v);
void put_bytes(std::string& out, const void* p, size_t n);
bool get_bytes(std::string_view& in, void* p, size_t n);

}  // namespace specula
