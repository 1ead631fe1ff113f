// state/recurrent_layout.cpp — recurrent state rows, snapshot + replay (see recurrent_layout.h).
#include "state/recurrent_layout.h"

#include <cstring>
#include <new>

namespace specula {

class RecurrentRow final : public LayerRow {
 public:
  explicit RecurrentRow(const RecurrentLayout* L)
      : L_(L),
        conv_(static_cast<size_t>(L->rule().conv_floats()), 0.0f),
        state_(static_cast<size_t>(L->rule().state_floats()), 0.0f) {}

  int64_t length() const override { return length_; }
  int64_t bytes() const override {
    return static_cast<int64_t>((conv_.capacity() + state_.capacity() + snap_conv_.capacity() +
                                 snap_state_.capacity() + log_.capacity()) *
                                sizeof(float));
  }
  Result<std::unique_ptr<LayerRow>> clone() const override {
    try {
      return std::unique_ptr<LayerRow>(new RecurrentRow(*this));
    } catch (const std::bad_alloc&) {
      return Status::error("[recurrent] out of memory cloning a row");
    }
  }

  void begin() override {
    tx_ = true;
    tx_base_ = length_;
    snap_conv_ = conv_;
    snap_state_ = state_;
    log_.clear();
  }
  bool in_transaction() const override { return tx_; }
  Status resolve(int64_t keep) override {
    if (!tx_) return Status::error("[recurrent] resolve without a transaction");
    const int64_t appended = length_ - tx_base_;
    if (keep < 0 || keep > appended)
      return Status::error("[recurrent] resolve keeps " + std::to_string(keep) + " of " + std::to_string(appended) +
                           " appended positions");
    if (keep < appended) {
      // Restore the snapshot and replay the kept inputs through the rule.
      conv_ = snap_conv_;
      state_ = snap_state_;
      if (keep > 0) {
        const RecurrentRule& r = L_->rule();
        std::vector<float> work(static_cast<size_t>(r.work_floats(keep)));
        r.prepare(log_.data(), keep, conv_.data(), work.data());
        for (int64_t u = 0; u < r.n_units(); ++u) r.run_unit(u, work.data(), keep, state_.data(), nullptr);
      }
      length_ = tx_base_ + keep;
    }
    tx_ = false;
    snap_conv_.clear();
    snap_state_.clear();
    log_.clear();
    return Status::ok();
  }

  int64_t min_length() const override { return length_; }
  Status truncate(int64_t length) override {
    if (length == length_ && !tx_) return Status::ok();
    return Status::error("[recurrent] a recurrent state of " + std::to_string(length_) +
                         " positions cannot be cut back to " + std::to_string(length) +
                         " (reusable only at its full length)");
  }

  void save(std::string& out) const override {
    put_bytes(out, "RCR1", 4);
    put_u64(out, static_cast<uint64_t>(length_));
    put_u64(out, conv_.size());
    put_u64(out, state_.size());
    put_bytes(out, conv_.data(), conv_.size() * sizeof(float));
    put_bytes(out, state_.data(), state_.size() * sizeof(float));
  }
  Status load(std::string_view in) override {
    const auto bad = [](const std::string& why) { return Status::error("[recurrent] cannot load row: " + why); };
    if (length_ != 0 || tx_) return bad("the row is not empty");
    char magic[4];
    uint64_t len, nc, ns;
    if (!get_bytes(in, magic, 4) || std::memcmp(magic, "RCR1", 4) != 0) return bad("not a recurrent row (bad magic)");
    if (!get_u64(in, len) || !get_u64(in, nc) || !get_u64(in, ns)) return bad("truncated header");
    if (nc != conv_.size() || ns != state_.size()) return bad("it was saved by another layout (state sizes differ)");
    if (len > (uint64_t{1} << 31)) return bad("length out of range");
    if (!get_bytes(in, conv_.data(), nc * sizeof(float)) || !get_bytes(in, state_.data(), ns * sizeof(float)))
      return bad("truncated data");
    if (!in.empty()) return bad("trailing bytes");
    length_ = static_cast<int64_t>(len);
    return Status::ok();
  }

  float* conv() { return conv_.data(); }
  float* state() { return state_.data(); }
  void log(const float* in, int64_t T) {
    if (tx_) log_.insert(log_.end(), in, in + T * L_->rule().input_floats());
  }
  void advance(int64_t T) { length_ += T; }

 private:
  const RecurrentLayout* L_;
  std::vector<float> conv_, state_;
  int64_t length_ = 0;
  bool tx_ = false;
  int64_t tx_base_ = 0;
  std::vector<float> snap_conv_, snap_state_, log_;
};

Result<std::shared_ptr<const RecurrentLayout>> RecurrentLayout::create(const RecurrentSpec& spec) {
  if (!spec.rule) return Status::error("[recurrent] a recurrent layer needs a rule");
  const RecurrentRule& r = *spec.rule;
  constexpr int64_t kMax = int64_t{1} << 30;
  if (r.conv_floats() < 0 || r.state_floats() <= 0 || r.input_floats() <= 0 || r.output_floats() <= 0 ||
      r.n_units() <= 0 || r.conv_floats() > kMax || r.state_floats() > kMax)
    return Status::error("[recurrent] rule '" + r.name() + "' has invalid sizes");
  std::shared_ptr<RecurrentLayout> L(new RecurrentLayout());
  L->rule_ = spec.rule;
  L->info_.kind = LayerKind::kRecurrent;
  L->info_.name = "recurrent " + r.name();
  L->info_.bytes_per_token = 0;
  L->info_.fixed_bytes_per_row = (r.conv_floats() + r.state_floats()) * static_cast<int64_t>(sizeof(float));
  L->info_.needs_snapshot = true;
  L->info_.any_prefix = false;
  L->info_.persistable = true;
  return std::shared_ptr<const RecurrentLayout>(std::move(L));
}

Result<std::unique_ptr<LayerRow>> RecurrentLayout::new_row() const {
  try {
    return std::unique_ptr<LayerRow>(new RecurrentRow(this));
  } catch (const std::bad_alloc&) {
    return Status::error("[recurrent] out of memory");
  }
}

int64_t RecurrentLayout::bytes_for(int64_t n_tokens) const {
  (void)n_tokens;
  // State plus, while a round is open, its snapshot (the input log is a few tokens).
  return 2 * info_.fixed_bytes_per_row;
}

void RecurrentLayout::run(ThreadPool& pool, std::span<LayerRow* const> rows, const int64_t* offset, const float* in,
                          float* out, RecurrentScratch& scratch) const {
  const RecurrentRule& r = *rule_;
  const int64_t B = static_cast<int64_t>(rows.size());
  const int64_t nin = r.input_floats(), nout = r.output_floats(), U = r.n_units();
  scratch.work_off.assign(static_cast<size_t>(B) + 1, 0);
  for (int64_t b = 0; b < B; ++b) scratch.work_off[b + 1] = scratch.work_off[b] + r.work_floats(offset[b + 1] - offset[b]);
  scratch.work.resize(static_cast<size_t>(scratch.work_off[B]));
  for (int64_t b = 0; b < B; ++b) {
    auto& row = static_cast<RecurrentRow&>(*rows[b]);
    row.log(in + offset[b] * nin, offset[b + 1] - offset[b]);
  }
  // Phase 1 per row, phase 2 per (row, unit).
  pool.run([&](int ith, int nth) {
    auto [a, e] = ThreadPool::split(B, ith, nth);
    for (int64_t b = a; b < e; ++b) {
      auto& row = static_cast<RecurrentRow&>(*rows[b]);
      r.prepare(in + offset[b] * nin, offset[b + 1] - offset[b], row.conv(), scratch.work.data() + scratch.work_off[b]);
    }
  });
  pool.run([&](int ith, int nth) {
    auto [a, e] = ThreadPool::split(B * U, ith, nth);
    for (int64_t i = a; i < e; ++i) {
      const int64_t b = i / U, u = i % U;
      auto& row = static_cast<RecurrentRow&>(*rows[b]);
      r.run_unit(u, scratch.work.data() + scratch.work_off[b], offset[b + 1] - offset[b], row.state(),
                 out + offset[b] * nout);
    }
  });
  for (int64_t b = 0; b < B; ++b) static_cast<RecurrentRow&>(*rows[b]).advance(offset[b + 1] - offset[b]);
}

namespace {
Result<std::shared_ptr<const Layout>> make_recurrent(const LayerSpec& spec, const CacheOptions& o,
                                                     const kernels::KernelTable& kt) {
  (void)o;
  (void)kt;
  auto l = RecurrentLayout::create(spec.recurrent);
  if (!l) return l.status();
  return std::shared_ptr<const Layout>(*l);
}
const bool kRegistered = register_layout(LayerKind::kRecurrent, &make_recurrent);
}  // namespace

}  // namespace specula
