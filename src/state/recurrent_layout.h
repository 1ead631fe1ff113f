// state/recurrent_layout.h — recurrent state (SSM / linear attention): a fixed-size state
// per row, advanced token by token by the mixer's rule.
//
// A recurrent layer keeps, per row, a short convolution state (the last conv_kernel - 1
// inputs of its causal depthwise convolution) and a recurrent state (e.g. one
// [head_k, head_v] matrix per head for a gated delta rule). It cannot be trimmed: a row's
// state is only valid at its current length. Rollback therefore works by snapshot and
// replay (docs/ARCHITECTURE.md, Speculative transaction): begin() copies the state and starts a log
// of the per-token inputs the rule consumes; resolve(keep) restores the copy and runs the
// rule again over the first `keep` logged inputs (cheap: no matmul, only the recurrence).
// The rule processes tokens strictly one after another, so a state reached through a
// verify window + replay is bitwise the state plain decoding would reach.
// The rule (the update's math) belongs to the model's mixer block; this layout stores,
// batches, snapshots and replays. Does not project inputs or outputs.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "state/layout.h"

namespace specula {

// A recurrent mixer's per-token state update. Implementations must be deterministic and
// token-sequential (the result for a token never depends on how many tokens a call holds).
class RecurrentRule {
 public:
  virtual ~RecurrentRule() = default;
  virtual std::string name() const = 0;       // e.g. "gated-delta-net"
  virtual int64_t conv_floats() const = 0;    // conv state per row
  virtual int64_t state_floats() const = 0;   // recurrent state per row
  virtual int64_t input_floats() const = 0;   // per-token input (what the log keeps)
  virtual int64_t output_floats() const = 0;  // per-token output
  virtual int64_t n_units() const = 0;        // independent parts of the state (heads), run in parallel
  virtual int64_t work_floats(int64_t T) const = 0;  // scratch prepare() fills for T tokens
  // Phase 1, whole row: in [T, input_floats] -> work; advances the conv state.
  virtual void prepare(const float* in, int64_t T, float* conv_state, float* work) const = 0;
  // Phase 2, unit u: reads work, advances its part of state, writes its part of
  // out [T, output_floats] (out is null during a replay).
  virtual void run_unit(int64_t u, const float* work, int64_t T, float* state, float* out) const = 0;
};

// Scratch for RecurrentLayout::run, reused across steps (grows only).
struct RecurrentScratch {
  std::vector<float> work;
  std::vector<int64_t> work_off;
};

class RecurrentLayout final : public Layout {
 public:
  // Errors: no rule, or sizes out of range.
  static Result<std::shared_ptr<const RecurrentLayout>> create(const RecurrentSpec& spec);

  const LayoutInfo& info() const override { return info_; }
  Result<std::unique_ptr<LayerRow>> new_row() const override;
  int64_t bytes_for(int64_t n_tokens) const override;
  const RecurrentRule& rule() const { return *rule_; }

  // One step: row b (rows[b]) consumes tokens [offset[b], offset[b+1]) of
  // in [M, input_floats] and writes out [M, output_floats]; each row's length grows by
  // its token count. Rows in a transaction log their inputs.
  void run(ThreadPool& pool, std::span<LayerRow* const> rows, const int64_t* offset, const float* in, float* out,
           RecurrentScratch& scratch) const;

 private:
  RecurrentLayout() = default;
  std::shared_ptr<const RecurrentRule> rule_;
  LayoutInfo info_;
};

}  // namespace specula
