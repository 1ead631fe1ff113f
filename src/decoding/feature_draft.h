// decoding/feature_draft.h — what the draft heads that read the target's hidden states
// (EAGLE-3: decoding/eagle3.h; MTP: decoding/mtp.h) share: one decoder layer with KV rows
// of its own, fed pairs of a token and a feature of the target's forward, drafting a greedy
// chain for every row batched (docs/ARCHITECTURE.md, Draft sources).
//
// Per token p the target's forward gives a feature g_p [E] (FeatureHead::features: EAGLE-3
// fc(taps_p); MTP the final-normed hidden state h_p). The head's KV row holds, at position
// p, the pair (token x_{p+1}, g_p); its layer maps a pair to an output y [E] whose argmax
// predicts x_{p+2}, and y stands in for g at the next draft position (the chain
// feeds (d_j, y_{j-1})). RoPE scores depend on position differences only, so whether the
// pair sits at p (here, EAGLE-3's graph) or p + 1 (llama.cpp's MTP context) changes nothing.
// Rounds, per row with context x_0 .. x_{n-1} (x_{n-1} pending, not yet fed to the target):
// the head's state holds pairs p < n - 2 from earlier rounds; draft() feeds the missing
// pairs up to p = n - 2 (the last one, (x_{n-1}, g_{n-2}), samples the first draft) and
// then the chain, all rows batched, inside a transaction on the head's own state rows;
// commit() keeps the real pairs, drops the chain and stores the verify forward's features
// of the kept positions. Prompt chunks (prefill()) feed their pairs as they come. Drafts
// are the head's argmax, verified by exact match (lossless for greedy and sampled requests
// alike), or, for rows asking for rejection sampling (draft_sampled, temperature > 0),
// draws from the head's distribution under the request's sampling chain
// (decoding/draft_sampler.h), returned with that distribution for the round's rejection
// sampling (Leviathan et al. 2023; lossless in distribution).
// Positions whose features the target never computed (a prompt-cache hit, a step the row
// ran without speculation) get zero features: drafts there are worse, outputs unchanged.
// Thread-compatible: one thread (the engine's) calls a source at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "decoding/draft.h"
#include "model/model.h"
#include "specula/status.h"

namespace specula {

// One head: what it reads of the target's forward, its layer and its logits.
class FeatureHead {
 public:
  virtual ~FeatureHead() = default;
  virtual std::string name() const = 0;  // the draft source's name ("eagle3", "mtp")
  virtual const char* who() const = 0;   // the prefix of its errors ("[eagle3]")
  virtual int64_t width() const = 0;     // E: features g and outputs y are [*, E] floats
  virtual int64_t vocab() const = 0;     // the target's vocabulary (the ids fed)
  virtual LayerSpec layer_spec() const = 0;  // the geometry of the head's KV rows
  // True: each row starts with a pair (x_0, zeros) and pair p holds (x_p, g_{p-1}) at
  // position p (llama.cpp's MTP context: its first token is paired with a zero state); the
  // drafts then differ slightly (one more key), the bookkeeping is the same one place later.
  virtual bool leading_pair() const { return false; }
  // The target layers whose states the head reads (Batch::tap_layers); empty: none.
  virtual std::vector<int32_t> hidden_taps() const { return {}; }
  // Where the features' sources sit in a forward: rows [M, source_width()] of the context's
  // taps or hidden states; null when the context lacks them (then no features are taken).
  virtual const float* source(const VerifyContext& vc) const = 0;
  virtual int64_t source_width() const = 0;
  // g [n, E] from n source rows x [n, source_width()] (x is scratch: it may be changed).
  virtual void features(float* x, int64_t n, float* g) = 0;
  // The layer over a planned batch of pairs (ids [M], g [M, E]) on the head's state (its
  // positions are layout.pos; the caller advances the rows afterwards): y [M, E].
  virtual void layer(const Batch& batch, const BatchLayout& layout, StateRows& state, const int32_t* ids,
                     const float* g, float* y) = 0;
  // The head's logits for n outputs y [n, E]: out [n, logits_width()], column i the logit of
  // target id logit_ids()[i] (null: of id i; a draft vocabulary smaller than the target's
  // leaves the other ids out: they are never drafted).
  virtual void logits(const float* y, int64_t n, float* out) = 0;
  virtual int64_t logits_width() const { return vocab(); }
  virtual const int32_t* logit_ids() const { return nullptr; }
};

// The draft source around `head`: its rows use `cache` and hold at most max_length
// positions. Errors: the state's (the layer spec against the cache options), prefixed
// with the head's who().
Result<std::unique_ptr<DraftSource>> make_feature_draft(std::unique_ptr<FeatureHead> head, int64_t max_length,
                                                        const CacheOptions& cache);

}  // namespace specula
