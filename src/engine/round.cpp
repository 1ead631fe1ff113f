// engine/round.cpp — Engine::step(): one step of the running group, speculative or not
// (DESIGN.md "Speculative round"; see scheduler.h).
//
// 1. draft: rows that speculate get proposals from the engine's draft source;
// 2. window: each decoding row feeds [pending, d_1 .. d_k] (k = its proposal count, 0
//    without drafts; rows are ragged, not padded), prefilling rows feed a prompt chunk
//    under the step's token budget;
// 3. one target forward over all of it, one logits projection for every position that
//    samples;
//    the prompt chunks just consumed go to the draft source too (DraftSource::prefill),
//    so a draft model's prompt work is prompt time;
// 4. per row, the acceptance walk with the row's own sampler (method/speculative.h):
//    exact match, or rejection sampling when options_.spec_rejection and the source
//    sampled the row's drafts and returned their distributions;
// 5. tokens go to the row's sink one at a time (a sink that says stop ends the request
//    right there, so usage and text match plain decoding);
// 6. resolve: the target cache drops the rejected positions of each row (KvCache::trim,
//    which stays within the sliding-window rollback margin since depth <= 64), and the
//    draft source is told each row's new context.
// A failed forward leaves the group's state untrusted: its requests fail (kFailed).
#include <algorithm>
#include <chrono>
#include <cstring>

#include "engine/scheduler.h"
#include "method/speculative.h"

namespace specula {
namespace {
// Adaptive depth: all drafts accepted -> one deeper (up to the configured depth); some
// accepted -> one more than were accepted; none -> half as deep, and after two such rounds
// in a row the row stops drafting for 2, 4, .. 16 steps. Rejected drafts cost verify work
// (and draft-model steps), so rows whose drafts keep failing decode plainly.
template <class Row>
void adapt_depth(Row& a, int32_t proposed, int32_t accepted, int32_t max_depth) {
  if (accepted == proposed) {
    a.depth_cap = std::min(max_depth, a.depth_cap + 1);
    a.spec_misses = 0;
  } else if (accepted > 0) {
    a.depth_cap = std::min(max_depth, accepted + 1);
    a.spec_misses = 0;
  } else {
    a.depth_cap = std::max(1, a.depth_cap / 2);
    ++a.spec_misses;
    if (a.spec_misses >= 2) a.spec_skip = 1 << std::min(a.spec_misses - 1, 4);
  }
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

bool Engine::step() {
  const double t0 = now_s();
  const int64_t E = model_->info().n_embd;
  const int32_t n_vocab = static_cast<int32_t>(model_->info().n_vocab);
  const int64_t n_ctx = cache_.n_ctx();

  // 1. Drafts for decoding rows that speculate.
  std::vector<std::vector<int32_t>> proposals(running_.size());
  std::vector<std::vector<TokenDist>> draft_q(running_.size());  // rejection sampling only
  int32_t n_decoding = 0;
  for (const Active& a : running_)
    if (a.prefilled >= static_cast<int64_t>(a.p.request.prompt.size())) ++n_decoding;
  if (options_.draft && options_.spec_depth > 0 &&
      (options_.spec_max_batch <= 0 || n_decoding <= options_.spec_max_batch)) {
    std::vector<DraftRow> drows;
    std::vector<size_t> didx;
    for (size_t i = 0; i < running_.size(); ++i) {
      Active& a = running_[i];
      if (!a.p.request.speculative || a.prefilled < static_cast<int64_t>(a.p.request.prompt.size())) continue;
      const int64_t remaining = a.p.request.max_tokens - a.n_generated;  // tokens it may still sample
      const int64_t room = n_ctx - cache_.length(a.row) - 1;            // positions after the pending one
      if (a.spec_skip > 0) {  // backing off after rounds that accepted nothing
        --a.spec_skip;
        continue;
      }
      if (a.depth_cap <= 0) a.depth_cap = options_.spec_depth;
      const int64_t depth = std::min<int64_t>({a.depth_cap, remaining - 1, room});
      if (depth <= 0) continue;
      drows.push_back(DraftRow{a.row, a.context, static_cast<int32_t>(depth),
                               options_.spec_rejection ? &a.sampler.params() : nullptr});
      didx.push_back(i);
    }
    if (!drows.empty()) {
      std::vector<std::vector<int32_t>> got;
      std::vector<std::vector<TokenDist>> got_q;
      const Status ds = options_.spec_rejection ? options_.draft->draft_sampled(drows, got, got_q)
                                                : options_.draft->draft(drows, got);
      if (ds.is_ok()) {
        for (size_t j = 0; j < didx.size() && j < got.size(); ++j) {
          if (static_cast<int64_t>(got[j].size()) > drows[j].max_depth) got[j].resize(drows[j].max_depth);
          proposals[didx[j]] = std::move(got[j]);
          // Distributions only when there is one per proposal; otherwise exact match.
          if (j < got_q.size() && got_q[j].size() >= proposals[didx[j]].size() && !proposals[didx[j]].empty()) {
            got_q[j].resize(proposals[didx[j]].size());
            draft_q[didx[j]] = std::move(got_q[j]);
          }
        }
      }
      // A failing draft source only costs speed: those rows decode without drafts.
    }
  }

  // 2. Windows: decoding rows first (pending + drafts), then prompt chunks.
  ids_.clear();
  rows_.clear();
  counts_.clear();
  std::vector<size_t> members;     // running_ index of each batch row
  std::vector<int64_t> out_first;  // packed index of the first position that samples, or -1
  std::vector<int64_t> out_count;  // positions that sample
  int64_t n_decode_tokens = 0;
  for (size_t i = 0; i < running_.size(); ++i) {
    Active& a = running_[i];
    if (a.prefilled < static_cast<int64_t>(a.p.request.prompt.size())) continue;
    members.push_back(i);
    rows_.push_back(a.row);
    const int64_t n = 1 + static_cast<int64_t>(proposals[i].size());
    counts_.push_back(n);
    out_first.push_back(static_cast<int64_t>(ids_.size()));
    out_count.push_back(n);
    ids_.push_back(a.next);
    ids_.insert(ids_.end(), proposals[i].begin(), proposals[i].end());
    n_decode_tokens += n;
  }
  int64_t budget = std::max<int64_t>(options_.step_tokens - n_decode_tokens, 1);
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Active& a = running_[i];
    const int64_t n_prompt = static_cast<int64_t>(a.p.request.prompt.size());
    if (a.prefilled >= n_prompt) continue;
    const int64_t n = std::min(n_prompt - a.prefilled, budget);
    budget -= n;
    members.push_back(i);
    rows_.push_back(a.row);
    counts_.push_back(n);
    ids_.insert(ids_.end(), a.p.request.prompt.begin() + a.prefilled, a.p.request.prompt.begin() + a.prefilled + n);
    const bool completes = a.prefilled + n == n_prompt;
    out_first.push_back(completes ? static_cast<int64_t>(ids_.size()) - 1 : -1);
    out_count.push_back(completes ? 1 : 0);
  }
  if (members.empty()) return false;

  // 3. One forward, one projection.
  Batch batch;
  batch.B = static_cast<int32_t>(members.size());
  batch.ids = ids_.data();
  batch.rows = rows_.data();
  batch.n_tokens = counts_.data();
  Status st = model_->forward(batch, cache_, hidden_);
  if (!st.is_ok()) {
    std::vector<size_t> order(members);
    std::sort(order.rbegin(), order.rend());
    for (size_t i : order) finish(i, Outcome::kFailed, st.message());
    return true;
  }
  std::vector<int64_t> out_offset(members.size(), 0);  // row b's first logits row
  int64_t n_out = 0;
  for (size_t b = 0; b < members.size(); ++b) {
    out_offset[b] = n_out;
    n_out += out_count[b];
  }
  if (n_out > 0) {
    logit_hidden_.resize(static_cast<size_t>(n_out * E));
    for (size_t b = 0; b < members.size(); ++b)
      if (out_count[b] > 0)
        std::memcpy(logit_hidden_.data() + out_offset[b] * E, hidden_.data() + out_first[b] * E,
                    static_cast<size_t>(out_count[b] * E) * sizeof(float));
    logits_.resize(static_cast<size_t>(n_out) * n_vocab);
    model_->project_logits(logit_hidden_.data(), n_out, logits_.data());
  }
  std::vector<DraftRow> prompt_rows;  // rows that prefilled a chunk and will speculate
  for (size_t b = 0; b < members.size(); ++b) {
    Active& a = running_[members[b]];
    if (a.prefilled >= static_cast<int64_t>(a.p.request.prompt.size())) continue;
    a.prefilled += counts_[b];
    if (options_.draft && options_.spec_depth > 0 && a.p.request.speculative)
      prompt_rows.push_back(DraftRow{a.row, std::span<const int32_t>(a.p.request.prompt.data(), a.prefilled), 0});
  }
  // The draft source follows the prompt chunk by chunk (its prefill is prompt time, and the
  // first round only catches up one token). A failure only costs speed.
  if (!prompt_rows.empty()) (void)options_.draft->prefill(prompt_rows);

  // 4-6. Walk, deliver, resolve.
  const double t_forward = now_s();
  std::vector<std::pair<size_t, Outcome>> done;
  std::vector<DraftRow> commits;
  uint64_t sampled_total = 0, drafted_total = 0, accepted_total = 0, spec_rows = 0;
  for (size_t b = 0; b < members.size(); ++b) {
    if (out_count[b] == 0) continue;
    const size_t idx = members[b];
    Active& a = running_[idx];
    if (a.p.handle->cancelled()) {
      done.push_back({idx, Outcome::kCancelled});
      continue;
    }
    const EngineRequest& r = a.p.request;
    const std::vector<int32_t>& prop = proposals[idx];
    const int32_t budget_left = static_cast<int32_t>(r.max_tokens - a.n_generated);
    WalkResult w = draft_q[idx].empty()
                       ? speculative_walk(a.sampler, logits_.data() + out_offset[b] * n_vocab, n_vocab, prop,
                                          budget_left, options_.eog_ids, r.ignore_eos, r.top_logprobs)
                       : speculative_walk_rejection(a.sampler, logits_.data() + out_offset[b] * n_vocab, n_vocab,
                                                    prop, draft_q[idx], budget_left, options_.eog_ids,
                                                    r.ignore_eos, r.top_logprobs);
    if (a.first_token == 0) a.first_token = t_forward;
    if (!prop.empty()) {
      ++a.spec_rounds;
      ++spec_rows;
      a.drafted += static_cast<int64_t>(prop.size());
      a.accepted += w.accepted;
      drafted_total += prop.size();
      accepted_total += static_cast<uint64_t>(w.accepted);
      adapt_depth(a, static_cast<int32_t>(prop.size()), w.accepted, options_.spec_depth);
    }
    // Deliver one token at a time so a stop inside the accepted drafts ends exactly there.
    bool keep = true, failed = false;
    int32_t delivered = 0;
    for (const WalkToken& t : w.tokens) {
      TokenEvent ev;
      ev.id = t.id;
      ev.logprob = t.logprob;
      ev.top = t.top;
      ++delivered;
      try {
        keep = a.p.sink->on_tokens(std::span<const TokenEvent>(&ev, 1));
      } catch (...) {
        failed = true;
      }
      a.context.push_back(t.id);
      if (failed || !keep) break;
    }
    const int32_t sampled = (failed || !keep) ? delivered : w.sampled;
    a.n_generated += sampled;
    sampled_total += static_cast<uint64_t>(sampled);
    if (failed) {
      done.push_back({idx, Outcome::kFailed});
    } else if (!keep || w.hit_eog) {
      done.push_back({idx, Outcome::kStop});
    } else if (a.n_generated >= r.max_tokens) {
      done.push_back({idx, Outcome::kLength});
    } else {
      // Resolve: keep pending + accepted drafts; the last emitted token is the new pending.
      const int64_t rejected = static_cast<int64_t>(prop.size()) - w.accepted;
      if (rejected > 0 && !cache_.trim(a.row, rejected).is_ok()) {
        done.push_back({idx, Outcome::kFailed});
        continue;
      }
      a.next = w.tokens.back().id;
      if (cache_.length(a.row) + 1 > n_ctx) {
        done.push_back({idx, Outcome::kLength});
      } else if (!prop.empty() || (options_.draft && r.speculative)) {
        commits.push_back(DraftRow{a.row, a.context, 0});
      }
    }
  }
  if (options_.draft && !commits.empty()) options_.draft->commit(commits);
  {
    std::lock_guard<std::mutex> lock(wakeup_->mu);
    ++stats_.steps;
    stats_.generated_tokens += sampled_total;
    stats_.spec_rounds += spec_rows;
    stats_.drafted += drafted_total;
    stats_.accepted += accepted_total;
    stats_.step_seconds.observe(now_s() - t0);
    stats_.batch_rows.observe(static_cast<double>(members.size()));
    stats_.batch_tokens.observe(static_cast<double>(ids_.size()));
  }
  std::sort(done.begin(), done.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  for (const auto& [idx, outcome] : done)
    finish(idx, outcome, outcome == Outcome::kFailed ? "[engine] the request's consumer or cache rollback failed" : "");
  return true;
}

}  // namespace specula
