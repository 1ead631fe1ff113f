// engine/step.cpp — Engine::step(): plan the step's rows, run one method round
// (decoding/round.h), deliver each row's tokens, resolve the round, retire finished rows.
//
// Planning: decoding rows come first, each with its draft depth (its plan allows
// speculation, the step has at most spec_max_batch decoding rows, its adaptive depth is not
// backing off, and its budget and context leave room); then prompt chunks of rows still
// prefilling fill the step's token budget.
// Delivery: tokens go to the row's sink one at a time, so a stop inside the accepted
// drafts ends the request exactly there (usage and text match plain decoding). The round
// then keeps, per continuing row, the pending token plus its accepted drafts.
// A failed forward fails the requests of that step (their rows are back at their
// pre-round state, and are released).
#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "core/fault.h"
#include "engine/engine.h"

namespace specula {
namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void Engine::plan_step(std::vector<RoundRow>& rows, std::vector<size_t>& members) {
  int64_t n_decoding = 0;
  for (const Active& a : running_) n_decoding += a.decoding() ? 1 : 0;
  const bool may_draft = options_.draft && options_.spec_depth > 0 &&
                         (options_.spec_max_batch <= 0 || n_decoding <= options_.spec_max_batch);
  int64_t n_decode_tokens = 0;
  for (size_t i = 0; i < running_.size(); ++i) {
    Active& a = running_[i];
    if (!a.decoding()) continue;
    const EngineRequest& r = a.p.request;
    RoundRow row;
    row.row = static_cast<int32_t>(i);
    row.id = a.p.handle->id();
    row.context = a.context;
    row.budget = static_cast<int32_t>(r.max_tokens - a.n_generated);
    row.sampler = &a.sampler;
    row.ignore_eos = r.ignore_eos;
    row.top_logprobs = r.top_logprobs;
    row.post_sampling = r.post_sampling_probs;
    row.speculative = a.plan.speculative;
    row.constraint = r.constraint.get();
    row.lora = r.lora.get();
    if (a.plan.speculative && may_draft) {
      const int64_t room = state_.max_length() - state_.length(row.row) - 1;  // positions after the pending one
      row.depth = a.depth.next(options_.spec_depth, std::min<int64_t>(row.budget - 1, room));
      if (row.depth > 0 && options_.spec_rejection) row.draft_sampling = &a.sampler.params();
    }
    n_decode_tokens += 1 + row.depth;
    rows.push_back(row);
    members.push_back(i);
  }
  int64_t budget = std::max<int64_t>(options_.step_tokens - n_decode_tokens, 1);
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Active& a = running_[i];
    if (a.decoding()) continue;
    const int64_t n_prompt = static_cast<int64_t>(a.p.request.prompt.size());
    // Chunks end at checkpoint positions, so the state there can be stored.
    const int64_t n = std::min(next_checkpoint(a) - a.prefilled, budget);
    budget -= n;
    RoundRow row;
    row.row = static_cast<int32_t>(i);
    row.id = a.p.handle->id();
    row.context = std::span<const int32_t>(a.p.request.prompt.data(), static_cast<size_t>(a.prefilled + n));
    row.chunk = n;
    row.samples = a.prefilled + n == n_prompt && a.p.request.max_tokens > 0;  // max_tokens 0: prefill only
    row.budget = static_cast<int32_t>(a.p.request.max_tokens);
    row.sampler = &a.sampler;
    row.ignore_eos = a.p.request.ignore_eos;
    row.top_logprobs = a.p.request.top_logprobs;
    row.post_sampling = a.p.request.post_sampling_probs;
    row.speculative = a.plan.speculative;
    row.constraint = a.p.request.constraint.get();
    row.lora = a.p.request.lora.get();
    row.prompt_logprobs = a.p.request.prompt_logprobs;
    row.next_prompt_token = a.prefilled + n < n_prompt ? a.p.request.prompt[static_cast<size_t>(a.prefilled + n)] : -1;
    rows.push_back(row);
    members.push_back(i);
  }
}

int64_t Engine::next_checkpoint(const Active& a) const {
  const int64_t n_prompt = static_cast<int64_t>(a.p.request.prompt.size());
  if (!options_.prompt_cache || !checkpoints_ || (has_lora(a.p.request) && options_.prompt_cache->options().ram_bytes < 16))
    return n_prompt;
  int64_t next = n_prompt - 1;  // the prompt's end, minus the token whose logits are needed
  if (options_.cache_checkpoint_every > 0) {
    const int64_t every = (a.prefilled / options_.cache_checkpoint_every + 1) * options_.cache_checkpoint_every;
    next = std::min(next, every);
  }
  return next > a.prefilled ? next : n_prompt;
}

bool Engine::deliver(Active& a, const RoundResult& res, Outcome& outcome) {
  const EngineRequest& r = a.p.request;
  const WalkResult& w = res.walk;
  bool keep = true, failed = false;
  int32_t delivered = 0;
  for (const WalkToken& t : w.tokens) {
    TokenEvent ev;
    ev.id = t.id;
    ev.logprob = t.logprob;
    ev.top = t.top;
    ++delivered;
    try {
      if (fault::fire(fault::Point::kDeliver)) throw std::runtime_error("[fault] injected: delivery");
      keep = a.p.sink->on_tokens(std::span<const TokenEvent>(&ev, 1));
    } catch (...) {
      failed = true;
    }
    a.context.push_back(t.id);
    if (!a.gen_key.empty()) a.events.push_back(std::move(ev));
    if (failed || !keep) break;
  }
  a.n_generated += (failed || !keep) ? delivered : w.sampled;
  if (failed) {
    outcome = Outcome::kFailed;
  } else if (!keep || w.hit_eog) {
    outcome = Outcome::kStop;
  } else if (a.n_generated >= r.max_tokens) {
    outcome = Outcome::kLength;
  } else {
    a.next = w.tokens.back().id;
    return false;
  }
  return true;
}

bool Engine::step() {
  const double t0 = now_s();
  std::vector<RoundRow> rows;
  std::vector<size_t> members;  // running_ index of each round row
  plan_step(rows, members);
  if (rows.empty()) return false;

  Status st = round_->prepare(rows);
  if (!st.is_ok()) {
    std::vector<std::pair<size_t, Outcome>> failed;
    for (size_t i : members) failed.push_back({i, Outcome::kFailed});
    retire(std::move(failed), st.message());
    return true;
  }
  const double t_forward = now_s();
  const auto& results = round_->results();
  std::vector<std::pair<size_t, Outcome>> ended;
  std::vector<int64_t> keep(rows.size(), 0);
  std::vector<std::span<const int32_t>> contexts(rows.size());
  std::vector<size_t> prompt_checkpoints;  // round rows whose prompt state is stored once the round holds
  uint64_t sampled_total = 0, drafted_total = 0, accepted_total = 0, spec_rows = 0;
  for (size_t k = 0; k < rows.size(); ++k) {
    Active& a = running_[members[k]];
    const RoundResult& res = results[k];
    if (!res.prompt.empty()) {
      std::vector<TokenEvent> evs;
      for (const WalkToken& t : res.prompt) evs.push_back(TokenEvent{t.id, t.logprob, t.top});
      try {
        a.p.sink->on_prompt_logprobs(evs);
      } catch (...) {
        a.error = "[engine] the request's consumer failed on prompt logprobs";
        ended.push_back({members[k], Outcome::kFailed});
        continue;
      }
    }
    if (rows[k].chunk > 0) {
      const int64_t due = next_checkpoint(a);
      a.prefilled += rows[k].chunk;
      try {
        a.p.sink->on_prompt_progress(a.prefilled, static_cast<int64_t>(a.p.request.prompt.size()), a.cached);
      } catch (...) {
        // progress is informational
      }
      if (a.prefilled == due && due < static_cast<int64_t>(a.p.request.prompt.size()) && a.prefilled > a.cached)
        prompt_checkpoints.push_back(k);
    }
    if (rows[k].chunk > 0 && a.p.request.max_tokens == 0 && a.decoding()) {
      ended.push_back({members[k], Outcome::kLength});  // prefill only: done
      continue;
    }
    if (!res.sampled) continue;
    if (!res.error.empty()) {  // the row's grammar failed: this request fails, the others go on
      a.error = res.error;
      a.request_fault = true;
      ended.push_back({members[k], Outcome::kFailed});
      continue;
    }
    if (a.p.handle->cancelled()) {
      ended.push_back({members[k], Outcome::kCancelled});
      continue;
    }
    if (a.first_token == 0) a.first_token = t_forward;
    const int64_t before = a.n_generated;
    if (!res.drafts.empty()) {
      ++a.spec_rounds;
      ++spec_rows;
      a.drafted += static_cast<int64_t>(res.drafts.size());
      a.accepted += res.walk.accepted;
      drafted_total += res.drafts.size();
      accepted_total += static_cast<uint64_t>(res.walk.accepted);
      a.depth.update(static_cast<int32_t>(res.drafts.size()), res.walk.accepted, options_.spec_depth);
    }
    Outcome outcome;
    const size_t context_before = a.context.size();
    const bool ends = deliver(a, res, outcome);
    sampled_total += static_cast<uint64_t>(a.n_generated - before);
    // Keep the pending token and the accepted drafts that reached the context (all of them
    // unless the request ended inside the drafts), so the row's state always matches
    // context[0, length) — also for a request that ends here (the prompt cache keeps it).
    const int64_t delivered = static_cast<int64_t>(a.context.size() - context_before);
    if (rows[k].chunk == 0) keep[k] = 1 + std::min<int64_t>(res.walk.accepted, delivered);
    if (ends) {
      ended.push_back({members[k], outcome});
      continue;
    }
    contexts[k] = a.context;
  }
  st = round_->commit(keep, contexts);
  {
    std::lock_guard<std::mutex> lock(wakeup_->mu);
    ++stats_.steps;
    stats_.generated_tokens += sampled_total;
    stats_.spec_rounds += spec_rows;
    stats_.drafted += drafted_total;
    stats_.accepted += accepted_total;
    stats_.grammar_masks = round_->grammar_masks();
    stats_.grammar_mask_seconds = round_->grammar_mask_seconds();
    stats_.grammar_wait_seconds = round_->grammar_wait_seconds();
    stats_.step_seconds.observe(now_s() - t0);
    stats_.batch_rows.observe(static_cast<double>(rows.size()));
    int64_t tokens = 0;
    for (size_t k = 0; k < rows.size(); ++k)
      tokens += rows[k].chunk > 0 ? rows[k].chunk : 1 + static_cast<int64_t>(results[k].drafts.size());
    stats_.batch_tokens.observe(static_cast<double>(tokens));
    stats_.kv_bytes = state_.bytes();
    stats_.kv_tokens = running_tokens();
  }
  // (Stats first: a request's response may complete inside retire(), and a client reading
  // /metrics right after must see this step counted.)
  if (!st.is_ok()) {
    // A layer could not resolve: every row of the round is untrusted — also one that ended
    // earlier in this step (its stop or length is void: it fails, and nothing of it reaches
    // the prompt cache or a checkpoint).
    ended.clear();
    for (size_t i : members) ended.push_back({i, Outcome::kFailed});
    retire(std::move(ended), "[engine] cache rollback failed: " + st.message());
  } else {
    // Prompt checkpoints of this round's prefill chunks, now that the round holds.
    for (size_t k : prompt_checkpoints) {
      Active& a = running_[members[k]];
      if (fault::fire(fault::Point::kCacheExtract)) continue;  // (a failed copy only costs the cache)
      PromptCache* cache = cache_of(a.p.request);
      if (cache == nullptr) continue;
      auto copy = state_.extract(static_cast<int32_t>(members[k]));
      if (copy)
        cache->insert(
            std::vector<int32_t>(a.p.request.prompt.begin(), a.p.request.prompt.begin() + a.prefilled),
            std::move(copy).value());
    }
    // A row whose context is full ends here (its pending token has no position left).
    for (size_t k = 0; k < rows.size(); ++k)
      if (!contexts[k].empty() && state_.length(static_cast<int32_t>(members[k])) + 1 > state_.max_length())
        ended.push_back({members[k], Outcome::kLength});
    // Generation checkpoints of the rows that go on.
    for (size_t k = 0; k < rows.size(); ++k) {
      Active& a = running_[members[k]];
      if (contexts[k].empty() || a.gen_key.empty() || a.n_generated < a.next_gen_checkpoint) continue;
      if (std::find_if(ended.begin(), ended.end(), [&](const auto& e) { return e.first == members[k]; }) != ended.end())
        continue;
      store_generation_checkpoint(members[k]);
      a.next_gen_checkpoint = (a.n_generated / options_.generation_checkpoint + 1) * options_.generation_checkpoint;
    }
    retire(std::move(ended));
  }
  return true;
}

}  // namespace specula
