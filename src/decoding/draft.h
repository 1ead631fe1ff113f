// decoding/draft.h — draft sources for speculative decoding (docs/ARCHITECTURE.md, Draft source).
//
// A draft source proposes, for each running row, up to `max_depth` tokens that continue
// the row's context (prompt + emitted tokens; its last token is the pending one, which the
// target has not consumed yet). The target verifies the proposals in one forward and keeps
// the accepted prefix; `commit` then tells the source what the context became, so a source
// with state (a draft model's state rows) can drop what was rejected. Rows are named by a
// stable id (the request's), never by a slot: the source keeps its own rows per id.
// Sources here:
//   * NgramDraft — prompt lookup decoding (Saxena 2023, "Prompt Lookup Decoding"; also
//     llama.cpp's `--lookup`/ngram drafts): find the most recent earlier occurrence of the
//     context's last n tokens (n from max_ngram down to min_ngram) and propose what followed.
//     No model, no state.
//   * DraftModel — a small model with the target's vocabulary and its own state rows
//     (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding";
//     Chen et al. 2023): catches its state up with the context (chunked), then drafts
//     greedily, all rows batched in each forward. Drafting runs inside a speculative
//     transaction on its own rows, resolved at commit() to the prefix the target kept —
//     so draft models with sliding-window or recurrent layers roll back exactly too.
//   * Heads that read the target's hidden states, which prefill() and commit() hand them
//     (VerifyContext; decoding/feature_draft.h): an EAGLE-3 head (decoding/eagle3.h, its
//     hidden taps) and the model's own multi-token-prediction layer (decoding/mtp.h, its
//     final hidden states).
// Draft sources never decide acceptance; the round (engine) does.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sampling/sampler.h"
#include "model/model.h"
#include "specula/status.h"

namespace specula {

struct DraftRow {
  uint64_t id = 0;                   // the request's stable id (the source's key for its state)
  std::span<const int32_t> context;  // prompt + emitted tokens; back() is the pending token
  int32_t max_depth = 0;             // propose at most this many (>= 0)
  // The request's sampling parameters, for draft_sampled(); nullptr = draft greedily.
  const SamplingParams* sampling = nullptr;
};

// What a target forward leaves for a source that reads it: the final hidden states and the
// hidden taps the source asked for (DraftSource::hidden_taps), with, for each row handed to
// prefill() or commit() (same order), where its tokens sit in the forward.
struct VerifyContext {
  const float* hidden = nullptr;  // [M, n_embd] final hidden states of the forward (after the final norm)
  const float* taps = nullptr;    // [M, n_taps, n_embd] Batch::taps of hidden_taps()'s layers, or null
  int32_t n_taps = 0;
  int64_t n_embd = 0;
  // Per row: first[i] is the packed index (0..M) of the row's first token in the forward,
  // pos[i] that token's position in the row's context (prefill: the chunk's first; commit:
  // the pending token's), kept[i] how many of the row's tokens from there the target kept
  // (prefill: the chunk; commit: the pending token and the accepted drafts; 0 for a row
  // the round did not feed).
  std::span<const int64_t> first, pos, kept;
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
  // returns that distribution in q[b][i], for rejection sampling (decoding/speculative.h).
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
  // `context`: the prefill forward's hidden states and taps (may be null).
  virtual Status prefill(std::span<const DraftRow> rows, const VerifyContext* context = nullptr) {
    (void)rows;
    (void)context;
    return Status::ok();
  }
  // After a round: each row's context now (accepted drafts and the correction appended).
  // `context`: the target's verify forward (hidden states and taps, per row; may be null).
  virtual void commit(std::span<const DraftRow> rows, const VerifyContext* context = nullptr) = 0;
  // The target layers whose outputs the source reads (Batch::tap_layers), asked once when
  // the source is bound to a target; empty (the default): none.
  virtual std::vector<int32_t> hidden_taps() const { return {}; }
  // The request left: forget its state.
  virtual void release(uint64_t id) = 0;
  // Bytes of state the source keeps for one request of n_tokens (admission reserves it).
  virtual int64_t bytes_for(int64_t n_tokens) const {
    (void)n_tokens;
    return 0;
  }
};

struct NgramOptions {
  int32_t min_ngram = 2;  // shortest suffix to match (1-token matches mostly propose noise)
  int32_t max_ngram = 4;  // longest suffix to match (tried first)
  int64_t max_scan = 1 << 16;  // search at most this many most recent positions
};

// Prompt lookup over the row's own context. Thread-compatible (stateless).
std::unique_ptr<DraftSource> make_ngram_draft(NgramOptions options = {});

// A draft model: `model` must share the target's vocabulary (checked by the caller with
// check_same_vocabulary). Its rows use `cache` (f16 by default) and hold at most
// max_length positions. Errors: the draft model's layout errors.
Result<std::unique_ptr<DraftSource>> make_model_draft(std::unique_ptr<Model> model, int64_t max_length,
                                                      const CacheOptions& cache = {});

// Errors when two models' vocabularies differ: model vocabulary size (n_vocab), or any token
// text where both token lists have one (GGUF tokenizer.ggml.tokens or a folder's
// tokenizer.json; a GGUF lists padding ids a tokenizer.json leaves out), naming the first.
Status check_same_vocabulary(const Model& target, const Model& draft);

}  // namespace specula
