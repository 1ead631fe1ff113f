// method/draft.cpp — see draft.h.
#include "method/draft.h"

#include <algorithm>
#include <cstring>

namespace specula {
namespace {

class NgramDraft final : public DraftSource {
 public:
  explicit NgramDraft(NgramOptions o) : o_(o) {}
  std::string name() const override { return "ngram"; }

  Status draft(std::span<const DraftRow> rows, std::vector<std::vector<int32_t>>& proposals) override {
    proposals.assign(rows.size(), {});
    for (size_t b = 0; b < rows.size(); ++b) lookup(rows[b], proposals[b]);
    return Status::ok();
  }
  void commit(std::span<const DraftRow>) override {}
  void release(int32_t) override {}

 private:
  // Most recent earlier match of the context's last n tokens, longest n first.
  void lookup(const DraftRow& r, std::vector<int32_t>& out) const {
    const auto& c = r.context;
    const int64_t L = static_cast<int64_t>(c.size());
    if (r.max_depth <= 0 || L < 2) return;
    for (int64_t n = std::min<int64_t>(o_.max_ngram, L - 1); n >= o_.min_ngram; --n) {
      const int32_t* suffix = c.data() + (L - n);
      const int64_t lo = std::max<int64_t>(0, L - n - o_.max_scan);
      // Candidate starts i with c[i..i+n) == suffix and i + n < L (something follows).
      for (int64_t i = L - n - 1; i >= lo; --i) {
        if (c[i] != suffix[0] || std::memcmp(c.data() + i, suffix, static_cast<size_t>(n) * sizeof(int32_t)) != 0)
          continue;
        const int64_t from = i + n;
        const int64_t take = std::min<int64_t>(r.max_depth, L - from);
        out.assign(c.begin() + from, c.begin() + from + take);
        return;
      }
    }
  }
  NgramOptions o_;
};

class ModelDraft final : public DraftSource {
 public:
  ModelDraft(std::unique_ptr<Model> model, KvCache cache)
      : model_(std::move(model)),
        cache_(std::move(cache)),
        cached_(static_cast<size_t>(cache_.n_rows())),
        samplers_(static_cast<size_t>(cache_.n_rows())) {}
  std::string name() const override { return "draft-model"; }

  Status prefill(std::span<const DraftRow> rows) override {
    std::vector<int32_t> next;
    Status st = sync(rows, /*feed_pending=*/false, next, nullptr);
    if (!st.is_ok())
      for (const DraftRow& r : rows) release(r.row);
    return st;
  }

  Status draft(std::span<const DraftRow> rows, std::vector<std::vector<int32_t>>& proposals) override {
    std::vector<std::vector<TokenDist>> q;
    return draft_sampled(rows, proposals, q);
  }

  Status draft_sampled(std::span<const DraftRow> rows, std::vector<std::vector<int32_t>>& proposals,
                       std::vector<std::vector<TokenDist>>& q) override {
    proposals.assign(rows.size(), {});
    q.assign(rows.size(), {});
    std::vector<int32_t> next;  // per rows[] index: the first draft, -1 when the row does not draft
    std::vector<TokenDist> first_q(rows.size());
    SPECULA_RETURN_IF_ERROR(sync(rows, /*feed_pending=*/true, next, &first_q));
    std::vector<size_t> active;  // rows[] index of rows that draft
    for (size_t b = 0; b < rows.size(); ++b)
      if (next[b] >= 0) active.push_back(b);
    if (active.empty()) return Status::ok();
    const int32_t V = static_cast<int32_t>(model_->info().n_vocab);
    std::vector<int32_t> ids, brows;
    for (size_t a = 0; a < active.size(); ++a) {
      proposals[active[a]].push_back(next[active[a]]);
      if (sampled(rows[active[a]])) q[active[a]].push_back(std::move(first_q[active[a]]));
    }
    // Drafting, all rows together; a row stops at its max_depth.
    for (int32_t step = 1;; ++step) {
      ids.clear();
      brows.clear();
      std::vector<size_t> going;
      for (size_t a = 0; a < active.size(); ++a) {
        const DraftRow& r = rows[active[a]];
        if (step >= r.max_depth) continue;
        ids.push_back(proposals[active[a]].back());
        brows.push_back(r.row);
        going.push_back(a);
      }
      if (going.empty()) break;
      Batch batch{static_cast<int32_t>(going.size()), 1, ids.data(), brows.data()};
      SPECULA_RETURN_IF_ERROR(model_->forward(batch, cache_, hidden_));
      logits_.resize(going.size() * static_cast<size_t>(V));
      model_->project_logits(hidden_.data(), static_cast<int64_t>(going.size()), logits_.data());
      for (size_t k = 0; k < going.size(); ++k) {
        const size_t b = active[going[k]];
        cached_[rows[b].row].push_back(ids[k]);
        TokenDist dist;
        proposals[b].push_back(pick(rows[b], logits_.data() + k * V, &dist));
        if (sampled(rows[b])) q[b].push_back(std::move(dist));
      }
    }
    return Status::ok();
  }

  // Brings each row's cache up to its context: keeps the common prefix, feeds the rest in
  // chunks (all rows batched). With feed_pending the context's last token is always fed and
  // next[b] is the argmax of its logits (the first draft); rows that cannot draft (depth 0,
  // empty, no room) get next[b] = -1. Without it every context token is cached, no logits.
  Status sync(std::span<const DraftRow> rows, bool feed_pending, std::vector<int32_t>& next,
              std::vector<TokenDist>* first_q = nullptr) {
    next.assign(rows.size(), -1);
    const int64_t E = model_->info().n_embd;
    const int32_t V = static_cast<int32_t>(model_->info().n_vocab);
    std::vector<size_t> active;  // rows[] index of rows being synced
    std::vector<int64_t> fed;    // tokens of context already in the cache, per active row
    for (size_t b = 0; b < rows.size(); ++b) {
      const DraftRow& r = rows[b];
      if (r.context.empty() || (feed_pending && r.max_depth <= 0)) continue;
      if (r.row < 0 || r.row >= cache_.n_rows())
        return Status::error("[draft] row " + std::to_string(r.row) + " outside the draft cache");
      if (static_cast<int64_t>(r.context.size()) + r.max_depth > cache_.n_ctx()) continue;
      auto& cached = cached_[r.row];
      size_t keep = 0;
      const size_t lim = std::min(cached.size(), r.context.size() - (feed_pending ? 1 : 0));
      while (keep < lim && cached[keep] == r.context[keep]) ++keep;
      if (keep < cached.size()) {
        if (!cache_.trim(r.row, static_cast<int64_t>(cached.size() - keep)).is_ok()) {
          cache_.clear(r.row);
          keep = 0;
        }
        cached.resize(keep);
      }
      active.push_back(b);
      fed.push_back(static_cast<int64_t>(keep));
    }
    std::vector<int32_t> ids, brows;
    std::vector<int64_t> counts, last;  // last: packed index of each row's last fed token
    for (;;) {
      ids.clear();
      brows.clear();
      counts.clear();
      last.clear();
      std::vector<size_t> in_batch;
      for (size_t a = 0; a < active.size(); ++a) {
        const DraftRow& r = rows[active[a]];
        const int64_t L = static_cast<int64_t>(r.context.size());
        if (fed[a] >= L) continue;
        const int64_t n = std::min<int64_t>(L - fed[a], kChunk);
        brows.push_back(r.row);
        counts.push_back(n);
        ids.insert(ids.end(), r.context.begin() + fed[a], r.context.begin() + fed[a] + n);
        last.push_back(static_cast<int64_t>(ids.size()) - 1);
        in_batch.push_back(a);
      }
      if (in_batch.empty()) break;
      Batch batch{static_cast<int32_t>(brows.size()), 0, ids.data(), brows.data(), counts.data()};
      SPECULA_RETURN_IF_ERROR(model_->forward(batch, cache_, hidden_));
      std::vector<size_t> done;  // in_batch index of rows whose context is fully fed now
      for (size_t j = 0; j < in_batch.size(); ++j) {
        const size_t a = in_batch[j];
        const DraftRow& r = rows[active[a]];
        auto& cached = cached_[r.row];
        cached.insert(cached.end(), r.context.begin() + fed[a], r.context.begin() + fed[a] + counts[j]);
        fed[a] += counts[j];
        if (fed[a] == static_cast<int64_t>(r.context.size())) done.push_back(j);
      }
      if (feed_pending && !done.empty()) {
        sel_.resize(done.size() * static_cast<size_t>(E));
        for (size_t k = 0; k < done.size(); ++k)
          std::memcpy(sel_.data() + k * E, hidden_.data() + last[done[k]] * E, E * sizeof(float));
        logits_.resize(done.size() * static_cast<size_t>(V));
        model_->project_logits(sel_.data(), static_cast<int64_t>(done.size()), logits_.data());
        for (size_t k = 0; k < done.size(); ++k) {
          const size_t b = active[in_batch[done[k]]];
          next[b] = pick(rows[b], logits_.data() + k * V, first_q != nullptr ? &(*first_q)[b] : nullptr);
        }
      }
    }
    return Status::ok();
  }

  void commit(std::span<const DraftRow> rows) override {
    // Drop cached drafts the context did not keep (the next draft() would do it too).
    for (const DraftRow& r : rows) {
      if (r.row < 0 || r.row >= cache_.n_rows()) continue;
      auto& cached = cached_[r.row];
      size_t keep = 0;
      const size_t lim = std::min(cached.size(), r.context.size());
      while (keep < lim && cached[keep] == r.context[keep]) ++keep;
      if (keep < cached.size()) {
        if (!cache_.trim(r.row, static_cast<int64_t>(cached.size() - keep)).is_ok()) {
          cache_.clear(r.row);
          keep = 0;
        }
        cached.resize(keep);
      }
    }
  }

  void release(int32_t row) override {
    if (row < 0 || row >= cache_.n_rows()) return;
    cache_.clear(row);
    cached_[row].clear();
    samplers_[row].reset();
  }

 private:
  static bool sampled(const DraftRow& r) { return r.sampling != nullptr && r.sampling->temperature > 0.0f; }

  // The next draft token from logits [n_vocab]: argmax, or (sampled rows) a draw from the
  // row's draft sampler's distribution, which is returned in *dist.
  int32_t pick(const DraftRow& r, const float* logits, TokenDist* dist) {
    const int32_t V = static_cast<int32_t>(model_->info().n_vocab);
    if (!sampled(r)) return argmax(logits, V);
    auto& slot = samplers_[r.row];
    if (!slot || slot->seed != r.sampling->seed) {
      SamplingParams p = *r.sampling;  // the request's chain without penalties (no history here)
      p.repeat_penalty = 1.0f;
      p.presence_penalty = 0.0f;
      p.frequency_penalty = 0.0f;
      p.repeat_last_n = 0;
      p.seed = r.sampling->seed ^ 0xD1B54A32D192ED03ULL;  // its own stream, not the request's
      slot = std::make_unique<RowSampler>(RowSampler{r.sampling->seed, Sampler(p)});
    }
    TokenDist d = slot->sampler.probabilities(logits, V);
    double total = 0.0;
    for (const auto& e : d) total += e.second;
    const double target = static_cast<double>(slot->sampler.uniform()) * total;
    double cum = 0.0;
    int32_t id = -1;  // rounding at the top of the range: the last token with weight
    for (const auto& [tok, pr] : d) {
      if (pr <= 0.0f) continue;
      cum += pr;
      id = tok;
      if (cum > target) break;
    }
    if (id < 0) id = argmax(logits, V);
    if (dist != nullptr) *dist = std::move(d);
    return id;
  }

  static constexpr int64_t kChunk = 512;
  static int32_t argmax(const float* l, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; ++i)
      if (l[i] > l[best]) best = i;
    return best;
  }
  std::unique_ptr<Model> model_;
  KvCache cache_;
  std::vector<std::vector<int32_t>> cached_;  // [n_rows] tokens in each cache row
  struct RowSampler {
    uint64_t seed;  // the request seed it was made for
    Sampler sampler;
  };
  std::vector<std::unique_ptr<RowSampler>> samplers_;  // [n_rows] draft samplers (sampled drafts)
  Tensor hidden_;
  std::vector<float> sel_, logits_;
};

}  // namespace

std::unique_ptr<DraftSource> make_ngram_draft(NgramOptions options) {
  options.min_ngram = std::max(1, options.min_ngram);
  options.max_ngram = std::max(options.min_ngram, options.max_ngram);
  return std::make_unique<NgramDraft>(options);
}

Result<std::unique_ptr<DraftSource>> make_model_draft(std::unique_ptr<Model> model, int32_t n_rows, int64_t n_ctx) {
  if (model == nullptr) return Status::error("[draft] no draft model");
  auto cache = model->new_cache(n_rows, n_ctx);
  if (!cache) return cache.status();
  return std::unique_ptr<DraftSource>(new ModelDraft(std::move(model), std::move(cache).value()));
}

Status check_same_vocabulary(const Model& target, const Model& draft) {
  auto t = target.file().get_string_array("tokenizer.ggml.tokens");
  auto d = draft.file().get_string_array("tokenizer.ggml.tokens");
  if (!t) return Status::error("[draft] target vocabulary: " + t.message());
  if (!d) return Status::error("[draft] draft vocabulary: " + d.message());
  if (target.info().n_vocab != draft.info().n_vocab)
    return Status::error("[draft] the draft model's vocabulary (" + std::to_string(draft.info().n_vocab) +
                         " tokens) differs from the target's (" + std::to_string(target.info().n_vocab) + ")");
  const size_t n = std::min(t->size(), d->size());
  for (size_t i = 0; i < n; ++i)
    if ((*t)[i] != (*d)[i])
      return Status::error("[draft] token " + std::to_string(i) + " differs between target and draft vocabularies");
  if (t->size() != d->size()) return Status::error("[draft] the vocabularies have different token counts");
  return Status::ok();
}

}  // namespace specula
