// server/completion_stream.cpp — see completion_stream.h.
#include "server/completion_stream.h"

#include <algorithm>

namespace specula::server {

CompletionStream::CompletionStream(const tokenizer::Tokenizer& tokenizer, std::vector<std::string> stop,
                                   bool want_logprobs, bool want_ids, bool want_progress)
    : tokenizer_(&tokenizer),
      detok_(tokenizer),
      stop_(std::move(stop)),
      want_logprobs_(want_logprobs),
      want_ids_(want_ids),
      want_progress_(want_progress) {
  stop_.erase(std::remove(stop_.begin(), stop_.end(), std::string()), stop_.end());
}

void CompletionStream::release(size_t n) {
  out_.text.append(held_, 0, n);
  held_.erase(0, n);
  released_bytes_ += static_cast<int64_t>(n);
  while (!entries_.empty() && entries_.front().end <= released_bytes_) {
    out_.logprobs.push_back(std::move(entries_.front().entry));
    entries_.pop_front();
  }
}

bool CompletionStream::on_tokens(std::span<const TokenEvent> events) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const TokenEvent& ev : events) {
    if (want_ids_) {
      out_.token_ids.push_back(ev.id);
      if (want_logprobs_) out_.token_logprobs.push_back(ev.logprob);
    }
    auto piece = detok_.push(ev.id);
    std::string text = piece ? std::move(piece).value() : std::string();
    if (want_logprobs_) {
      PendingEntry pe;
      pe.entry.token = tokenizer_->token_to_piece(ev.id, false);
      pe.entry.logprob = ev.logprob;
      pe.entry.id = ev.id;
      for (const auto& [id, lp] : ev.top) {
        pe.entry.top.push_back({tokenizer_->token_to_piece(id, false), lp});
        pe.entry.top_ids.push_back(id);
      }
      pe.start = produced_bytes_;
      // A token whose bytes are held back by the detokenizer (partial UTF-8) ends where
      // the text that completes it ends; an empty piece ends where it starts.
      pe.end = produced_bytes_ + static_cast<int64_t>(text.size());
      entries_.push_back(std::move(pe));
    }
    held_ += text;
    produced_bytes_ += static_cast<int64_t>(text.size());
    // A complete stop string: release what precedes it and end.
    size_t cut = std::string::npos;
    for (const std::string& s : stop_) {
      const size_t at = held_.find(s);
      if (at < cut) {
        cut = at;
        stopped_by_ = s;
      }
    }
    if (cut != std::string::npos) {
      release(cut);
      held_.clear();
      // Entries of tokens that started before the stop string go out too.
      while (!entries_.empty() && entries_.front().start < released_bytes_) {
        out_.logprobs.push_back(std::move(entries_.front().entry));
        entries_.pop_front();
      }
      entries_.clear();
      stopped_by_string_ = true;
      cv_.notify_all();
      return false;
    }
    // Hold back the longest suffix that is a proper prefix of some stop string.
    size_t keep = 0;
    for (const std::string& s : stop_) {
      const size_t max_k = std::min(held_.size(), s.size() - 1);
      for (size_t k = max_k; k > keep; --k)
        if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
          keep = k;
          break;
        }
    }
    release(held_.size() - keep);
  }
  cv_.notify_all();
  return true;
}

void CompletionStream::on_finish(const RequestSummary& summary) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!stopped_by_string_) {
    held_ += detok_.finish(/*drop_incomplete_tail=*/true);
    produced_bytes_ = released_bytes_ + static_cast<int64_t>(held_.size());
    release(held_.size());
    for (auto& pe : entries_) out_.logprobs.push_back(std::move(pe.entry));
    entries_.clear();
  }
  out_.finished = true;
  out_.summary = summary;
  out_.stop_sequence = stopped_by_string_ ? stopped_by_ : "";
  switch (summary.outcome) {
    case Outcome::kStop: out_.finish_reason = "stop"; break;
    case Outcome::kLength: out_.finish_reason = "length"; break;
    case Outcome::kCancelled: out_.finish_reason = "cancelled"; break;
    case Outcome::kFailed: out_.finish_reason = "failed"; break;
  }
  cv_.notify_all();
}

void CompletionStream::on_prompt_logprobs(std::span<const TokenEvent> events) {
  std::vector<TokenLogprob> got;
  for (const TokenEvent& ev : events) {
    TokenLogprob e;
    e.token = tokenizer_->token_to_piece(ev.id, false);
    e.logprob = ev.logprob;
    e.id = ev.id;
    for (const auto& [id, lp] : ev.top) {
      e.top.push_back({tokenizer_->token_to_piece(id, false), lp});
      e.top_ids.push_back(id);
    }
    got.push_back(std::move(e));
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : got) out_.prompt_logprobs.push_back(std::move(e));
  cv_.notify_all();
}

void CompletionStream::on_prompt_progress(int64_t processed, int64_t total, int64_t cached) {
  if (!want_progress_) return;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (!progress_started_) {
    progress_started_ = true;
    admitted_ = now;
  }
  Update::Progress p;
  p.total = total;
  p.cache = cached;
  p.processed = processed;
  p.time_ms = std::chrono::duration<double, std::milli>(now - admitted_).count();
  out_.progress.push_back(p);
  cv_.notify_all();
}

CompletionStream::Update CompletionStream::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] {
    return out_.finished || !out_.text.empty() || !out_.logprobs.empty() || !out_.prompt_logprobs.empty() ||
           !out_.token_ids.empty() || !out_.progress.empty();
  });
  Update u = std::move(out_);
  out_ = Update{};
  if (u.finished) {
    out_.finished = true;
    out_.summary = u.summary;
    out_.finish_reason = u.finish_reason;
    out_.stop_sequence = u.stop_sequence;
  }
  return u;
}

}  // namespace specula::server
