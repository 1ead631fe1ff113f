// grammar/thinking_budget.h — a reasoning model's thinking, bounded: a TokenConstraint that
// lets the model think freely for at most `budget` tokens, then forces the closing tag
// ("</think>" as the tokenizer writes it) and hands the rest of the answer to an optional
// inner constraint (a JSON schema, a forced tool call: structured output applies to the
// answer, not to the thinking).
//
// Phases, advanced token by token from the tokens' text (Tokenizer::token_to_piece, as the
// answer's text is made):
//   start     — the prompt did not open a block: the first tokens may write "<think>"
//               (without an inner constraint: anything, "<think>" possibly in pieces; with
//               one: its tokens, or a token whose text begins with "<think>" — Qwen3's
//               one-token tag); text that does not open the block is the answer (given to
//               the inner constraint);
//   thinking  — any token, counted (with an inner constraint not the end of generation:
//               its answer must come); the one whose text completes "</think>" ends it (the
//               tokens that wrote the tag's beginning are then uncounted);
//               after `budget` counted tokens the closing is forced;
//   forcing   — only the next token of the closing tag;
//   answer    — the inner constraint's tokens (any token without one).
// So a budget of N yields at most N thinking tokens; 0 closes the block at once. Text after
// "</think>" in the same token as the tag is not seen by the inner constraint (Qwen3's
// "</think>" is one token of its own).
// Rollback keeps one state per consumed token (speculative decoding's rejected drafts).
// Thread-compatible as TokenConstraint; `tokenizer` must outlive it.
// Does not: split the answer's text (chat/reasoning.h) or decide the budget (the server).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/constraint.h"
#include "tokenizer/tokenizer.h"

namespace specula {

class ThinkingBudget final : public TokenConstraint {
 public:
  // n_vocab: the model's logits width. budget: thinking tokens allowed (< 0: unlimited,
  // only counted). in_thinking: the prompt opened the block. inner: the answer's
  // constraint, or null. eog: the end-of-generation ids, refused while thinking when there
  // is an inner constraint (its answer must come). Errors: the closing tag does not tokenize.
  static Result<std::unique_ptr<ThinkingBudget>> create(const tokenizer::Tokenizer& tokenizer, int32_t n_vocab,
                                                        int64_t budget, bool in_thinking,
                                                        std::shared_ptr<TokenConstraint> inner,
                                                        std::vector<int32_t> eog = {});

  int32_t mask_words() const override { return (n_vocab_ + 31) / 32; }
  Status compute_mask(uint32_t* bits) override;
  Status consume(std::span<const int32_t> tokens) override;
  Status rollback(int32_t n) override;
  int32_t valid_prefix(std::span<const int32_t> tokens) override;
  std::vector<int32_t> forced_tokens(int32_t max_tokens) override;
  bool stopped() const override;
  bool accepting() override;
  Result<std::unique_ptr<TokenConstraint>> clone() const override;
  bool governs_eos() const override { return inner_ && inner_->governs_eos(); }

  // Thinking tokens consumed so far: the tokens whose text ends before the closing tag (a
  // natural tag's tokens are uncounted once its text is complete; forced ones never count).
  int64_t thinking_tokens() const { return states_.back().count; }
  // The block was opened (by the prompt or the model) and is closed now.
  bool thinking_closed() const { return states_.back().phase == Phase::kAnswer && states_.back().opened; }

 private:
  enum class Phase { kStart, kThinking, kForcing, kAnswer };
  struct State {
    Phase phase = Phase::kStart;
    int64_t count = 0;        // thinking tokens
    std::string tail;         // start: the text so far; thinking: the last bytes (a partial tag)
    int32_t forced = 0;       // forcing: closing tokens written
    std::vector<int32_t> recent;  // thinking: byte lengths of the last counted tokens (a tag's own are uncounted)
    bool opened = false;
    std::vector<int32_t> start_ids;  // start: tokens held back from the inner constraint
    int32_t inner_consumed = 0;      // tokens this step gave the inner constraint
  };
  ThinkingBudget() = default;
  Status step(const State& from, int32_t id, State* to);
  const std::vector<int32_t>& open_prefix_ids();  // ids whose text begins with "<think>" (start + inner)

  const tokenizer::Tokenizer* tok_ = nullptr;
  int32_t n_vocab_ = 0;
  int64_t budget_ = -1;
  std::vector<int32_t> close_ids_;
  std::vector<int32_t> eog_;
  std::shared_ptr<TokenConstraint> inner_;
  std::vector<State> states_;  // states_[0]: before any token
  std::shared_ptr<std::vector<int32_t>> open_ids_;
};

}  // namespace specula
