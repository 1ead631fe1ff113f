// engine/engine.cpp — see engine.h.
#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstring>
#include <exception>
#include <optional>
#include <vector>

#include "core/fault.h"

namespace specula {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kStop: return "stop";
    case Outcome::kLength: return "length";
    case Outcome::kCancelled: return "cancelled";
    case Outcome::kFailed: return "failed";
  }
  return "?";
}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++count;
}

// Ends a request that never got a row (cancelled while queued, or at shutdown).
void Engine::end_waiting(Pending& p, Outcome outcome) {
  RequestSummary sum;
  sum.outcome = outcome;
  sum.n_prompt = static_cast<int64_t>(p.request.prompt.size());
  sum.queue_seconds = now_seconds() - p.submitted;
  try {
    p.sink->on_finish(sum);
  } catch (...) {
  }
}

bool Engine::run_exclusive(const std::function<void(Model&)>& fn) {
  std::promise<bool> done;
  std::future<bool> f = done.get_future();
  {
    std::lock_guard<std::mutex> lock(wakeup_->mu);
    if (stopping_) return false;
    exclusive_.push_back(Exclusive{&fn, &done});
  }
  wakeup_->cv.notify_all();
  return f.get();
}

void RequestHandle::cancel() {
  cancelled_.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lock(wakeup_->mu);
  wakeup_->cv.notify_all();
}

Result<std::unique_ptr<Engine>> Engine::create(Model& model, EngineOptions options) {
  if (options.n_rows <= 0 || options.n_rows > 1024)
    return Status::error("[engine] rows must be in [1, 1024], got " + std::to_string(options.n_rows));
  if (options.n_ctx <= 1 || options.n_ctx > (int64_t{1} << 30))
    return Status::error("[engine] context must be in [2, 2^30], got " + std::to_string(options.n_ctx));
  if (options.step_tokens < options.n_rows)
    return Status::error("[engine] step token budget " + std::to_string(options.step_tokens) +
                         " must be at least the row count " + std::to_string(options.n_rows));
  if (options.max_queue < 0) return Status::error("[engine] queue limit must be >= 0");
  if (options.kv_budget < 0) return Status::error("[engine] KV budget must be >= 0 bytes");
  if (options.draft && (options.spec_depth < 1 || options.spec_depth > 32))
    return Status::error("[engine] speculative depth must be in [1, 32], got " + std::to_string(options.spec_depth));
  auto state = new_state(model, options.cache, options.n_ctx);
  if (!state) return state.status();
  return std::unique_ptr<Engine>(new Engine(model, std::move(options), std::move(state).value()));
}

Engine::Engine(Model& model, EngineOptions options, StateRows state)
    : model_(&model), options_(std::move(options)), state_(std::move(state)),
      wakeup_(std::make_shared<EngineWakeup>()) {
  layouts_ = state_.describe();
  checkpoints_ = !state_.any_prefix_reusable();
  if (options_.total_ctx <= 0) options_.total_ctx = options_.n_rows * options_.n_ctx;
  if (options_.kv_budget == 0)
    options_.kv_budget = options_.n_rows * bytes_for((options_.total_ctx + options_.n_rows - 1) / options_.n_rows);
  round_ = std::make_unique<Round>(*model_, state_, options_.draft.get(), options_.eog_ids);
  stats_.n_rows = options_.n_rows;
  stats_.kv_budget = options_.kv_budget;
  stats_.step_seconds = Histogram({0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5});
  stats_.batch_rows = Histogram({1, 2, 4, 8, 16, 32, 64, 128});
  stats_.batch_tokens = Histogram({1, 4, 16, 64, 256, 1024, 4096});
  // vLLM's buckets (vllm/engine/metrics.py), so dashboards made for it read these too.
  stats_.ttft_seconds = Histogram({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                                   7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0});
  stats_.tpot_seconds = Histogram({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                                   10.0, 20.0, 40.0, 80.0});
  stats_.request_seconds = Histogram({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                                      120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0});
  const std::vector<double> counts = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000,
                                      100000, 200000, 500000, 1000000};
  stats_.request_prompt_tokens = Histogram(counts);
  stats_.request_generated_tokens = Histogram(counts);
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(wakeup_->mu);
    stopping_ = true;
    wakeup_->cv.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

int64_t Engine::running_tokens() const {
  int64_t n = 0;
  for (const Active& a : running_) n += a.tokens_in_state();
  return n;
}

int64_t Engine::bytes_for(int64_t n_tokens) const {
  return state_.bytes_for(n_tokens) + (options_.draft ? options_.draft->bytes_for(n_tokens) : 0);
}

Submission Engine::submit(EngineRequest request, std::shared_ptr<RequestSink> sink) {
  Submission s;
  const int64_t n_vocab = model_->info().n_vocab;
  auto refuse = [&](std::string msg, std::string param, StatusCode code = StatusCode::kInvalidArgument) {
    s.status = Status::error(code, "[engine] " + std::move(msg));
    s.param = std::move(param);
    std::lock_guard<std::mutex> lock(wakeup_->mu);
    ++stats_.rejected_invalid;
    return s;
  };
  if (sink == nullptr) return refuse("no sink", "");
  if (request.prompt.empty()) return refuse("the prompt is empty", "prompt");
  for (size_t i = 0; i < request.prompt.size(); ++i)
    if (request.prompt[i] < 0 || request.prompt[i] >= n_vocab)
      return refuse("prompt token " + std::to_string(request.prompt[i]) + " at position " + std::to_string(i) +
                        " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")",
                    "prompt");
  if (request.max_tokens < 0)
    return refuse("max_tokens must be a non-negative integer, got " + std::to_string(request.max_tokens), "max_tokens");
  if (request.top_logprobs > 20 || request.top_logprobs < -1)
    return refuse("top_logprobs must be in [0, 20], got " + std::to_string(request.top_logprobs), "top_logprobs");
  if (request.prompt_logprobs > 20 || request.prompt_logprobs < -1)
    return refuse("prompt_logprobs must be in [0, 20], got " + std::to_string(request.prompt_logprobs),
                  "prompt_logprobs");
  const int64_t need = static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
  if (need > options_.n_ctx)
    return refuse("prompt (" + std::to_string(request.prompt.size()) + " tokens) + max_tokens (" +
                      std::to_string(request.max_tokens) + ") = " + std::to_string(need) +
                      " exceeds the context of " + std::to_string(options_.n_ctx) + " tokens",
                  "max_tokens", StatusCode::kContextOverflow);
  const int64_t bytes = bytes_for(need);
  if (bytes > options_.kv_budget)
    return refuse("prompt + max_tokens = " + std::to_string(need) + " tokens need " + std::to_string(bytes >> 20) +
                      " MiB of KV cache, more than the whole budget of " + std::to_string(options_.kv_budget >> 20) +
                      " MiB",
                  "max_tokens");
  if (Status st = request.sampling.validate(static_cast<int32_t>(n_vocab)); !st.is_ok())
    return refuse(st.message(), "");
  if (request.lora != nullptr)
    for (const LoraWeight& w : request.lora->adapters) {
      if (w.adapter == nullptr || w.adapter->base_id() != model_->instance_id())
        return refuse("a LoRA adapter that was not loaded for this engine's model", "lora");
      if (!std::isfinite(w.scale)) return refuse("a LoRA scale must be a finite number", "lora");
    }

  std::lock_guard<std::mutex> lock(wakeup_->mu);
  if (stopping_) {
    s.status = Status::unavailable("[engine] shutting down");
    return s;
  }
  const int64_t waiting = static_cast<int64_t>(queue_.size());
  const int64_t free_rows = options_.n_rows - stats_.running_rows;
  if (waiting - free_rows >= options_.max_queue) {
    s.status = Status::error(StatusCode::kBusy, "[engine] queue full: " + std::to_string(waiting) +
                                                    " requests waiting (limit " + std::to_string(options_.max_queue) + ")");
    ++stats_.rejected_busy;
    return s;
  }
  s.handle = std::shared_ptr<RequestHandle>(new RequestHandle(next_id_++, wakeup_));
  Pending p;
  p.handle = s.handle;
  p.sink = std::move(sink);
  p.request = std::move(request);
  p.submitted = now_seconds();
  queue_.push_back(std::move(p));
  stats_.queue_depth = static_cast<int64_t>(queue_.size());
  wakeup_->cv.notify_all();
  return s;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(wakeup_->mu);
  return stats_;
}

namespace {
void add_lora_ids(const EngineRequest& r, std::vector<uint64_t>& ids) {
  if (!has_lora(r)) return;
  for (const LoraWeight& w : r.lora->adapters)
    if (w.adapter != nullptr) ids.push_back(w.adapter->id());
}
void sort_unique(std::vector<uint64_t>& ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
}
}  // namespace

// Adapter sets with a prompt cache of their own at once; together they take half the RAM
// tier's cap again.
constexpr size_t kLoraCaches = 8;

PromptCache* Engine::cache_of(const EngineRequest& r) {
  if (!options_.prompt_cache) return nullptr;
  if (!has_lora(r)) return options_.prompt_cache.get();
  const int64_t ram = options_.prompt_cache->options().ram_bytes / (2 * kLoraCaches);
  if (ram <= 0) return nullptr;
  std::string key = "lora";
  for (const LoraWeight& w : r.lora->adapters) {
    uint32_t bits = 0;
    std::memcpy(&bits, &w.scale, sizeof bits);
    key += ";" + std::to_string(w.adapter != nullptr ? w.adapter->id() : 0) + "*" + std::to_string(bits);
  }
  for (LoraCache& c : lora_caches_)
    if (c.key == key) {
      c.last_use = ++lora_cache_clock_;
      return c.cache.get();
    }
  PromptCacheOptions o;
  o.ram_bytes = ram;
  o.fingerprint = options_.prompt_cache->options().fingerprint + "|" + key;
  auto made = PromptCache::create(std::move(o));  // RAM only: cannot fail
  if (!made) return nullptr;
  if (lora_caches_.size() >= kLoraCaches) {
    auto lru = std::min_element(lora_caches_.begin(), lora_caches_.end(),
                                [](const LoraCache& a, const LoraCache& b) { return a.last_use < b.last_use; });
    lora_caches_.erase(lru);
  }
  lora_caches_.push_back({key, std::move(made).value(), ++lora_cache_clock_});
  return lora_caches_.back().cache.get();
}

Engine::LoraUse Engine::lora_in_use() const {
  LoraUse use;
  std::lock_guard<std::mutex> lock(wakeup_->mu);
  use.running = running_lora_;
  for (const Pending& p : queue_) add_lora_ids(p.request, use.waiting);
  sort_unique(use.waiting);
  return use;
}

ExecutionPlan Engine::plan_for(const EngineRequest& r) const {
  ExecutionPlan plan;
  if (!options_.draft) {
    plan.reason = "autoregressive: no draft source configured (--spec ngram or --draft-model)";
  } else if (!r.speculative) {
    plan.reason = "autoregressive: the request opted out of speculation";
  } else {
    plan.speculative = true;
    plan.source = options_.draft->name();
    plan.reason = "speculative: " + plan.source + ", up to " + std::to_string(options_.spec_depth) +
                  " drafts per round (adaptive), " +
                  (options_.spec_rejection && r.sampling.temperature > 0.0f ? "rejection sampling"
                                                                            : "exact-match acceptance");
    if (options_.spec_max_batch > 0)
      plan.reason += "; drafts only in steps where at most " + std::to_string(options_.spec_max_batch) +
                     " requests decode";
  }
  return plan;
}

void Engine::loop() {
  for (;;) {
    std::vector<Pending> admitted;
    std::vector<Pending> dropped;  // cancelled while queued
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(wakeup_->mu);
      auto has_work = [&] {
        if (stopping_ || !queue_.empty() || !exclusive_.empty()) return true;
        for (const Active& a : running_)
          if (a.p.handle->cancelled()) return true;
        return !running_.empty();
      };
      wakeup_->cv.wait(lock, has_work);
      stopping = stopping_;
      // Exclusive work runs now, between steps, with the lock released.
      while (!stopping && !exclusive_.empty()) {
        Exclusive x = exclusive_.front();
        exclusive_.pop_front();
        lock.unlock();
        try {
          (*x.fn)(*model_);
          x.done->set_value(true);
        } catch (...) {
          x.done->set_exception(std::current_exception());  // rethrown in run_exclusive's caller
        }
        lock.lock();
      }
      stopping = stopping_;
      // A queued request whose client left gives its place up now, wherever it waits
      // (not when it reaches the head): abandoned requests never fill the queue.
      for (auto it = queue_.begin(); !stopping && it != queue_.end();) {
        if (it->handle->cancelled()) {
          ++stats_.finished[static_cast<int>(Outcome::kCancelled)];
          dropped.push_back(std::move(*it));
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      // Admission, in order, while a row and the KV budget allow; a queued request that
      // was cancelled while waiting is taken too (it ends at once below).
      int64_t reserved = reserved_;
      while (!stopping && !queue_.empty() &&
             static_cast<int64_t>(running_.size() + admitted.size()) < options_.n_rows) {
        const Pending& head = queue_.front();
        const int64_t need =
            bytes_for(static_cast<int64_t>(head.request.prompt.size()) + head.request.max_tokens);
        if (!head.handle->cancelled() && reserved + need > options_.kv_budget) break;  // wait for memory
        reserved += need;
        admitted.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      stats_.queue_depth = static_cast<int64_t>(queue_.size());
      // Nothing runs and the head still does not fit: cannot happen (submit() refuses
      // requests larger than the budget), but never spin on it.
      if (!stopping && admitted.empty() && running_.empty() && !queue_.empty()) {
        Pending p = std::move(queue_.front());
        queue_.pop_front();
        stats_.queue_depth = static_cast<int64_t>(queue_.size());
        lock.unlock();
        for (Pending& d : dropped) end_waiting(d, Outcome::kCancelled);
        RequestSummary sum;
        sum.outcome = Outcome::kFailed;
        sum.error = "[engine] the request does not fit the KV budget";
        sum.n_prompt = static_cast<int64_t>(p.request.prompt.size());
        try { p.sink->on_finish(sum); } catch (...) {}
        continue;
      }
    }
    for (Pending& p : dropped) end_waiting(p, Outcome::kCancelled);
    if (stopping) {
      std::deque<Pending> rest;
      {
        std::lock_guard<std::mutex> lock(wakeup_->mu);
        rest.swap(queue_);
        stats_.queue_depth = 0;
        for (Exclusive& x : exclusive_) x.done->set_value(false);
        exclusive_.clear();
      }
      std::vector<std::pair<size_t, Outcome>> all;
      for (size_t i = 0; i < running_.size(); ++i) all.push_back({i, Outcome::kCancelled});
      retire(std::move(all));
      for (Pending& p : rest) end_waiting(p, Outcome::kCancelled);
      return;
    }
    admit(admitted);
    // Retire cancelled rows before spending a step on them.
    std::vector<std::pair<size_t, Outcome>> cancelled;
    for (size_t i = 0; i < running_.size(); ++i) {
      if (running_[i].p.handle->cancelled()) cancelled.push_back({i, Outcome::kCancelled});
      else if (running_[i].stop_after_replay) cancelled.push_back({i, Outcome::kStop});
    }
    if (!cancelled.empty()) retire(std::move(cancelled));
    if (!running_.empty()) step();
  }
}

void Engine::admit(std::vector<Pending>& admitted) {
  if (admitted.empty()) return;
  const double now = now_seconds();
  uint64_t admitted_prompt_tokens = 0;
  for (Pending& p : admitted) {
    // Prepare: everything that can fail happens before the row joins the group (the
    // request was validated at submit, so building its sampler cannot fail).
    auto row = state_.new_row();
    Status st = row ? state_.reserve(1) : row.status();
    int64_t cached = 0;
    const auto& prompt = p.request.prompt;
    const std::string gen_key = st.is_ok() ? generation_key(p.request) : std::string();
    bool resumed = false;
    std::optional<Active> resuming;
    if (!gen_key.empty()) {
      // An interrupted identical request left a checkpoint: continue it.
      Sampler s0(p.request.sampling);
      resuming.emplace(std::move(p), std::move(s0));
      resuming->gen_key = gen_key;
      resumed = resume_generation(*resuming, *row);
      if (!resumed) p = std::move(resuming->p);
    }
    PromptCache* cache = st.is_ok() ? cache_of(p.request) : nullptr;
    if (!resumed && cache != nullptr && prompt.size() > 1 && p.request.prompt_logprobs < 0) {
      // The longest cached prefix, leaving at least the last prompt token to compute.
      auto hit = cache->lookup(prompt, static_cast<int64_t>(prompt.size()) - 1, state_);
      if (hit) {
        cached = hit->length;
        row = std::move(hit->state);
      }
    }
    if (!st.is_ok()) {
      RequestSummary sum;
      sum.outcome = Outcome::kFailed;
      sum.error = st.message();
      sum.n_prompt = static_cast<int64_t>(p.request.prompt.size());
      {
        std::lock_guard<std::mutex> lock(wakeup_->mu);
        ++stats_.finished[static_cast<int>(Outcome::kFailed)];
      }
      try { p.sink->on_finish(sum); } catch (...) {}
      continue;
    }
    if (resumed) {
      Active a = std::move(*resuming);
      admitted_prompt_tokens += a.p.request.prompt.size();
      a.admitted = now;
      a.first_token = now;
      a.plan = plan_for(a.p.request);
      a.plan.reason += "; resumed from a generation checkpoint after " + std::to_string(a.n_generated) + " tokens";
      a.reserved = bytes_for(static_cast<int64_t>(a.p.request.prompt.size()) + a.p.request.max_tokens);
      state_.insert(std::move(row).value());
      reserved_ += a.reserved;
      running_.push_back(std::move(a));
      continue;
    }
    admitted_prompt_tokens += p.request.prompt.size();
    Sampler sampler(p.request.sampling);
    for (int32_t id : p.request.prompt) sampler.accept_prompt(id);
    Active a{std::move(p), std::move(sampler)};
    a.admitted = now;
    a.context = a.p.request.prompt;
    a.plan = plan_for(a.p.request);
    a.reserved = bytes_for(static_cast<int64_t>(a.p.request.prompt.size()) + a.p.request.max_tokens);
    a.cached = cached;
    a.prefilled = cached;
    a.gen_key = gen_key;
    if (!gen_key.empty()) a.next_gen_checkpoint = options_.generation_checkpoint;
    // Commit: the row joins the group (cannot fail after reserve()).
    state_.insert(std::move(row).value());
    reserved_ += a.reserved;
    running_.push_back(std::move(a));
    const Active& in = running_.back();
    try {
      in.p.sink->on_prompt_progress(in.prefilled, static_cast<int64_t>(in.p.request.prompt.size()), in.cached);
    } catch (...) {
      // progress is informational
    }
  }
  std::vector<uint64_t> lora_ids;
  for (const Active& a : running_) add_lora_ids(a.p.request, lora_ids);
  sort_unique(lora_ids);
  std::lock_guard<std::mutex> lock(wakeup_->mu);
  stats_.running_rows = static_cast<int64_t>(running_.size());
  running_lora_ = std::move(lora_ids);
  stats_.prompt_tokens += admitted_prompt_tokens;
  stats_.kv_reserved = reserved_;
}

void Engine::retire(std::vector<std::pair<size_t, Outcome>> ended, const std::string& error) {
  if (ended.empty()) return;
  std::sort(ended.begin(), ended.end());
  std::vector<int32_t> keep, gone_rows;
  std::vector<Active> stay, gone;
  std::vector<Outcome> outcomes;
  size_t e = 0;
  for (size_t i = 0; i < running_.size(); ++i) {
    if (e < ended.size() && ended[e].first == i) {
      // A row listed twice ends once, failed if either says so (a failure is never
      // outweighed by an earlier stop: its state is not trusted).
      Outcome o = ended[e].second;
      for (; e < ended.size() && ended[e].first == i; ++e)
        if (ended[e].second == Outcome::kFailed) o = Outcome::kFailed;
      outcomes.push_back(o);
      gone_rows.push_back(static_cast<int32_t>(i));
      gone.push_back(std::move(running_[i]));
    } else {
      keep.push_back(static_cast<int32_t>(i));
      stay.push_back(std::move(running_[i]));
    }
  }
  // Finished and cancelled requests leave their state to the prompt cache (a failed one's
  // state is not trusted).
  if (options_.prompt_cache) {
    for (size_t g = 0; g < gone.size(); ++g) {
      const Active& a = gone[g];
      RowState st = state_.take(gone_rows[g]);
      PromptCache* cache = outcomes[g] == Outcome::kFailed ? nullptr : cache_of(a.p.request);
      if (cache == nullptr || fault::fire(fault::Point::kCacheExtract) || st.layers.empty() || st.length <= a.cached ||
          st.length > static_cast<int64_t>(a.context.size()))
        continue;
      std::vector<int32_t> tokens(a.context.begin(), a.context.begin() + st.length);
      cache->insert(std::move(tokens), std::move(st));
    }
  }
  state_.filter(keep);
  running_ = std::move(stay);
  const double now = now_seconds();
  std::vector<std::pair<std::shared_ptr<RequestSink>, RequestSummary>> finishing;
  for (size_t k = 0; k < gone.size(); ++k) {
    Active& a = gone[k];
    if (options_.draft) options_.draft->release(a.p.handle->id());
    // A generation that ended needs no checkpoint; a cancelled one keeps it (a retry of the
    // same request continues it).
    if (!a.gen_key.empty() && outcomes[k] != Outcome::kCancelled) options_.prompt_cache->drop_checkpoint(a.gen_key);
    reserved_ -= a.reserved;
    RequestSummary sum;
    sum.outcome = outcomes[k];
    sum.plan = a.plan;
    if (outcomes[k] == Outcome::kFailed)
      sum.error = !a.error.empty() ? a.error : error.empty() ? "[engine] the request's consumer failed" : error;
    sum.request_fault = outcomes[k] == Outcome::kFailed && a.request_fault;
    sum.n_prompt = static_cast<int64_t>(a.p.request.prompt.size());
    sum.cached_tokens = a.cached;
    sum.n_generated = a.n_generated;
    sum.queue_seconds = a.admitted - a.p.submitted;
    sum.prefill_seconds = a.first_token > 0 ? a.first_token - a.admitted : now - a.admitted;
    sum.decode_seconds = a.first_token > 0 ? now - a.first_token : 0;
    sum.spec_rounds = a.spec_rounds;
    sum.drafted = a.drafted;
    sum.accepted = a.accepted;
    {
      std::lock_guard<std::mutex> lock(wakeup_->mu);
      ++stats_.finished[static_cast<int>(outcomes[k])];
      if (a.first_token > 0) stats_.ttft_seconds.observe(a.first_token - a.p.submitted);
      if (sum.n_generated > 1) stats_.tpot_seconds.observe(sum.decode_seconds / static_cast<double>(sum.n_generated - 1));
      stats_.request_seconds.observe(now - a.p.submitted);
      stats_.request_prompt_tokens.observe(static_cast<double>(sum.n_prompt));
      stats_.request_generated_tokens.observe(static_cast<double>(sum.n_generated));
    }
    finishing.emplace_back(a.p.sink, std::move(sum));
  }
  // The gauges change once every retired request is counted, and before any consumer
  // hears of its end: a reader that sees the rows gone also sees all their outcomes, and a
  // consumer that heard of its end sees its row gone. Memory freed: queued requests
  // waiting for budget may fit now.
  {
    std::vector<uint64_t> lora_ids;
    for (const Active& a : running_) add_lora_ids(a.p.request, lora_ids);
    sort_unique(lora_ids);
    std::lock_guard<std::mutex> lock(wakeup_->mu);
    stats_.running_rows = static_cast<int64_t>(running_.size());
    running_lora_ = std::move(lora_ids);
    stats_.kv_reserved = reserved_;
    stats_.kv_bytes = state_.bytes();
    stats_.kv_tokens = running_tokens();
    wakeup_->cv.notify_all();
  }
  for (auto& [sink, sum] : finishing) {
    try {
      sink->on_finish(sum);
    } catch (...) {
      // A consumer's failure ends only its own request, which is over already.
    }
  }
}

}  // namespace specula
