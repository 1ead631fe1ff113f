// grammar/thinking_budget.cpp — see thinking_budget.h.
#include "grammar/thinking_budget.h"

#include <algorithm>
#include <cstring>

namespace specula {

namespace {
const std::string kOpen = "<think>";
const std::string kClose = "</think>";
constexpr size_t kMaxStates = 512;  // rollback reaches one round's drafts back, never this far

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
// `text` can still become "<think>" (a proper prefix of it).
bool open_prefix(const std::string& text) { return text.size() < kOpen.size() && starts_with(kOpen, text); }

void set_bit(uint32_t* bits, int32_t id) { bits[id / 32] |= 1u << (id % 32); }
}  // namespace

Result<std::unique_ptr<ThinkingBudget>> ThinkingBudget::create(const tokenizer::Tokenizer& tokenizer, int32_t n_vocab,
                                                               int64_t budget, bool in_thinking,
                                                               std::shared_ptr<TokenConstraint> inner,
                                                               std::vector<int32_t> eog) {
  std::unique_ptr<ThinkingBudget> t(new ThinkingBudget());
  t->tok_ = &tokenizer;
  t->n_vocab_ = n_vocab;
  t->budget_ = budget;
  t->close_ids_ = tokenizer.encode(kClose, /*add_special=*/false, /*parse_special=*/true);
  if (t->close_ids_.empty()) return Status::error("[grammar] thinking budget: \"</think>\" tokenizes to nothing");
  for (int32_t id : t->close_ids_)
    if (id < 0 || id >= n_vocab) return Status::error("[grammar] thinking budget: \"</think>\" is outside the vocabulary");
  t->inner_ = std::move(inner);
  t->eog_ = std::move(eog);
  State s0;
  if (in_thinking) {
    s0.phase = budget == 0 ? Phase::kForcing : Phase::kThinking;
    s0.opened = true;
  }
  t->states_.push_back(std::move(s0));
  return t;
}

const std::vector<int32_t>& ThinkingBudget::open_prefix_ids() {
  if (!open_ids_) {
    open_ids_ = std::make_shared<std::vector<int32_t>>();
    const int32_t n = std::min<int32_t>(n_vocab_, static_cast<int32_t>(tok_->vocab().size()));
    for (int32_t id = 0; id < n; ++id) {
      const std::string p = tok_->token_to_piece(id, false);
      if (starts_with(p, kOpen)) open_ids_->push_back(id);
    }
  }
  return *open_ids_;
}

Status ThinkingBudget::step(const State& from, int32_t id, State* to) {
  *to = from;
  to->inner_consumed = 0;
  const std::string piece = tok_->vocab().valid_id(id) ? tok_->token_to_piece(id, false) : std::string();
  switch (from.phase) {
    case Phase::kStart: {
      to->tail += piece;
      to->start_ids.push_back(id);
      // Without an inner grammar a "<think>" may come in pieces; with one, only a token that
      // writes all of it opens the block (a "<" is the grammar's: XML, a <tool_call>).
      if (!inner_ && open_prefix(to->tail) && !piece.empty()) return Status::ok();
      if (starts_with(to->tail, kOpen)) {
        to->opened = true;
        to->tail.erase(0, kOpen.size());
        to->start_ids.clear();
        if (to->tail.find(kClose) != std::string::npos) {
          to->phase = Phase::kAnswer;
          to->tail.clear();
        } else {
          to->phase = budget_ == 0 ? Phase::kForcing : Phase::kThinking;
        }
        return Status::ok();
      }
      // No thinking: all of it is the answer.
      to->phase = Phase::kAnswer;
      to->tail.clear();
      if (inner_) {
        // (checked first: a matcher that refuses a token is dead, not just unmoved)
        if (inner_->valid_prefix(to->start_ids) != static_cast<int32_t>(to->start_ids.size()))
          return Status::error("[grammar] the output's grammar refuses token " + std::to_string(id));
        if (Status st = inner_->consume(to->start_ids); !st.is_ok()) return st;
        to->inner_consumed = static_cast<int32_t>(to->start_ids.size());
      }
      to->start_ids.clear();
      return Status::ok();
    }
    case Phase::kThinking: {
      const std::string s = from.tail + piece;
      if (const size_t at = s.find(kClose); at != std::string::npos) {
        // Earlier tokens that wrote the tag's beginning were not thinking.
        int64_t overlap = from.tail.size() > at ? static_cast<int64_t>(from.tail.size() - at) : 0;
        while (overlap > 0 && !to->recent.empty()) {
          overlap -= to->recent.back();
          to->recent.pop_back();
          --to->count;
        }
        to->recent.clear();
        to->phase = Phase::kAnswer;
        to->tail.clear();
        return Status::ok();
      }
      if (piece.empty()) return Status::ok();  // a control token (the end of generation) is no thinking
      ++to->count;
      to->recent.push_back(static_cast<int32_t>(piece.size()));
      if (to->recent.size() > kClose.size()) to->recent.erase(to->recent.begin());
      to->tail = s.substr(s.size() - std::min(s.size(), kClose.size() - 1));
      if (budget_ >= 0 && to->count >= budget_) {
        to->phase = Phase::kForcing;
        to->forced = 0;
      }
      return Status::ok();
    }
    case Phase::kForcing:
      if (id != close_ids_[static_cast<size_t>(from.forced)])
        return Status::error("[grammar] thinking budget: token " + std::to_string(id) +
                             " where the closing \"</think>\" is forced");
      if (++to->forced == static_cast<int32_t>(close_ids_.size())) {
        to->phase = Phase::kAnswer;
        to->tail.clear();
      }
      return Status::ok();
    case Phase::kAnswer:
      if (inner_) {
        if (inner_->valid_prefix(std::span<const int32_t>(&id, 1)) != 1)
          return Status::error("[grammar] the output's grammar refuses token " + std::to_string(id));
        if (Status st = inner_->consume(std::span<const int32_t>(&id, 1)); !st.is_ok()) return st;
        to->inner_consumed = 1;
      }
      return Status::ok();
  }
  return Status::ok();
}

Status ThinkingBudget::compute_mask(uint32_t* bits) {
  const State& s = states_.back();
  const size_t words = static_cast<size_t>(mask_words());
  auto all = [&] { std::memset(bits, 0xff, words * sizeof(uint32_t)); };
  switch (s.phase) {
    case Phase::kStart:
      if (!inner_) {
        all();
        return Status::ok();
      }
      if (Status st = inner_->compute_mask(bits); !st.is_ok()) return st;
      for (int32_t id : open_prefix_ids()) set_bit(bits, id);
      return Status::ok();
    case Phase::kThinking:
      all();
      // With a grammar for the answer, the answer must come: no end inside the thinking.
      if (inner_)
        for (int32_t id : eog_)
          if (id >= 0 && id < n_vocab_) bits[id / 32] &= ~(1u << (id % 32));
      return Status::ok();
    case Phase::kForcing:
      std::memset(bits, 0, words * sizeof(uint32_t));
      set_bit(bits, close_ids_[static_cast<size_t>(s.forced)]);
      return Status::ok();
    case Phase::kAnswer:
      if (inner_) return inner_->compute_mask(bits);
      all();
      return Status::ok();
  }
  return Status::ok();
}

Status ThinkingBudget::consume(std::span<const int32_t> tokens) {
  int32_t done = 0;
  for (int32_t id : tokens) {
    State next;
    if (Status st = step(states_.back(), id, &next); !st.is_ok()) {
      (void)rollback(done);
      return st;
    }
    states_.push_back(std::move(next));
    ++done;
  }
  if (states_.size() > kMaxStates) states_.erase(states_.begin(), states_.begin() + kMaxStates / 2);
  return Status::ok();
}

Status ThinkingBudget::rollback(int32_t n) {
  if (n <= 0) return Status::ok();
  if (static_cast<size_t>(n) >= states_.size())
    return Status::error("[grammar] thinking budget: rollback of " + std::to_string(n) + " tokens is too far");
  int32_t inner_n = 0;
  for (int32_t k = 0; k < n; ++k) {
    inner_n += states_.back().inner_consumed;
    states_.pop_back();
  }
  if (inner_ && inner_n > 0) return inner_->rollback(inner_n);
  return Status::ok();
}

int32_t ThinkingBudget::valid_prefix(std::span<const int32_t> tokens) {
  int32_t n = 0;
  for (int32_t id : tokens) {
    if (!consume(std::span<const int32_t>(&id, 1)).is_ok()) break;
    ++n;
  }
  (void)rollback(n);
  return n;
}

std::vector<int32_t> ThinkingBudget::forced_tokens(int32_t max_tokens) {
  const State& s = states_.back();
  if (max_tokens <= 0) return {};
  if (s.phase == Phase::kForcing) {
    std::vector<int32_t> out(close_ids_.begin() + s.forced, close_ids_.end());
    if (static_cast<int32_t>(out.size()) > max_tokens) out.resize(static_cast<size_t>(max_tokens));
    return out;
  }
  if (s.phase == Phase::kAnswer && inner_) return inner_->forced_tokens(max_tokens);
  return {};
}

bool ThinkingBudget::stopped() const { return states_.back().phase == Phase::kAnswer && inner_ && inner_->stopped(); }

bool ThinkingBudget::accepting() {
  if (states_.back().phase == Phase::kAnswer) return !inner_ || inner_->accepting();
  return !inner_;
}

Result<std::unique_ptr<TokenConstraint>> ThinkingBudget::clone() const {
  std::unique_ptr<ThinkingBudget> t(new ThinkingBudget());
  t->tok_ = tok_;
  t->n_vocab_ = n_vocab_;
  t->budget_ = budget_;
  t->close_ids_ = close_ids_;
  t->eog_ = eog_;
  t->states_ = states_;
  t->open_ids_ = open_ids_;
  if (inner_) {
    auto c = inner_->clone();
    if (!c) return c.status();
    t->inner_ = std::move(c).value();
  }
  return std::unique_ptr<TokenConstraint>(std::move(t));
}

}  // namespace specula
