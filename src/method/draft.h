// method/draft.h — draft sources for speculative decoding (DESIGN.md "Draft source").
//
// A draft source proposes, for each running row, up to `max_depth` tokens that continue
// the row's context (prompt + emitted tokens; its last token is the pending one, which the
// target has not consumed yet). The target verifies the proposals in one forward and keeps
// the accepted prefix; `commit` then tells the source what the context became, so a source
// with state (a draft model's cache rows) can drop what was rejected.
// Sources here:
//   * NgramDraft — prompt lookup decoding (Saxena 2023, "Prompt Lookup Decoding"; also
//     llama.cpp's `--lookup`/ngram drafts): find the most recent earlier occurrence of the
//     context's last n tokens (n from max_ngram down to min_ngram) and propose what followed.
//     No model, no state.
//   * DraftModel — a small model with the target's vocabulary and its own cache rows
//     (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding";
//     Chen et al. 2023): catches its cache up with the context (chunked), then drafts
//     greedily, all rows batched in each forward.
// The interface leaves room for sources that read the target's hidden states (heads such
// as Medusa/EAGLE): they would take the verify forward's hidden taps in commit().
// Draft sources never decide acceptance; the round (engine) does.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "method/sampler.h"
#include "model/model.h"
#include "specula/status.h"

namespace specula {

struct DraftRow {
  int32_t row = 0;                   // the engine's cache row (a draft model uses the same index)
  std::span<const int32_t> context;  // prompt + emitted tokens; back() is the pending token
  int32_t max_depth = 0;             // propose at most this many (>= 0)
  // The request's sampling parameters, for draft_sampled(); nullptr = draft greedily.
  const SamplingParams* sampling = nullptr;
};

class DraftSource {
 public:
  virtual ~DraftSource() = default;
  virtual std::string name() const = 0;
  // proposals[b]: up to rows[b].max_depth tokens (possibly none). Errors: the source's
  // model failed (the engine then runs those rows without speculation).
  virtual Status draft(std::span<const DraftRow> rows, std::vector<std::vector<int32_t>>& proposals) = 0;
  // Like draft(), but a source that can sample (a draft model) draws each proposal from
  // its own distribution under rows[b].sampling (temperature > 0; penalties off) and
  // returns that distribution in q[b][i], for rejection sampling (method/speculative.h).
  // q[b] stays empty for rows drafted greedily or deterministically (n-gram): the round
  // then uses exact-match acceptance for them. The draws come from a per-row RNG seeded
  // from the request's seed (fresh for each request in the row). Whether a row drafts in
  // a step can depend on the load (EngineOptions::spec_max_batch), so with rejection
  // sampling a seed's text may vary with concurrency; its distribution does not.
  virtual Status draft_sampled(std::span<const DraftRow> rows, std::vector<std::vector<int32_t>>& proposals,
                               std::vector<std::vector<TokenDist>>& q) {
    q.assign(rows.size(), {});
    return draft(rows, proposals);
  }
  // During the prompt phase: the target has just consumed rows[b].context (the prompt so
  // far; no pending token). A source with state may process it now, so that the first
  // draft() only has the first sampled token to catch up; the default does nothing.
  // Errors: the source's model failed (its state for those rows is then dropped and
  // rebuilt by the next draft()).
  virtual Status prefill(std::span<const DraftRow> rows) {
    (void)rows;
    return Status::ok();
  }
  // After a round: each row's context now (accepted drafts and the correction appended).
  virtual void commit(std::span<const DraftRow> rows) = 0;
  // The row's request left: forget its state.
  virtual void release(int32_t row) = 0;
};

struct NgramOptions {
  int32_t min_ngram = 2;  // shortest suffix to match (1-token matches mostly propose noise)
  int32_t max_ngram = 4;  // longest suffix to match (tried first)
  int64_t max_scan = 1 << 16;  // search at most this many most recent positions
};

// Prompt lookup over the row's own context. Thread-compatible (stateless).
std::unique_ptr<DraftSource> make_ngram_draft(NgramOptions options = {});

// A draft model: `model` must share the target's vocabulary (checked by the caller with
// check_same_vocabulary). Its cache has n_rows rows of n_ctx tokens.
Result<std::unique_ptr<DraftSource>> make_model_draft(std::unique_ptr<Model> model, int32_t n_rows, int64_t n_ctx);

// Errors when two models' GGUF vocabularies differ (size, or any token text), naming the
// first difference.
Status check_same_vocabulary(const Model& target, const Model& draft);

}  // namespace specula
