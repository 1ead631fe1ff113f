// engine/engine.h — continuous batching: one engine loop owns the model and the state
// rows (state/state_rows.h), admits and retires requests between steps, and runs ONE
// method round per step (decoding/round.h) for every row that needs the model (all decoding
// rows, 1 token each plus any drafts, and prompt chunks of rows still prefilling, under a
// per-step token budget).
//
// Request lifecycle: submit() validates and queues (or refuses: invalid / queue full /
// more memory than the whole KV budget); between steps the loop retires cancelled rows,
// admits queued requests in order while a batch row and enough KV budget are free (each
// request reserves the state bytes of prompt + max_tokens; the queue waits otherwise),
// then runs the step. Admission is two-phase (prepare: sampler + empty state row;
// commit: the row joins the group) — a failed preparation never touches running rows.
// Each admitted request gets an execution plan (method, draft source) with its reasons.
// After the step each row that produced a token has it delivered to its RequestSink
// before the next step starts; a sink that returns false (its own stop condition, e.g. a
// stop string) ends only that request. Every request ends exactly once in on_finish(),
// called after its row is released.
//
// Batch invariance (docs/ARCHITECTURE.md): rows never share state, the forward and the logits
// projection compute each row bitwise the same whatever the batch, and each request
// samples with its own Sampler (own RNG stream and penalty history), so a request's tokens
// do not depend on what else runs with it.
// engine/ names no model family and no cache layout.
// Does not: tokenize, detokenize, match stop strings (the sink does), draft or verify
// (decoding/ does), cache prompts across requests, or preempt running rows.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "grammar/constraint.h"
#include "decoding/draft.h"
#include "decoding/round.h"
#include "state/prompt_cache.h"
#include "sampling/sampler.h"
#include "model/lora.h"
#include "model/model.h"
#include "specula/status.h"

namespace specula {

struct EngineRequest {
  std::vector<int32_t> prompt;  // token ids, non-empty, each in [0, n_vocab)
  // Tokens to generate at most; prompt + max_tokens must fit the context (n_ctx). 0: none —
  // the prompt is prefilled (its prompt logprobs computed when asked for, its state left to
  // the prompt cache) and the request ends with kLength.
  int32_t max_tokens = 0;
  SamplingParams sampling;
  int32_t top_logprobs = -1;    // -1: no logprobs; 0..20: the sampled token's logprob plus k alternatives
  // The logprobs above are of the distribution the sampler drew from (after penalties,
  // truncation, temperature; llama-server's post_sampling_probs), not of the raw logits.
  bool post_sampling_probs = false;
  // -1: none; 0..20: the logprob of every prompt token after the first (given the ones
  // before it) plus k alternatives, delivered to RequestSink::on_prompt_logprobs as the
  // prompt is prefilled. Such a request computes its whole prompt (no prompt-cache start).
  int32_t prompt_logprobs = -1;
  bool ignore_eos = false;      // keep going past end-of-generation tokens
  bool speculative = true;      // use the engine's draft source (if any) for this request
  // Structured output (grammar/constraint.h): every sampled token is masked to the
  // grammar; the request ends when the grammar is complete. Compiled by the caller (off
  // the engine thread); owned by the request, used only on the engine thread. Requests
  // with a constraint neither resume nor write generation checkpoints.
  std::shared_ptr<TokenConstraint> constraint;
  // Non-empty: the request may resume from a generation checkpoint and writes them (with
  // EngineOptions::generation_checkpoint and a prompt cache). The caller puts here whatever
  // outside this struct shapes the output (e.g. stop strings); the engine adds every field
  // above. An identical request then continues an interrupted one exactly.
  std::string resume_key;
  // LoRA adapters (model/lora.h) this request runs with, each with its scale, loaded by this
  // engine's model (Model::load_lora); null or empty: the base model. Such a request reads
  // and feeds a RAM-only prompt cache of its adapter set (cache_of), never the base model's,
  // and writes no generation checkpoints (an adapter's identity does not outlive the
  // process); a draft model drafts without the adapters and the target verifies with them,
  // so speculation stays lossless.
  std::shared_ptr<const LoraSet> lora;
};

// Whether the request runs with any LoRA adapter.
inline bool has_lora(const EngineRequest& r) { return r.lora != nullptr && !r.lora->empty(); }

// One generated token as delivered to a sink.
struct TokenEvent {
  int32_t id = -1;
  float logprob = 0.0f;  // log-softmax of the raw logits (temperature 1) at id, when requested
  std::vector<std::pair<int32_t, float>> top;  // top_logprobs alternatives, descending
};

enum class Outcome { kStop, kLength, kCancelled, kFailed };
const char* outcome_name(Outcome o);  // "stop", "length", "cancelled", "failed"

// How a request runs, chosen once at admission, with its reasons (docs/ARCHITECTURE.md, Execution plan).
struct ExecutionPlan {
  bool speculative = false;  // drafts verified by the target (else autoregressive)
  std::string source;        // the draft source's name when speculative
  std::string reason;        // why this method (and the rules that still apply per step)
};

struct RequestSummary {
  Outcome outcome = Outcome::kStop;
  ExecutionPlan plan;
  std::string error;          // kFailed: why
  // kFailed because of the request itself (its grammar could not continue: llguidance's
  // limits, a dead end), not the engine: the API answers it as the client's error.
  bool request_fault = false;
  int64_t n_prompt = 0;       // prompt tokens
  int64_t cached_tokens = 0;  // prompt tokens served from the prompt cache (not prefilled)
  int64_t n_generated = 0;    // sampled tokens, including an end-of-generation token
  double queue_seconds = 0;   // submit -> admitted
  double prefill_seconds = 0; // admitted -> first token
  double decode_seconds = 0;  // first token -> finish
  // Speculation (zero when the request did not speculate).
  int64_t spec_rounds = 0;    // verify forwards that carried drafts for this request
  int64_t drafted = 0;        // draft tokens proposed
  int64_t accepted = 0;       // draft tokens accepted
};

// The consumer of one request. Called on the engine thread: keep it short, never block.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  // New tokens (in order, not including an end-of-generation token). Return false to end
  // the request now with outcome kStop (e.g. a stop string matched). An exception ends
  // this request with kFailed.
  virtual bool on_tokens(std::span<const TokenEvent> events) = 0;
  // Prompt logprobs (EngineRequest::prompt_logprobs): entries for prompt tokens 1, 2, ..
  // in order, a chunk at a time, all before the first on_tokens.
  virtual void on_prompt_logprobs(std::span<const TokenEvent> events) { (void)events; }
  // Prompt progress: once at admission (processed == cached, the tokens the prompt cache
  // served) and after every prefill chunk (processed grows to total, the prompt's length),
  // all before the first on_tokens. llama-server's prompt_progress events come from this.
  // Must not throw (an exception is ignored).
  virtual void on_prompt_progress(int64_t processed, int64_t total, int64_t cached) {
    (void)processed, (void)total, (void)cached;
  }
  // Exactly once, after the request's state row is released.
  virtual void on_finish(const RequestSummary& summary) = 0;
};

class Engine;
// The loop's mutex + condition variable, shared with handles (which may outlive the engine).
struct EngineWakeup {
  std::mutex mu;
  std::condition_variable cv;
};

// Shared between the submitter and the engine. cancel() is thread-safe and idempotent; the
// engine retires the row at its next step boundary.
class RequestHandle {
 public:
  void cancel();
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  uint64_t id() const { return id_; }

 private:
  friend class Engine;
  RequestHandle(uint64_t id, std::shared_ptr<EngineWakeup> wakeup) : id_(id), wakeup_(std::move(wakeup)) {}
  uint64_t id_;
  std::shared_ptr<EngineWakeup> wakeup_;  // outlives the engine if the handle does
  std::atomic<bool> cancelled_{false};
};

struct EngineOptions {
  int32_t n_rows = 4;          // concurrent requests at most (rows of one batch)
  int64_t n_ctx = 4096;        // tokens per request at most (prompt + generated)
  // Tokens all running requests may hold together (llama-server's -c); 0 = n_rows * n_ctx.
  int64_t total_ctx = 0;
  // Bytes of model state (KV cache, recurrent state, the draft source's) all running
  // requests may hold together; 0 = what n_rows requests of total_ctx / n_rows tokens need.
  int64_t kv_budget = 0;
  CacheOptions cache;          // the target's cache layout options (--cache-type-k/-v, --kv-delay)
  int64_t step_tokens = 512;   // per-step token budget (decode rows + prompt chunks)
  int32_t max_queue = 64;      // waiting requests beyond the running rows; more -> kBusy
  std::vector<int32_t> eog_ids;  // end-of-generation tokens
  // Speculative decoding (docs/ARCHITECTURE.md, Speculative round): when set, every decoding row of
  // a request that allows it gets up to spec_depth drafted tokens per step, verified in
  // the same single forward as the other rows. Exact-match acceptance: lossless.
  std::shared_ptr<DraftSource> draft;
  int32_t spec_depth = 4;
  // Draft only in steps with at most this many decoding rows (0 = any number; vLLM's
  // speculative_disable_by_batch_size). On a CPU a larger batch is already compute-bound,
  // so extra verify positions cost about what they could save.
  int32_t spec_max_batch = 0;
  // Prompt cache (state/prompt_cache.h): a request starts from the longest cached prefix
  // of its prompt; a finished (or cancelled) request's state — prompt and generated tokens
  // — is stored. For layouts that cannot serve every prefix of a stored state (rings,
  // recurrent state), the state is also stored at the end of each prompt minus its last
  // token and every `cache_checkpoint_every` prompt tokens (0 = only the prompt end).
  // A draft model's own state is not cached: it catches up with the context by itself.
  std::shared_ptr<PromptCache> prompt_cache;
  int64_t cache_checkpoint_every = 0;
  // Every this many generated tokens (0 = never), a request with a resume_key stores a
  // generation checkpoint in the prompt cache: its state, pending token, sampler position
  // and emitted tokens. An identical request admitted later (e.g. after a restart with a
  // --cache-dir) replays the emitted tokens and continues from there, producing exactly
  // the tokens of an uninterrupted run. Not with rejection-sampled speculation (its draft
  // stream is not saved): those requests run without checkpoints.
  int64_t generation_checkpoint = 0;
  // Acceptance at temperature > 0 for sources that sample their drafts (a draft model):
  // false = exact match against the target's own draw (the same seed gives exactly the
  // text of plain decoding); true = rejection sampling with the draft's distribution
  // (higher acceptance, the same distribution, other text for a given seed — and, since
  // spec_max_batch makes drafting depend on the load, text that may vary with
  // concurrency). Greedy rows are exact match either way.
  bool spec_rejection = false;
};

// Prometheus-style histogram: cumulative counts per upper bound, plus sum and count.
struct Histogram {
  std::vector<double> bounds;        // ascending upper bounds (+Inf implied)
  std::vector<uint64_t> counts;      // [bounds.size() + 1] non-cumulative
  double sum = 0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> b = {}) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void observe(double v);
};

struct EngineStats {
  uint64_t finished[4] = {0, 0, 0, 0};  // by Outcome
  uint64_t rejected_invalid = 0, rejected_busy = 0;
  uint64_t prompt_tokens = 0, generated_tokens = 0;
  uint64_t steps = 0;
  uint64_t spec_rounds = 0, drafted = 0, accepted = 0;  // row-rounds with drafts, draft tokens, accepted drafts
  // Structured outputs (decoding/round.h): grammar masks computed, the worker's seconds on
  // them, and the seconds steps waited for the worker after their forward.
  uint64_t grammar_masks = 0;
  double grammar_mask_seconds = 0, grammar_wait_seconds = 0;
  int64_t queue_depth = 0, running_rows = 0;
  int32_t n_rows = 0;
  int64_t kv_bytes = 0;           // state bytes held by running rows (target + draft)
  int64_t kv_tokens = 0;          // tokens in the target state of running rows (prompt prefilled + generated)
  int64_t kv_reserved = 0;        // state bytes reserved by running requests
  int64_t kv_budget = 0;          // the budget
  Histogram step_seconds, batch_rows, batch_tokens;
  // Per request that held a row (vLLM's request histograms): submit -> first token
  // (queue + prefill), seconds per output token after the first, submit -> end, and the
  // prompt and generated token counts.
  Histogram ttft_seconds, tpot_seconds, request_seconds, request_prompt_tokens, request_generated_tokens;
};

// The answer to submit(): a handle, or why not. status codes: kInvalidArgument (the
// request is wrong: `param` names the field), kContextOverflow (prompt + max_tokens exceed
// the context; param "max_tokens"), kBusy (the queue is full), kUnavailable (the engine is
// stopping). Messages start with "[engine] ".
struct Submission {
  std::shared_ptr<RequestHandle> handle;  // null on error
  Status status;
  std::string param;                      // the offending request field, when known
  bool ok() const { return handle != nullptr; }
};

class Engine {
 public:
  // Builds the state group (no rows yet) and starts the loop thread. `model` must outlive
  // the engine. Errors: bad options, the model's layout errors (unknown cache type, a
  // codec that cannot store a layer, ...).
  static Result<std::unique_ptr<Engine>> create(Model& model, EngineOptions options);
  ~Engine();  // stops the loop; queued and running requests finish as kCancelled
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates (docs/ARCHITECTURE.md, Request: non-empty prompt, ids in the vocabulary,
  // max_tokens >= 0, top_logprobs <= 20, prompt + max_tokens within n_ctx and within the
  // KV budget, sampling params) and queues. Refusals never call the sink.
  Submission submit(EngineRequest request, std::shared_ptr<RequestSink> sink);

  EngineStats stats() const;
  // The LoRA adapters (LoraAdapter::id, each once, ascending) of the running and of the
  // queued requests: the Gateway API Inference Extension's adapter gauges.
  struct LoraUse {
    std::vector<uint64_t> running, waiting;
  };
  LoraUse lora_in_use() const;
  const EngineOptions& options() const { return options_; }
  const Model& model() const { return *model_; }

  // Runs fn(model) on the engine thread between two steps — nothing else computes on the
  // model meanwhile — and waits for it (embeddings: a forward outside any request row).
  // fn must not call the engine. Returns false, without running fn, when the engine
  // is stopping; an exception from fn is rethrown here.
  bool run_exclusive(const std::function<void(Model&)>& fn);
  // The target's layouts, one entry per distinct layout with its layer count (StateRows::describe).
  std::string describe_state() const { return layouts_; }
  // State bytes a request of n tokens reserves (target + draft source).
  int64_t bytes_for(int64_t n_tokens) const;

 private:
  struct Pending {
    std::shared_ptr<RequestHandle> handle;
    std::shared_ptr<RequestSink> sink;
    EngineRequest request;
    double submitted = 0;
  };
  // Ends a request that never got a row (cancelled while queued, or at shutdown).
  static void end_waiting(Pending& p, Outcome outcome);
  struct Active {
    Active(Pending pending, Sampler s) : p(std::move(pending)), sampler(std::move(s)) {}
    Pending p;
    Sampler sampler;
    ExecutionPlan plan;
    int64_t reserved = 0;    // state bytes reserved at admission
    int64_t cached = 0;      // prompt tokens served by the prompt cache
    int64_t prefilled = 0;   // prompt tokens already in the state
    int32_t next = -1;       // decoding: the token to feed next
    int64_t n_generated = 0;
    double admitted = 0, first_token = 0;
    std::vector<int32_t> context;  // prompt + emitted tokens (back() == next while decoding)
    int64_t spec_rounds = 0, drafted = 0, accepted = 0;
    AdaptiveDepth depth;     // speculation speed policy (never the tokens)
    std::string gen_key;     // generation checkpoint key ("" = none)
    int64_t next_gen_checkpoint = 0;  // n_generated at which the next checkpoint is due
    std::vector<TokenEvent> events;   // emitted tokens as delivered (for a checkpoint record)
    bool stop_after_replay = false;   // its consumer stopped while a checkpoint was replayed
    std::string error;                // kFailed for this request alone (its grammar, its consumer)
    bool request_fault = false;       // ... and the request's own doing (RequestSummary::request_fault)
    bool decoding() const { return prefilled >= static_cast<int64_t>(p.request.prompt.size()); }
    // Tokens of this request in the target state (the next token to feed is not yet in it).
    int64_t tokens_in_state() const {
      return decoding() ? std::max<int64_t>(prefilled, static_cast<int64_t>(context.size()) - 1) : prefilled;
    }
  };
  // Sum of tokens_in_state() over the running requests (EngineStats::kv_tokens).
  int64_t running_tokens() const;

  Engine(Model& model, EngineOptions options, StateRows state);
  void loop();
  // Between steps: queued requests join while rows and budget allow.
  void admit(std::vector<Pending>& admitted);
  ExecutionPlan plan_for(const EngineRequest& r) const;
  // Runs one step over `running_`; returns false when there was nothing to do.
  bool step();
  // The step's rows: decoding rows (with their draft depth) and prompt chunks.
  void plan_step(std::vector<RoundRow>& rows, std::vector<size_t>& members);
  // The next prompt position after `prefilled` at which a checkpoint is stored (or the
  // prompt length when none is due).
  int64_t next_checkpoint(const Active& a) const;
  // The prompt cache a request reads and feeds: options_.prompt_cache for the base model;
  // for a request with LoRA adapters, a RAM-only cache of its own adapter set (adapters by
  // LoraAdapter::id, scales by their bits), so a prefix computed under one set is never
  // served to another. The 8 most recently used sets keep theirs, each a sixteenth of the
  // RAM tier's cap. Null: no prompt cache (or no RAM tier for adapter sets). Loop thread.
  PromptCache* cache_of(const EngineRequest& r);
  // Generation checkpoints: the key of a request (empty when it does not checkpoint), and
  // storing / restoring one.
  std::string generation_key(const EngineRequest& r) const;
  void store_generation_checkpoint(size_t index);
  // Restores a's generation from its checkpoint into `row` (true), replaying the emitted
  // tokens to the sink; false when there is none (or it does not fit the request).
  bool resume_generation(Active& a, RowState& row);
  // Delivers one row's walk to its sink; returns the outcome if the request ends.
  bool deliver(Active& a, const RoundResult& res, Outcome& outcome);
  // Ends the requests at running_ indices `ended` (with outcomes), releasing their rows.
  void retire(std::vector<std::pair<size_t, Outcome>> ended, const std::string& error = {});
  void publish_stats();

  Model* model_;
  EngineOptions options_;
  StateRows state_;
  std::string layouts_;
  bool checkpoints_ = false;  // the layouts cannot serve every prefix: store prompt checkpoints
  std::unique_ptr<Round> round_;

  std::shared_ptr<EngineWakeup> wakeup_;  // guards queue_, stopping_, next_id_, stats_
  std::deque<Pending> queue_;
  struct Exclusive {
    const std::function<void(Model&)>* fn;
    std::promise<bool>* done;
  };
  std::deque<Exclusive> exclusive_;  // run_exclusive() work waiting for the loop
  bool stopping_ = false;
  uint64_t next_id_ = 1;
  EngineStats stats_;
  std::vector<uint64_t> running_lora_;  // lora_in_use().running, set with stats_.running_rows
  struct LoraCache {
    std::string key;
    std::unique_ptr<PromptCache> cache;
    uint64_t last_use = 0;
  };
  std::vector<LoraCache> lora_caches_;  // cache_of's (loop thread only)
  uint64_t lora_cache_clock_ = 0;

  // Loop-thread state. running_[i] owns state row i.
  std::vector<Active> running_;
  int64_t reserved_ = 0;  // sum of running_[i].reserved
  std::thread thread_;
};

}  // namespace specula
