// decoding/round.h — one method step over a group's rows (docs/ARCHITECTURE.md, Speculative round).
//
// prepare(rows):
//   1. draft: rows with depth > 0 get proposals from the draft source (greedy, or sampled
//      under the row's parameters for rejection sampling);
//   2. windows: each decoding row feeds [pending, d_1 .. d_k] (ragged, no padding); rows
//      still prefilling feed their prompt chunk in the same forward;
//   3. transaction.begin for the decoding rows, ONE target forward, ONE logits projection
//      for every position that samples; prompt chunks just consumed go to the draft source
//      (DraftSource::prefill) so a draft model's prompt work is prompt time;
//   4. per row, the acceptance walk with the row's own sampler (decoding/speculative.h):
//      exact match, or rejection sampling when the source returned draft distributions.
// The caller then delivers each row's tokens (step 5) and calls
// commit(keep, contexts):
//   6. transaction.resolve(keep) keeps, per decoding row, the pending token plus the
//      accepted drafts it delivered, and the draft source is committed with each
//      continuing row's context and the verify forward's hidden states (VerifyContext).
// Plain decoding is the depth-0 round: no drafts, a window of one token.
// Structured outputs (rows with a TokenConstraint, grammar/constraint.h): in step 1 the
// grammar's forced tokens, when there are any, are the row's drafts (free: the masked
// target takes them), otherwise the source's drafts are cut where they leave the grammar;
// the masks of every window position (the state after the pending token and each draft)
// are computed on a worker thread while the target forward runs, and applied to the
// logits (disallowed ids -> -inf) before the walk — so the sampler chain
// (sampling/sampler.h) starts from the grammar mask, and logprobs are those of the masked
// logits. After the walk the grammar consumes
// the emitted tokens; a grammar that is complete ends the row as an end-of-generation
// token would (ignore_eos does not apply). Constrained + speculative output equals
// constrained plain output token for token (same masks at the same positions).
// If the forward fails, prepare() rolls the transaction back (every row holds its
// pre-round state) and returns the error; the caller fails or re-runs those requests.
// Does not queue, admit, budget tokens or deliver (engine/).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "grammar/constraint.h"
#include "decoding/draft.h"
#include "sampling/sampler.h"
#include "decoding/speculative.h"
#include "model/model.h"
#include "specula/status.h"

namespace specula {

struct RoundRow {
  int32_t row = -1;  // the row in the target's StateRows
  uint64_t id = 0;   // the request's stable id (draft sources key their state by it)
  // Decoding: prompt + emitted tokens, back() = the pending token.
  // Prefilling: the prompt up to the end of this step's chunk.
  std::span<const int32_t> context;
  int64_t chunk = 0;      // prefilling: tokens fed this step (the last `chunk` of context); 0 = decoding
  bool samples = true;    // prefilling: the chunk completes the prompt, its last position samples
  int32_t depth = 0;      // decoding: most drafts to verify (0 = plain decoding)
  int32_t budget = 1;     // tokens the row may still sample (>= 1)
  Sampler* sampler = nullptr;
  const SamplingParams* draft_sampling = nullptr;  // non-null: sampled drafts + rejection sampling
  bool ignore_eos = false;
  int32_t top_logprobs = -1;
  bool post_sampling = false;  // logprobs of the sampler's distribution (speculative_walk)
  // The request uses the draft source: prompt chunks go to DraftSource::prefill and the
  // row's context to DraftSource::commit.
  bool speculative = false;
  // Structured output: the row's grammar (consumed up to the pending token), or null.
  TokenConstraint* constraint = nullptr;
  // LoRA adapters the target runs this row with (model/lora.h), or null; drafts never use them.
  const LoraSet* lora = nullptr;
  // Prefilling with prompt logprobs (-1: none; k: k alternatives): the chunk's positions
  // give the logprobs of the prompt tokens after them; next_prompt_token is the prompt
  // token after this chunk (-1 when the chunk ends the prompt).
  int32_t prompt_logprobs = -1;
  int32_t next_prompt_token = -1;
};

struct RoundResult {
  std::vector<int32_t> drafts;  // the proposals verified (empty without speculation)
  WalkResult walk;              // the row's new tokens (none for a chunk that does not sample)
  bool sampled = false;         // the row sampled this step
  std::string error;            // the row's grammar failed (the row must end; others are fine)
  std::vector<WalkToken> prompt;  // prompt logprobs of the tokens after this chunk's positions
};

// Adaptive draft depth of one request (speed only, never the tokens): all drafts accepted
// -> one deeper (up to the configured depth); some accepted -> one more than accepted;
// none -> half as deep, and after two such rounds in a row no drafting for 2, 4, .. 16
// steps. Rejected drafts cost verify work (and draft-model steps).
struct AdaptiveDepth {
  int32_t cap = 0, misses = 0, skip = 0;
  // The depth to use this step (0: do not draft), at most max_depth and limit.
  int32_t next(int32_t max_depth, int64_t limit);
  void update(int32_t proposed, int32_t accepted, int32_t max_depth);
};

class Round {
 public:
  // `model`, `state`, `draft` (may be null) must outlive the round; eog: end-of-generation ids.
  Round(Model& model, StateRows& state, DraftSource* draft, std::vector<int32_t> eog);

  // Steps 1-4 for `rows` (decoding rows and prompt chunks, distinct state rows). Errors:
  // the target forward failed (state rolled back to before the round).
  Status prepare(std::span<const RoundRow> rows);
  // One per prepared row, in order.
  const std::vector<RoundResult>& results() const { return results_; }
  // Grammar masks computed, seconds spent on them (worker thread), seconds prepare() waited
  // for them after the forward — totals since construction.
  uint64_t grammar_masks() const { return n_masks_; }
  double grammar_mask_seconds() const { return mask_seconds_; }
  double grammar_wait_seconds() const { return wait_seconds_; }
  // Step 6. keep[i]: positions of decoding row i's window to keep (1 + accepted drafts
  // delivered; anything in range for a row that ends); ignored for prompt chunks.
  // contexts[i]: row i's context after delivery, or an empty span for a row that ends
  // (the draft source forgets nothing here; release() is the caller's). Errors: a layer
  // could not resolve — the group's state is untrusted.
  Status commit(std::span<const int64_t> keep, std::span<const std::span<const int32_t>> contexts);

 private:
  Model* model_;
  StateRows* state_;
  DraftSource* draft_;
  std::vector<int32_t> eog_;
  std::vector<RoundRow> rows_;
  std::vector<RoundResult> results_;
  std::vector<int32_t> tx_rows_;  // state rows in the transaction
  std::vector<size_t> tx_index_;  // their index in rows_
  std::vector<int32_t> ids_, brows_;
  std::vector<int64_t> counts_, offset_;
  std::vector<const LoraSet*> lora_;  // the batch's Batch::lora
  std::vector<float> logit_hidden_, logits_;
  std::vector<std::vector<uint32_t>> masks_;  // per row: [window positions, mask words]
  uint64_t n_masks_ = 0;            // masks computed, in total
  double mask_seconds_ = 0, wait_seconds_ = 0;  // worker time on masks; time the round waited for it
  std::vector<std::string> mask_errors_;
  // Masks for every constrained row's window (the worker thread's job during the forward).
  void compute_masks(const std::vector<int64_t>& out_count);
  // The forward's VerifyContext for the rows described by first/pos/kept.
  VerifyContext verify_context(std::span<const int64_t> first, std::span<const int64_t> pos,
                               std::span<const int64_t> kept) const;
  Tensor hidden_;
  std::vector<int32_t> tap_layers_;  // DraftSource::hidden_taps() (empty: no taps)
  Tensor taps_;                      // [M, n_taps, n_embd]
  bool open_ = false;
};

}  // namespace specula
