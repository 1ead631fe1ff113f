// server/generation.cpp — see generation.h.
#include "server/generation.h"

#include <chrono>

#include "server/engine_request.h"
#include "server/json_util.h"

namespace specula::server {

using json = nlohmann::ordered_json;

namespace {

// One choice of an answer.
struct Choice {
  PreparedRequest* prepared = nullptr;  // its prompt's request
  uint64_t seed_offset = 0;             // choice i of one prompt samples with seed + i
  bool echoed = false;                  // echo: its prompt went out
  std::shared_ptr<CompletionStream> stream;
  std::shared_ptr<RequestHandle> handle;
  AnswerFormat* fmt = nullptr;
  std::string text;
  std::vector<TokenLogprob> logprobs;
  std::vector<int32_t> ids;       // every token id (formats that want them)
  CompletionStream::Update last;  // the final update
  bool done = false;
  bool started = false;  // some text or a logprob entry came out
  // Reasoning: the thinking-token count — the engine's ThinkingBudget when one runs (read
  // once the choice is done), else one fed here with the token ids (`counting`).
  std::shared_ptr<ThinkingBudget> thinking;
  bool counting = false;
};

bool failed(const Choice& x) {
  return x.last.summary.outcome == Outcome::kFailed || x.last.summary.outcome == Outcome::kCancelled;
}

ApiError submit_error(const Submission& sub) {
  ApiError e = api_error(sub.status.code(), sub.status.user_message(), sub.param);
  if (sub.status.code() == StatusCode::kBusy) e.api_code = "queue_full";
  return e;
}

bool begin_sse(http::Exchange& ex) {
  // The probe is an SSE comment: clients ignore it (see http::Exchange::client_gone).
  return ex.begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}}, ":\n\n");
}

// The generation of one answer: its choices (n of one prompt, or one per prompt of a
// batch) and what the driver needs of the request.
class Driver {
 public:
  // `grammar`: the request's compiled constraint (null: none); every choice but the first
  // gets a clone of it.
  Driver(ServedModel& served, const CompletionParams& c, http::Exchange& ex, AnswerFormat& fmt,
         std::vector<PreparedRequest>& prepared, std::shared_ptr<TokenConstraint> grammar, ReasoningPlan plan,
         GenerationLog* log)
      : served_(served), c_(c), ex_(ex), fmt_(fmt), grammar_(std::move(grammar)), plan_(plan), log_(log) {
    const bool batch = prepared.size() > 1;
    const size_t n = batch ? prepared.size() : static_cast<size_t>(c.n);
    ch_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      ch_[i].prepared = &prepared[batch ? i : 0];
      ch_[i].seed_offset = batch ? 0 : i;
    }
  }
  // However the answer ends (client gone, an error), its unfinished requests stop.
  ~Driver() {
    for (Choice& x : ch_)
      if (x.handle && !x.done) x.handle->cancel();
    if (log_ != nullptr) fill_log();
  }
  void run();

 private:
  int n() const { return static_cast<int>(ch_.size()); }
  std::optional<ApiError> clone_grammars();
  std::optional<ApiError> submit(int i);
  // Waits up to `ms` for news of choice i and returns its stream events.
  std::string poll(int i, int ms);
  // The answer once every choice has finished (non-streamed).
  void answer_whole();
  Usage total_usage() const;
  // The request log's fields (cancelled choices are waited for, briefly, for their counts).
  void fill_log();
  std::string ended_;  // why the driver stopped before every choice finished ("" = they did)

  ServedModel& served_;
  const CompletionParams& c_;
  http::Exchange& ex_;
  AnswerFormat& fmt_;
  std::shared_ptr<TokenConstraint> grammar_;
  ReasoningPlan plan_;
  GenerationLog* log_;
  std::vector<Choice> ch_;
  std::vector<std::unique_ptr<AnswerFormat>> formats_;  // choices 1..n-1
  std::vector<std::shared_ptr<TokenConstraint>> grammars_;
  std::string id_;
  int64_t created_ = unix_now();
};

std::optional<ApiError> Driver::clone_grammars() {
  // Every choice gets its grammar from the untouched one, before any of them runs (a clone
  // made after choice 0 started would start where choice 0 is).
  grammars_.resize(ch_.size());
  for (size_t i = 0; i < ch_.size() && grammar_; ++i) {
    if (i == 0) {
      grammars_[0] = grammar_;
      continue;
    }
    auto cl = grammar_->clone();
    if (!cl) return from_status(cl.status());
    grammars_[i] = std::move(cl).value();
  }
  return std::nullopt;
}

std::optional<ApiError> Driver::submit(int i) {
  Choice& x = ch_[static_cast<size_t>(i)];
  EngineRequest& prepared = x.prepared->request;
  const uint64_t seed = prepared.sampling.seed;
  std::string prompt_text;
  if (fmt_.wants_prompt_text(c_)) {
    auto t = served_.tokenizer().decode(prepared.prompt, /*remove_special=*/false, /*render_special=*/true);
    if (t) prompt_text = std::move(t).value();
  }
  const bool last_user = i + 1 == n() || ch_[static_cast<size_t>(i) + 1].prepared != x.prepared;
  EngineRequest r = last_user ? std::move(prepared) : prepared;  // the last choice of a prompt takes it
  r.sampling.seed = seed + x.seed_offset;
  r.constraint = grammars_[static_cast<size_t>(i)];
  if (plan_.format != chat::ReasoningFormat::kNone) {
    x.thinking = std::dynamic_pointer_cast<ThinkingBudget>(grammars_[static_cast<size_t>(i)]);
    if (!x.thinking) {  // no budget runs in the engine: count here, from the token ids
      auto t = ThinkingBudget::create(served_.tokenizer(), static_cast<int32_t>(served_.model().info().n_vocab), -1,
                                      x.prepared->thinking == ThinkingStart::kOpen, nullptr);
      if (t) {
        x.thinking = std::move(t).value();
        x.counting = true;
      }
    }
  }
  x.stream = std::make_shared<CompletionStream>(served_.tokenizer(), c_.stop, c_.logprobs >= 0,
                                                fmt_.wants_prompt_text(c_) || x.counting,
                                                c_.stream && c_.return_progress);
  Submission sub = served_.engine().submit(std::move(r), x.stream);
  if (!sub.ok()) return submit_error(sub);
  x.handle = sub.handle;
  if (id_.empty()) id_ = fmt_.id_prefix() + std::to_string(sub.handle->id());
  if (i == 0) {
    x.fmt = &fmt_;
  } else {
    formats_.push_back(fmt_.another());
    x.fmt = formats_.back().get();
  }
  Generation g;
  g.id = id_;
  // vLLM answers with the adapter's name when the request named one.
  g.model = !c_.model.empty() && served_.lora().by_name(c_.model) ? c_.model : served_.id();
  g.created = created_;
  g.n_prompt = x.prepared->n_prompt;
  g.seed = seed + x.seed_offset;
  g.index = i;
  g.params = &c_;
  g.prompt_text = std::move(prompt_text);
  g.reasoning = plan_.format;
  g.in_thinking = x.prepared->thinking == ThinkingStart::kOpen;
  g.thinking = x.thinking;
  x.fmt->begin(std::move(g), c_.tools.is_null() ? chat::ToolFormat::kNone : served_.tool_format());
  return std::nullopt;
}

std::string Driver::poll(int i, int ms) {
  Choice& x = ch_[static_cast<size_t>(i)];
  if (served_.stop_requested()) x.handle->cancel();  // shutting down: don't hold it up
  CompletionStream::Update u = x.stream->wait(std::chrono::milliseconds(ms));
  if (x.counting) (void)x.thinking->consume(u.token_ids);  // (a count only: it refuses nothing)
  std::string events;
  PreparedRequest& pr = *x.prepared;
  for (auto& l : u.prompt_logprobs) pr.echo_logprobs.push_back(std::move(l));
  const bool news = !u.text.empty() || !u.logprobs.empty();
  if (c_.echo && !x.echoed && (u.finished || news)) {
    // The prompt goes first, once its logprobs are all in (they precede any token).
    x.echoed = true;
    if (c_.stream) {
      CompletionStream::Update e;
      e.text = pr.echo_text;
      if (c_.logprobs >= 0) e.logprobs = std::move(pr.echo_logprobs);
      events += x.fmt->stream_piece(e);
    }
  }
  if (c_.stream) events += x.fmt->stream_piece(u);
  x.started = x.started || news;
  x.text += u.text;
  x.ids.insert(x.ids.end(), u.token_ids.begin(), u.token_ids.end());
  for (auto& l : u.logprobs) x.logprobs.push_back(std::move(l));
  if (u.finished) {
    x.done = true;
    served_.add_finished(u.summary);
    if (c_.stream) events += x.fmt->stream_end(u);
    x.last = std::move(u);
  }
  return events;
}

void Driver::fill_log() {
  // A choice cancelled just now reports its counts at the engine's next step.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  for (Choice& x : ch_) {
    while (x.handle && !x.done && std::chrono::steady_clock::now() < deadline) {
      CompletionStream::Update u = x.stream->wait(std::chrono::milliseconds(20));
      if (x.counting) (void)x.thinking->consume(u.token_ids);
      if (u.finished) {
        x.done = true;
        x.last = std::move(u);
      }
    }
  }
  const Usage u = total_usage();
  log_->id = id_;
  log_->prompt_tokens = u.prompt_tokens;
  log_->cached_tokens = u.cached_tokens;
  log_->generated_tokens = u.completion_tokens;
  const RequestSummary& s = ch_[0].last.summary;
  if (ch_[0].done && s.n_generated > 0) log_->ttft_seconds = s.queue_seconds + s.prefill_seconds;
  log_->finish = !ended_.empty() ? ended_ : ch_[0].done ? ch_[0].last.finish_reason : "unfinished";
}

Usage Driver::total_usage() const {
  Usage total;
  for (const Choice& x : ch_) {
    if (x.seed_offset == 0) {  // each prompt once
      total.prompt_tokens += x.last.summary.n_prompt;
      total.cached_tokens += x.last.summary.cached_tokens;
    }
    total.completion_tokens += x.last.summary.n_generated;
    total.spec_rounds += x.last.summary.spec_rounds;
    total.drafted += x.last.summary.drafted;
    total.accepted += x.last.summary.accepted;
  }
  if (plan_.format != chat::ReasoningFormat::kNone) {
    total.reasoning_tokens = 0;
    for (const Choice& x : ch_)  // (an engine's budget is read only once its request is done)
      if (x.thinking && x.done) total.reasoning_tokens += x.thinking->thinking_tokens();
  }
  return total;
}

void Driver::answer_whole() {
  for (const Choice& x : ch_) {
    if (!failed(x)) continue;
    ApiError e = generation_error(x.last, &c_);
    if (http_status(e) >= 500)
      e.message = "generation " + x.last.finish_reason + (x.last.summary.error.empty() ? "" : ": " + without_component_tags(x.last.summary.error));
    return send_error(ex_, fmt_, e);
  }
  for (Choice& x : ch_) {
    if (!c_.echo) break;
    PreparedRequest& pr = *x.prepared;
    x.text = pr.echo_text + x.text;
    if (c_.logprobs >= 0) {
      for (auto& l : x.logprobs) pr.echo_logprobs.push_back(std::move(l));
      x.logprobs = std::move(pr.echo_logprobs);
    }
  }
  std::vector<json> bodies;
  for (Choice& x : ch_) {
    x.last.token_ids = std::move(x.ids);  // the whole answer's ids
    bodies.push_back(x.fmt->whole(x.text, x.logprobs, x.last));
  }
  ex_.respond(200, "application/json", dump_json(fmt_.combine(std::move(bodies), total_usage())));
}

void Driver::run() {
  if (auto e = clone_grammars()) return send_error(ex_, fmt_, *e);
  if (auto e = submit(0)) {
    ended_ = "refused";
    return send_error(ex_, fmt_, *e);
  }
  const bool streaming = c_.stream;
  if (streaming && !begin_sse(ex_)) return;
  std::string pending = streaming ? fmt_.stream_start() : "";
  if (n() > 1 && ch_[1].prepared == ch_[0].prepared) {
    // Choice 0 until its first token: its prompt's state is then in the prompt cache,
    // where the other choices start from.
    while (!ch_[0].done && !ch_[0].started) {
      pending += poll(0, 50);
      if (!ch_[0].started && ex_.client_gone()) {
        ended_ = "client gone";
        return;
      }
    }
  }
  for (int i = 1; i < n(); ++i) {
    if (auto e = submit(i)) {
      ended_ = "refused";
      if (!streaming) return send_error(ex_, fmt_, *e);
      ex_.write(pending + sse(fmt_.error_body(*e)) + fmt_.stream_close(nullptr));
      ex_.end_stream();
      return;
    }
  }
  for (;;) {
    std::string out = std::move(pending);
    pending.clear();
    bool all = true;
    for (int i = 0; i < n(); ++i) {
      if (ch_[static_cast<size_t>(i)].done) continue;
      // One choice: wake for news or to probe the client; several: round-robin.
      out += poll(i, n() == 1 ? (streaming ? 250 : 100) : (i == 0 ? 20 : 1));
      all = all && ch_[static_cast<size_t>(i)].done;
    }
    if (all && streaming) {
      // One choice that failed reports no usage (its error event said what happened).
      const Usage total = total_usage();
      out += fmt_.stream_close(n() == 1 && failed(ch_[0]) ? nullptr : &total);
    }
    if (streaming) {
      // Nothing new: probe the connection so a vanished client is noticed.
      if (out.empty() ? ex_.client_gone() : !ex_.write(out)) {
        ended_ = "client gone";
        return;
      }
    } else if (!all && ex_.client_gone()) {
      ended_ = "client gone";
      return;  // nobody to answer
    }
    if (all) break;
  }
  if (streaming) return ex_.end_stream();
  answer_whole();
}

}  // namespace

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void send_json(http::Exchange& ex, const json& body) { ex.respond(200, "application/json", dump_json(body)); }

void send_error(http::Exchange& ex, const ApiError& e) {
  ex.respond(http_status(e), "application/json", dump_json(openai_error_body(e)));
}

void send_error(http::Exchange& ex, const AnswerFormat& fmt, const ApiError& e) {
  ex.respond(http_status(e), "application/json", dump_json(fmt.error_body(e)));
}

void run_generation(ServedModel& served, const CompletionParams& params, http::Exchange& ex, AnswerFormat& fmt,
                    GenerationLog* log) {
  if (auto e = check_request(served, params, fmt.unknown_model_code())) return send_error(ex, fmt, *e);
  const CompletionParams* cp = &params;
  CompletionParams with_default;
  if (!params.max_tokens && served.options().default_n_predict) {  // --n-predict
    with_default = params;
    with_default.max_tokens = *served.options().default_n_predict;
    with_default.max_tokens_default = true;
    cp = &with_default;
  }
  const CompletionParams& c = *cp;
  // One grammar compiled (the Driver clones it per choice) and one seed for the request:
  // the answer reports it, and sending it back reproduces every prompt's text.
  std::shared_ptr<TokenConstraint> grammar;
  if (auto e = compile_constraint(served, c, &grammar)) return send_error(ex, fmt, *e);
  const ServerOptions& so = served.options();
  const uint64_t seed = c.seed_given ? c.sampling.seed : so.default_seed ? *so.default_seed : served.random_seed();
  std::vector<PreparedRequest> prepared;
  const size_t n_prompts = c.endpoint == Endpoint::kCompletions ? c.prompts.size() : 1;
  for (size_t i = 0; i < n_prompts; ++i) {
    auto p = prepare_request(served, c, i, seed);
    if (auto* e = std::get_if<ApiError>(&p)) return send_error(ex, fmt, *e);
    prepared.push_back(std::move(std::get<PreparedRequest>(p)));
  }
  // Reasoning: the thinking budget wraps the grammar (which then applies to the answer).
  const ThinkingStart start = prepared.empty() ? ThinkingStart::kMaybe : prepared[0].thinking;
  const ReasoningPlan plan = reasoning_plan(served, c, start);
  if (auto e = wrap_thinking(served, plan, start == ThinkingStart::kOpen, &grammar))
    return send_error(ex, fmt, *e);
  Driver(served, c, ex, fmt, prepared, std::move(grammar), plan, log).run();
}

}  // namespace specula::server
