// decoding/feature_draft.cpp — see feature_draft.h.
#include "decoding/feature_draft.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <span>

#include "decoding/draft_rows.h"
#include "decoding/draft_sampler.h"

namespace specula {
namespace {

class FeatureDraft final : public DraftSource {
 public:
  FeatureDraft(std::unique_ptr<FeatureHead> head, StateRows state)
      : h_(std::move(head)), state_(std::move(state)), shift_(h_->leading_pair() ? 1 : 0) {}
  std::string name() const override { return h_->name(); }
  std::vector<int32_t> hidden_taps() const override { return h_->hidden_taps(); }
  int64_t bytes_for(int64_t n_tokens) const override { return state_.bytes_for(n_tokens + shift_); }

  // With a leading pair (FeatureHead::leading_pair) every call sees each row's context with
  // one token put first and positions one later: pair p then holds (x_p, g_{p-1}), and the
  // virtual position 0's feature, never computed, is zero.
  Status prefill(std::span<const DraftRow> rows, const VerifyContext* context) override {
    if (shift_ != 0) return prefill_rows(shifted(rows), shifted(context));
    return prefill_rows(rows, context);
  }
  Status draft(std::span<const DraftRow> rows, std::vector<std::vector<int32_t>>& proposals) override {
    std::vector<std::vector<TokenDist>> q;
    return draft_sampled(rows, proposals, q);
  }
  Status draft_sampled(std::span<const DraftRow> rows, std::vector<std::vector<int32_t>>& proposals,
                       std::vector<std::vector<TokenDist>>& q) override {
    q.assign(rows.size(), {});
    if (shift_ != 0) return draft_rows(shifted(rows), proposals, q);
    return draft_rows(rows, proposals, q);
  }
  void commit(std::span<const DraftRow> rows, const VerifyContext* context) override {
    if (shift_ != 0) return commit_rows(shifted(rows), shifted(context));
    commit_rows(rows, context);
  }

 private:
  std::span<const DraftRow> shifted(std::span<const DraftRow> rows) {
    shift_ctx_.resize(rows.size());
    shift_rows_.assign(rows.begin(), rows.end());
    for (size_t b = 0; b < rows.size(); ++b) {
      std::vector<int32_t>& c = shift_ctx_[b];
      c.clear();
      if (!rows[b].context.empty()) c.push_back(rows[b].context.front());  // (never fed)
      c.insert(c.end(), rows[b].context.begin(), rows[b].context.end());
      shift_rows_[b].context = c;
    }
    return shift_rows_;
  }
  const VerifyContext* shifted(const VerifyContext* vc) {
    if (vc == nullptr) return nullptr;
    shift_vc_ = *vc;
    shift_pos_.assign(vc->pos.begin(), vc->pos.end());
    for (int64_t& p : shift_pos_) ++p;
    shift_vc_.pos = shift_pos_;
    return &shift_vc_;
  }

  Status prefill_rows(std::span<const DraftRow> rows, const VerifyContext* context) {
    Status st = take_features(rows, context);
    if (st.is_ok()) st = feed_backlog(rows, 0);
    if (!st.is_ok())
      for (const DraftRow& r : rows) release(r.id);
    return st;
  }

  Status draft_rows(std::span<const DraftRow> rows, std::vector<std::vector<int32_t>>& proposals,
                    std::vector<std::vector<TokenDist>>& q) {
    proposals.assign(rows.size(), {});
    std::vector<size_t> which;
    std::vector<int64_t> upto;
    for (size_t b = 0; b < rows.size(); ++b) {
      const DraftRow& r = rows[b];
      const auto L = static_cast<int64_t>(r.context.size());
      if (L < 2 || r.max_depth <= 0 || L - 1 + r.max_depth > state_.max_length()) continue;
      auto row = ensure_row(r.id);
      if (!row) return fail(rows, row.status());
      close_tx(r.id);  // (each of these may reset the row: look it up after them)
      settle(r.id, r.context);
      rewind(r.id, L - 2);  // the boundary pair (x_{L-1}, g_{L-2}) samples: it is fed now
      RowInfo* found = find(r.id);
      if (found == nullptr) continue;  // (a reset that could not make the row again: no drafts)
      RowInfo& info = *found;
      pad_features(info, L - 1);
      const int32_t sr = row_of(r.id);
      state_.begin(std::span<const int32_t>(&sr, 1));
      info.tx_base = fed(info);
      which.push_back(b);
      upto.push_back(L - 1);
    }
    if (which.empty()) return Status::ok();
    const int64_t E = h_->width();
    std::vector<float> y(which.size() * static_cast<size_t>(E));
    Status st = feed(rows, which, upto, y.data());
    if (!st.is_ok()) return fail(rows, st);
    pick(rows, which, y.data(), proposals, q);
    // The chain: (d_j, y_{j-1}) at the next position, all rows together, up to each row's depth.
    std::vector<int32_t> ids, brows;
    std::vector<int64_t> counts;
    std::vector<float> g;
    std::vector<size_t> going_rows;
    for (int32_t step = 1;; ++step) {
      std::vector<size_t> going;  // index into which
      for (size_t a = 0; a < which.size(); ++a)
        if (step < rows[which[a]].max_depth) going.push_back(a);
      if (going.empty()) break;
      ids.clear();
      brows.clear();
      counts.assign(going.size(), 1);
      g.resize(going.size() * static_cast<size_t>(E));
      for (size_t k = 0; k < going.size(); ++k) {
        const size_t a = going[k];
        ids.push_back(proposals[which[a]].back());
        brows.push_back(row_of(rows[which[a]].id));
        std::memcpy(g.data() + k * E, y.data() + a * E, static_cast<size_t>(E) * sizeof(float));
      }
      st = forward(ids, g.data(), brows, counts, y_step_);
      if (!st.is_ok()) return fail(rows, st);
      going_rows.clear();
      for (size_t a : going) going_rows.push_back(which[a]);
      pick(rows, going_rows, y_step_.data(), proposals, q);
      for (size_t k = 0; k < going.size(); ++k)
        std::memcpy(y.data() + going[k] * E, y_step_.data() + k * E, static_cast<size_t>(E) * sizeof(float));
    }
    return Status::ok();
  }

  void commit_rows(std::span<const DraftRow> rows, const VerifyContext* context) {
    for (const DraftRow& r : rows) {
      if (!ensure_row(r.id)) {
        release(r.id);
        continue;
      }
      close_tx(r.id);
      settle(r.id, r.context);
    }
    // Rows that commit without drafting (throttled, near their end) would pile up features:
    // past a chunk they are paired now.
    if (!take_features(rows, context).is_ok() || !feed_backlog(rows, kChunk).is_ok())
      for (const DraftRow& r : rows) release(r.id);
  }


 public:
  void release(uint64_t id) override { rows_.release(id, state_); }

 private:
  // A request's row: pair p (p < fed) in the state holds (tokens[p] = x_{p+1}, g_p); feats
  // holds g of positions fed .. fed + n - 1 (not paired yet).
  struct RowInfo {
    std::vector<int32_t> tokens;
    int64_t zeros = 0;         // features of positions fed .. fed + zeros - 1 are zero (never computed)
    std::vector<float> feats;  // [n, E] the features after those
    int64_t tx_base = -1;      // fed at begin(); -1: no transaction open
    DraftSampler drafter;      // argmax, or draws for rejection sampling
  };
  static int64_t fed(const RowInfo& info) { return static_cast<int64_t>(info.tokens.size()); }
  int64_t feat_end(const RowInfo& info) const {
    return fed(info) + info.zeros + static_cast<int64_t>(info.feats.size()) / h_->width();
  }
  // Zero features up to position `end` (a count, not memory, when nothing follows them).
  void pad_features(RowInfo& info, int64_t end) {
    const int64_t gap = end - feat_end(info);
    if (gap <= 0) return;
    if (info.feats.empty())
      info.zeros += gap;
    else
      info.feats.resize(info.feats.size() + static_cast<size_t>(gap * h_->width()), 0.0f);
  }
  RowInfo* find(uint64_t id) { return rows_.find(id); }

  int32_t row_of(uint64_t id) const { return rows_.row_of(id); }
  Result<int32_t> ensure_row(uint64_t id) { return rows_.ensure(id, state_); }
  // Drop every row of the batch (their state is rebuilt from later features: only speed is lost).
  Status fail(std::span<const DraftRow> rows, Status st) {
    for (const DraftRow& r : rows) release(r.id);
    return st;
  }
  // Resolve an open drafting transaction: the real pairs fed in it stay, the chain goes.
  void close_tx(uint64_t id) {
    RowInfo* found = find(id);
    if (found == nullptr || found->tx_base < 0) return;
    RowInfo& info = *found;
    const int32_t r = row_of(id);
    const int64_t k = fed(info) - info.tx_base;
    info.tx_base = -1;
    if (!state_.resolve(std::span<const int32_t>(&r, 1), std::span<const int64_t>(&k, 1)).is_ok()) reset(id);
  }
  // Keep the pairs whose tokens still match the context (x_{p+1} == context[p + 1]).
  void settle(uint64_t id, std::span<const int32_t> context) {
    const RowInfo* found = find(id);
    if (found == nullptr) return;
    const RowInfo& info = *found;
    int64_t keep = 0;
    const int64_t lim = std::min<int64_t>(fed(info), static_cast<int64_t>(context.size()) - 1);
    while (keep < lim && info.tokens[keep] == context[keep + 1]) ++keep;
    if (keep < fed(info)) rewind(id, keep);
  }
  // Cut the row back to its first n pairs (features from position n on are dropped).
  void rewind(uint64_t id, int64_t n) {
    RowInfo* found = find(id);
    if (found == nullptr) return;
    RowInfo& info = *found;
    n = std::max<int64_t>(n, 0);
    if (n >= fed(info)) return;
    if (!state_.truncate(row_of(id), n).is_ok()) {
      reset(id);
      return;
    }
    info.tokens.resize(static_cast<size_t>(n));
    info.feats.clear();
    info.zeros = 0;
  }
  void reset(uint64_t id) {
    release(id);
    (void)ensure_row(id);
  }

  // Feeds the pairs of each row whose unpaired features number more than `above`, all but
  // the last available pair (draft() feeds that one with an output).
  Status feed_backlog(std::span<const DraftRow> rows, int64_t above) {
    std::vector<size_t> which;
    std::vector<int64_t> upto;
    for (size_t b = 0; b < rows.size(); ++b) {
      const RowInfo* info = find(rows[b].id);
      if (info == nullptr || info->tx_base >= 0) continue;
      const int64_t avail = std::min<int64_t>(feat_end(*info), static_cast<int64_t>(rows[b].context.size()) - 1);
      if (avail - 1 > fed(*info) + above && avail <= state_.max_length()) {
        which.push_back(b);
        upto.push_back(avail - 1);
      }
    }
    return which.empty() ? Status::ok() : feed(rows, which, upto, nullptr);
  }

  // Stores the forward's features of each row's kept positions (one FeatureHead::features
  // call for all rows).
  Status take_features(std::span<const DraftRow> rows, const VerifyContext* vc) {
    const float* src = vc != nullptr ? h_->source(*vc) : nullptr;
    if (src == nullptr || vc->first.size() != rows.size() || vc->pos.size() != rows.size() ||
        vc->kept.size() != rows.size())
      return Status::ok();
    const int64_t W = h_->source_width(), E = h_->width();
    int64_t n = 0;
    for (size_t b = 0; b < rows.size(); ++b) n += std::max<int64_t>(vc->kept[b], 0);
    if (n == 0) return Status::ok();
    x_.resize(static_cast<size_t>(n * W));
    int64_t at = 0;
    for (size_t b = 0; b < rows.size(); ++b) {
      if (vc->kept[b] <= 0) continue;
      std::memcpy(x_.data() + at * W, src + vc->first[b] * W, static_cast<size_t>(vc->kept[b] * W) * sizeof(float));
      at += vc->kept[b];
    }
    g_.resize(static_cast<size_t>(n * E));
    h_->features(x_.data(), n, g_.data());
    at = 0;
    for (size_t b = 0; b < rows.size(); ++b) {
      const int64_t k = vc->kept[b];
      if (k <= 0) continue;
      const float* g = g_.data() + at * E;
      at += k;
      auto row = ensure_row(rows[b].id);
      if (!row) return row.status();
      const int64_t p = vc->pos[b];
      rewind(rows[b].id, p);  // positions computed again: their pairs go
      RowInfo* found = find(rows[b].id);
      if (found == nullptr) continue;
      RowInfo& now = *found;
      const int64_t base = fed(now) + now.zeros;  // the position of feats' first row
      if (p < base) {
        now.zeros = p - fed(now);
        now.feats.clear();
      } else if (p > feat_end(now)) {
        pad_features(now, p);  // the target skipped them (a prompt-cache hit, a step without taps)
      } else {
        now.feats.resize(static_cast<size_t>((p - base) * E));
      }
      now.feats.insert(now.feats.end(), g, g + k * E);
    }
    return Status::ok();
  }

  // Feeds rows[which[a]]'s pairs p in [fed, upto[a]) (chunks, all rows batched); y_last
  // (optional, [which.size(), E]) gets each row's last pair's pre-norm output.
  Status feed(std::span<const DraftRow> rows, std::span<const size_t> which, std::span<const int64_t> upto, float* y_last) {
    const int64_t E = h_->width();
    std::vector<int32_t> ids, brows;
    std::vector<int64_t> counts;
    std::vector<float> g;
    for (;;) {
      ids.clear();
      brows.clear();
      counts.clear();
      g.clear();
      std::vector<size_t> in;  // index into which
      for (size_t a = 0; a < which.size(); ++a) {
        const DraftRow& r = rows[which[a]];
        const RowInfo& info = rows_.at(r.id);
        const int64_t p0 = fed(info), n = std::min<int64_t>(upto[a] - p0, kChunk);
        if (n <= 0) continue;
        in.push_back(a);
        brows.push_back(row_of(r.id));
        counts.push_back(n);
        ids.insert(ids.end(), r.context.begin() + p0 + 1, r.context.begin() + p0 + 1 + n);
        const int64_t z = std::min(n, info.zeros);
        g.resize(g.size() + static_cast<size_t>(z * E), 0.0f);
        g.insert(g.end(), info.feats.begin(), info.feats.begin() + (n - z) * E);
      }
      if (in.empty()) return Status::ok();
      SPECULA_RETURN_IF_ERROR(forward(ids, g.data(), brows, counts, y_step_));
      int64_t at = 0;
      for (size_t k = 0; k < in.size(); ++k) {
        const size_t a = in[k];
        const DraftRow& r = rows[which[a]];
        RowInfo& info = rows_.at(r.id);
        const int64_t p0 = fed(info), n = counts[k];
        info.tokens.insert(info.tokens.end(), r.context.begin() + p0 + 1, r.context.begin() + p0 + 1 + n);
        const int64_t z = std::min(n, info.zeros);
        info.zeros -= z;
        info.feats.erase(info.feats.begin(), info.feats.begin() + (n - z) * E);
        at += n;
        if (y_last != nullptr && fed(info) == upto[a])
          std::memcpy(y_last + a * E, y_step_.data() + (at - 1) * E, static_cast<size_t>(E) * sizeof(float));
      }
    }
  }

  // One forward of the head's layer: rows brows[b] append counts[b] pairs (ids, g [M, E]);
  // y [M, E] gets the outputs.
  Status forward(const std::vector<int32_t>& ids, const float* g, const std::vector<int32_t>& brows,
                 const std::vector<int64_t>& counts, std::vector<float>& y) {
    Batch batch{static_cast<int32_t>(brows.size()), 0, ids.data(), brows.data(), counts.data()};
    SPECULA_RETURN_IF_ERROR(plan_batch(batch, state_, h_->vocab(), h_->who(), layout_));
    y.resize(static_cast<size_t>(layout_.M * h_->width()));
    h_->layer(batch, layout_, state_, ids.data(), g, y.data());
    for (int32_t b = 0; b < batch.B; ++b) state_.advance(batch.rows[b], batch.tokens_of(b));
    return Status::ok();
  }
  // The next draft of rows[at[k]] from output k of y [at.size(), E], appended to its
  // proposals: the argmax (ties: the lowest target id), or for rows drawn for rejection
  // sampling a draw over the target vocabulary, its distribution appended to q.
  void pick(std::span<const DraftRow> rows, std::span<const size_t> at, const float* y,
            std::vector<std::vector<int32_t>>& proposals, std::vector<std::vector<TokenDist>>& q) {
    const int64_t W = h_->logits_width(), V = h_->vocab(), n = static_cast<int64_t>(at.size());
    const int32_t* ids = h_->logit_ids();
    logits_.resize(static_cast<size_t>(n * W));
    h_->logits(y, n, logits_.data());
    for (int64_t k = 0; k < n; ++k) {
      const DraftRow& r = rows[at[k]];
      const float* l = logits_.data() + k * W;
      RowInfo* info = find(r.id);
      if (!DraftSampler::wanted(r) || info == nullptr) {
        int64_t best = 0;
        for (int64_t i = 1; i < W; ++i) {
          const bool lower_id = ids != nullptr && ids[i] < ids[best];
          if (l[i] > l[best] || (l[i] == l[best] && lower_id)) best = i;
        }
        proposals[at[k]].push_back(ids != nullptr ? ids[best] : static_cast<int32_t>(best));
        if (DraftSampler::wanted(r)) q[at[k]].emplace_back();  // (no row: q(x) = 0, always rejected)
        continue;
      }
      if (ids != nullptr) {  // the draft vocabulary placed at its target ids
        full_.assign(static_cast<size_t>(V), -std::numeric_limits<float>::infinity());
        for (int64_t i = 0; i < W; ++i) full_[static_cast<size_t>(ids[i])] = l[i];
        l = full_.data();
      }
      TokenDist dist;
      proposals[at[k]].push_back(info->drafter.pick(r, l, static_cast<int32_t>(V), &dist));
      q[at[k]].push_back(std::move(dist));
    }
  }

  static constexpr int64_t kChunk = 512;
  std::unique_ptr<FeatureHead> h_;
  StateRows state_;
  RequestRows<RowInfo> rows_;  // each request's state row and RowInfo
  BatchLayout layout_;
  const int64_t shift_;  // 1: a leading pair (contexts and positions shifted by one)
  std::vector<std::vector<int32_t>> shift_ctx_;
  std::vector<DraftRow> shift_rows_;
  std::vector<int64_t> shift_pos_;
  VerifyContext shift_vc_;
  std::vector<float> x_, g_, y_step_, logits_, full_;
};

}  // namespace

Result<std::unique_ptr<DraftSource>> make_feature_draft(std::unique_ptr<FeatureHead> head, int64_t max_length,
                                                        const CacheOptions& cache) {
  const int64_t extra = head->leading_pair() ? 1 : 0;  // the leading pair's position
  auto state = StateRows::create({head->layer_spec()}, cache, kernels::active(), max_length + extra);
  if (!state) return Status::error(std::string(head->who()) + " " + state.message());
  return std::unique_ptr<DraftSource>(new FeatureDraft(std::move(head), std::move(state).value()));
}

}  // namespace specula
