// decoding/draft.cpp — see draft.h.
#include "decoding/draft.h"

#include "decoding/draft_rows.h"
#include "decoding/draft_sampler.h"
#include "tokenizer/hf_tokenizer.h"

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
  void commit(std::span<const DraftRow>, const VerifyContext*) override {}
  void release(uint64_t) override {}

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
  ModelDraft(std::unique_ptr<Model> model, StateRows state) : model_(std::move(model)), state_(std::move(state)) {}
  std::string name() const override { return "draft-model"; }
  int64_t bytes_for(int64_t n_tokens) const override { return state_.bytes_for(n_tokens); }

  Status prefill(std::span<const DraftRow> rows, const VerifyContext*) override {
    std::vector<int32_t> next;
    Status st = sync(rows, /*feed_pending=*/false, next, nullptr);
    if (!st.is_ok())
      for (const DraftRow& r : rows) release(r.id);
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
    Status st = sync(rows, /*feed_pending=*/true, next, &first_q);
    if (!st.is_ok()) {
      for (const DraftRow& r : rows) release(r.id);
      return st;
    }
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
        brows.push_back(row_of(r.id));
        going.push_back(a);
      }
      if (going.empty()) break;
      Batch batch{static_cast<int32_t>(going.size()), 1, ids.data(), brows.data()};
      st = model_->forward(batch, state_, hidden_);
      if (!st.is_ok()) {
        for (const DraftRow& r : rows) release(r.id);
        return st;
      }
      logits_.resize(going.size() * static_cast<size_t>(V));
      model_->project_logits(hidden_.data(), static_cast<int64_t>(going.size()), logits_.data());
      for (size_t k = 0; k < going.size(); ++k) {
        const size_t b = active[going[k]];
        rows_.at(rows[b].id).cached.push_back(ids[k]);
        TokenDist dist;
        proposals[b].push_back(pick(rows[b], logits_.data() + k * V, &dist));
        if (sampled(rows[b])) q[b].push_back(std::move(dist));
      }
    }
    return Status::ok();
  }

  void commit(std::span<const DraftRow> rows, const VerifyContext* context) override {
    (void)context;
    for (const DraftRow& r : rows) settle(r.id, r.context);
  }

  void release(uint64_t id) override { rows_.release(id, state_); }

 private:
  struct RowInfo {
    std::vector<int32_t> cached;  // tokens in the row's state
    int64_t tx_base = -1;         // cached.size() at begin(), -1 when no transaction is open
    DraftSampler drafter;  // argmax, or sampled drafts on a stream of the request's own
  };

  int32_t row_of(uint64_t id) const { return rows_.row_of(id); }
  // A state row for the id (created empty on first sight). Errors: out of memory.
  Result<int32_t> ensure_row(uint64_t id) { return rows_.ensure(id, state_); }

  // Empty the id's row (its state could not follow the context).
  void reset(uint64_t id) {
    release(id);
    (void)ensure_row(id);
  }

  // Resolve an open transaction to the prefix of `context` the row holds; then the row
  // holds exactly cached == a prefix of context.
  void settle(uint64_t id, std::span<const int32_t> context) {
    RowInfo* found = rows_.find(id);
    if (found == nullptr) return;
    RowInfo& info = *found;
    const int32_t r = row_of(id);
    size_t keep = 0;
    const size_t lim = std::min(info.cached.size(), context.size());
    while (keep < lim && info.cached[keep] == context[keep]) ++keep;
    if (info.tx_base >= 0) {
      if (static_cast<int64_t>(keep) < info.tx_base) {
        // The context no longer starts with what was committed before the round.
        (void)state_.resolve(std::span<const int32_t>(&r, 1), std::vector<int64_t>{0});
        info.tx_base = -1;
        reset(id);
        return;
      }
      const int64_t k = static_cast<int64_t>(keep) - info.tx_base;
      if (!state_.resolve(std::span<const int32_t>(&r, 1), std::span<const int64_t>(&k, 1)).is_ok()) {
        info.tx_base = -1;
        reset(id);
        return;
      }
      info.tx_base = -1;
      info.cached.resize(keep);
      return;
    }
    if (keep < info.cached.size()) {
      if (state_.truncate(r, static_cast<int64_t>(keep)).is_ok()) {
        info.cached.resize(keep);
      } else {
        reset(id);
      }
    }
  }

  // Brings each row's state up to its context: keeps the common prefix, feeds the rest in
  // chunks (all rows batched). With feed_pending the rows' drafting transaction is opened
  // first (everything fed from here on can be rolled back at commit), the context's last
  // token is always fed and next[b] is the pick from its logits (the first draft); rows
  // that cannot draft (depth 0, empty, no room) get next[b] = -1. Without it every context
  // token is stored, no logits.
  Status sync(std::span<const DraftRow> rows, bool feed_pending, std::vector<int32_t>& next,
              std::vector<TokenDist>* first_q = nullptr) {
    next.assign(rows.size(), -1);
    const int64_t E = model_->info().n_embd;
    const int32_t V = static_cast<int32_t>(model_->info().n_vocab);
    std::vector<size_t> active;  // rows[] index of rows being synced
    std::vector<int64_t> fed;    // tokens of context already in the state, per active row
    for (size_t b = 0; b < rows.size(); ++b) {
      const DraftRow& r = rows[b];
      if (r.context.empty() || (feed_pending && r.max_depth <= 0)) continue;
      if (static_cast<int64_t>(r.context.size()) + r.max_depth > state_.max_length()) continue;
      auto idx = ensure_row(r.id);
      if (!idx) return idx.status();
      // Settle to the context (without its pending token: it is always fed).
      settle(r.id, r.context.subspan(0, r.context.size() - (feed_pending ? 1 : 0)));
      RowInfo& info = rows_.at(r.id);
      if (feed_pending) {
        const int32_t row = row_of(r.id);
        state_.begin(std::span<const int32_t>(&row, 1));
        info.tx_base = static_cast<int64_t>(info.cached.size());
      }
      active.push_back(b);
      fed.push_back(static_cast<int64_t>(info.cached.size()));
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
        brows.push_back(row_of(r.id));
        counts.push_back(n);
        ids.insert(ids.end(), r.context.begin() + fed[a], r.context.begin() + fed[a] + n);
        last.push_back(static_cast<int64_t>(ids.size()) - 1);
        in_batch.push_back(a);
      }
      if (in_batch.empty()) break;
      Batch batch{static_cast<int32_t>(brows.size()), 0, ids.data(), brows.data(), counts.data()};
      SPECULA_RETURN_IF_ERROR(model_->forward(batch, state_, hidden_));
      std::vector<size_t> done;  // in_batch index of rows whose context is fully fed now
      for (size_t j = 0; j < in_batch.size(); ++j) {
        const size_t a = in_batch[j];
        const DraftRow& r = rows[active[a]];
        auto& cached = rows_.at(r.id).cached;
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

  static bool sampled(const DraftRow& r) { return DraftSampler::wanted(r); }

  // The next draft token from logits [n_vocab] (decoding/draft_sampler.h).
  int32_t pick(const DraftRow& r, const float* logits, TokenDist* dist) {
    return rows_.at(r.id).drafter.pick(r, logits, static_cast<int32_t>(model_->info().n_vocab), dist);
  }

  static constexpr int64_t kChunk = 512;
  std::unique_ptr<Model> model_;
  StateRows state_;
  RequestRows<RowInfo> rows_;  // each request's state row and RowInfo
  Tensor hidden_;
  std::vector<float> sel_, logits_;
};

}  // namespace

std::unique_ptr<DraftSource> make_ngram_draft(NgramOptions options) {
  options.min_ngram = std::max(1, options.min_ngram);
  options.max_ngram = std::max(options.min_ngram, options.max_ngram);
  return std::make_unique<NgramDraft>(options);
}

Result<std::unique_ptr<DraftSource>> make_model_draft(std::unique_ptr<Model> model, int64_t max_length,
                                                      const CacheOptions& cache) {
  if (model == nullptr) return Status::error("[draft] no draft model");
  auto state = new_state(*model, cache, max_length);
  if (!state) return Status::error("[draft] " + state.message());
  return std::unique_ptr<DraftSource>(new ModelDraft(std::move(model), std::move(state).value()));
}

namespace {
// A model's token texts: tokenizer.ggml.tokens, or a Hugging Face folder's tokenizer.json.
Result<std::vector<std::string>> token_texts(const gguf::GgufFile& f) {
  if (f.find("tokenizer.ggml.tokens") != nullptr) return f.get_string_array("tokenizer.ggml.tokens");
  auto tok = tokenizer::load_tokenizer(f);
  if (!tok) return tok.status();
  std::vector<std::string> out;
  for (int32_t i = 0; i < (*tok)->vocab().size(); ++i) out.push_back((*tok)->vocab().text(i));
  return out;
}
}  // namespace

Status check_same_vocabulary(const Model& target, const Model& draft) {
  auto t = token_texts(target.file());
  auto d = token_texts(draft.file());
  if (!t) return Status::error("[draft] target vocabulary: " + t.message());
  if (!d) return Status::error("[draft] draft vocabulary: " + d.message());
  if (target.info().n_vocab != draft.info().n_vocab)
    return Status::error("[draft] the draft model's vocabulary (" + std::to_string(draft.info().n_vocab) +
                         " tokens) differs from the target's (" + std::to_string(target.info().n_vocab) + ")");
  const size_t n = std::min(t->size(), d->size());
  for (size_t i = 0; i < n; ++i)
    if ((*t)[i] != (*d)[i])
      return Status::error("[draft] token " + std::to_string(i) + " differs between target and draft vocabularies");
  // Token lists of different lengths over the same model vocabulary (a GGUF lists its padding
  // ids, a tokenizer.json does not) agree where both have tokens.
  return Status::ok();
}

}  // namespace specula
