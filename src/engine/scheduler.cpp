// engine/scheduler.cpp — see scheduler.h.
#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>

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

void RequestHandle::cancel() {
  cancelled_.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lock(wakeup_->mu);
  wakeup_->cv.notify_all();
}

Result<std::unique_ptr<Engine>> Engine::create(Model& model, EngineOptions options) {
  if (options.n_rows <= 0 || options.n_rows > 1024)
    return Status::error("[engine] rows must be in [1, 1024], got " + std::to_string(options.n_rows));
  if (options.n_ctx <= 1) return Status::error("[engine] context must be > 1, got " + std::to_string(options.n_ctx));
  if (options.step_tokens < options.n_rows)
    return Status::error("[engine] step token budget " + std::to_string(options.step_tokens) +
                         " must be at least the row count " + std::to_string(options.n_rows));
  if (options.max_queue < 0) return Status::error("[engine] queue limit must be >= 0");
  if (options.draft && (options.spec_depth < 1 || options.spec_depth > 32))
    return Status::error("[engine] speculative depth must be in [1, 32], got " + std::to_string(options.spec_depth));
  auto cache = model.new_cache(options.n_rows, options.n_ctx);
  if (!cache) return cache.status();
  return std::unique_ptr<Engine>(new Engine(model, std::move(options), std::move(cache).value()));
}

Engine::Engine(Model& model, EngineOptions options, KvCache cache)
    : model_(&model), options_(std::move(options)), cache_(std::move(cache)),
      wakeup_(std::make_shared<EngineWakeup>()) {
  stats_.n_rows = options_.n_rows;
  stats_.step_seconds = Histogram({0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5});
  stats_.batch_rows = Histogram({1, 2, 4, 8, 16, 32, 64, 128});
  stats_.batch_tokens = Histogram({1, 4, 16, 64, 256, 1024, 4096});
  for (int32_t r = options_.n_rows - 1; r >= 0; --r) free_rows_.push_back(r);
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

Submission Engine::submit(EngineRequest request, std::shared_ptr<RequestSink> sink) {
  Submission s;
  const int64_t n_vocab = model_->info().n_vocab;
  auto refuse = [&](std::string msg, std::string param) {
    s.error = SubmitError::kInvalid;
    s.message = "[engine] " + std::move(msg);
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
  if (request.max_tokens <= 0)
    return refuse("max_tokens must be a positive integer, got " + std::to_string(request.max_tokens), "max_tokens");
  if (request.top_logprobs > 20 || request.top_logprobs < -1)
    return refuse("top_logprobs must be in [0, 20], got " + std::to_string(request.top_logprobs), "top_logprobs");
  const int64_t need = static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
  if (need > options_.n_ctx)
    return refuse("prompt (" + std::to_string(request.prompt.size()) + " tokens) + max_tokens (" +
                      std::to_string(request.max_tokens) + ") = " + std::to_string(need) +
                      " exceeds the context of " + std::to_string(options_.n_ctx) + " tokens",
                  "max_tokens");
  if (Status st = request.sampling.validate(static_cast<int32_t>(n_vocab)); !st.is_ok())
    return refuse(st.message(), "");

  std::lock_guard<std::mutex> lock(wakeup_->mu);
  if (stopping_) {
    s.error = SubmitError::kStopped;
    s.message = "[engine] shutting down";
    return s;
  }
  const int64_t waiting = static_cast<int64_t>(queue_.size());
  const int64_t free_rows = options_.n_rows - stats_.running_rows;
  if (waiting - free_rows >= options_.max_queue) {
    s.error = SubmitError::kBusy;
    s.message = "[engine] queue full: " + std::to_string(waiting) + " requests waiting (limit " +
                std::to_string(options_.max_queue) + ")";
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

void Engine::loop() {
  for (;;) {
    std::vector<Pending> admitted;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(wakeup_->mu);
      auto has_work = [&] {
        if (stopping_ || !queue_.empty()) return true;
        for (const Active& a : running_)
          if (a.p.handle->cancelled()) return true;
        return !running_.empty();
      };
      wakeup_->cv.wait(lock, has_work);
      stopping = stopping_;
      // Admission, prepare phase: take as many queued requests as there are free rows.
      while (!stopping && !queue_.empty() && admitted.size() < free_rows_.size()) {
        admitted.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      stats_.queue_depth = static_cast<int64_t>(queue_.size());
    }
    if (stopping) {
      std::deque<Pending> rest;
      {
        std::lock_guard<std::mutex> lock(wakeup_->mu);
        rest.swap(queue_);
        stats_.queue_depth = 0;
      }
      for (size_t i = running_.size(); i-- > 0;) finish(i, Outcome::kCancelled);
      for (Pending& p : rest) {
        RequestSummary sum;
        sum.outcome = Outcome::kCancelled;
        sum.n_prompt = static_cast<int64_t>(p.request.prompt.size());
        try { p.sink->on_finish(sum); } catch (...) {}
      }
      return;
    }
    const double now = now_seconds();
    uint64_t admitted_prompt_tokens = 0;
    for (Pending& p : admitted) {
      // Prepare: everything that can fail happens before the row joins the group (the
      // request was validated at submit, so building its sampler cannot fail).
      admitted_prompt_tokens += p.request.prompt.size();
      Sampler sampler(p.request.sampling);
      for (int32_t id : p.request.prompt) sampler.accept(id);
      Active a{std::move(p), std::move(sampler)};
      a.admitted = now;
      a.context = a.p.request.prompt;
      // Commit: take a free row.
      a.row = free_rows_.back();
      free_rows_.pop_back();
      cache_.clear(a.row);
      running_.push_back(std::move(a));
    }
    if (!admitted.empty()) {
      std::lock_guard<std::mutex> lock(wakeup_->mu);
      stats_.running_rows = static_cast<int64_t>(running_.size());
      stats_.prompt_tokens += admitted_prompt_tokens;
    }
    // Retire cancelled rows before spending a step on them.
    for (size_t i = running_.size(); i-- > 0;)
      if (running_[i].p.handle->cancelled()) finish(i, Outcome::kCancelled);
    if (!running_.empty()) step();
  }
}

void Engine::finish(size_t index, Outcome outcome, std::string error) {
  Active a = std::move(running_[index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  cache_.clear(a.row);
  if (options_.draft) options_.draft->release(a.row);
  free_rows_.push_back(a.row);
  const double now = now_seconds();
  RequestSummary sum;
  sum.outcome = outcome;
  sum.error = std::move(error);
  sum.n_prompt = static_cast<int64_t>(a.p.request.prompt.size());
  sum.n_generated = a.n_generated;
  sum.queue_seconds = a.admitted - a.p.submitted;
  sum.prefill_seconds = a.first_token > 0 ? a.first_token - a.admitted : now - a.admitted;
  sum.decode_seconds = a.first_token > 0 ? now - a.first_token : 0;
  sum.spec_rounds = a.spec_rounds;
  sum.drafted = a.drafted;
  sum.accepted = a.accepted;
  {
    std::lock_guard<std::mutex> lock(wakeup_->mu);
    ++stats_.finished[static_cast<int>(outcome)];
    stats_.running_rows = static_cast<int64_t>(running_.size());
  }
  try {
    a.p.sink->on_finish(sum);
  } catch (...) {
    // A consumer's failure ends only its own request, which is over already.
  }
}

}  // namespace specula
