// tests/grammar/thinking_budget_test.cpp — grammar/thinking_budget.h on Gemma 3's
// vocabulary (where "<think>" and "</think>" are text of several tokens): the budget's
// count and forced closing, the natural close, the start phase, the inner grammar after the
// thinking (its masks equal a fresh grammar's), rollback, valid_prefix and clone.
// Oracle: the tokens' own text (token_to_piece) and a fresh llguidance matcher.
#include "grammar/thinking_budget.h"

#include <gtest/gtest.h>

#include "../test_util.h"

namespace specula {
namespace {

class ThinkingBudgetTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = testing::default_tokenizer().release();
    if (tok_ == nullptr) return;
    auto g = GrammarVocab::create(*tok_, tok_->vocab().size(), std::vector<int32_t>{1, 106});
    ASSERT_TRUE(g.is_ok()) << g.message();
    vocab_ = new std::shared_ptr<const GrammarVocab>(std::move(g).value());
  }
  static void TearDownTestSuite() {
    delete vocab_;
    delete tok_;
    vocab_ = nullptr;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (tok_ == nullptr) GTEST_SKIP() << "model not found: " << testing::default_model_path();
  }
  static int32_t n_vocab() { return tok_->vocab().size(); }
  std::unique_ptr<ThinkingBudget> make(int64_t budget, bool in_thinking, std::shared_ptr<TokenConstraint> inner = nullptr) {
    auto t = ThinkingBudget::create(*tok_, n_vocab(), budget, in_thinking, std::move(inner));
    EXPECT_TRUE(t.is_ok()) << t.message();
    return t.is_ok() ? std::move(t).value() : nullptr;
  }
  std::vector<uint32_t> mask(TokenConstraint& c) {
    std::vector<uint32_t> m(static_cast<size_t>(c.mask_words()));
    EXPECT_TRUE(c.compute_mask(m.data()).is_ok());
    return m;
  }
  static int count_allowed(const std::vector<uint32_t>& m) {
    int n = 0;
    for (int32_t id = 0; id < n_vocab(); ++id) n += (m[id / 32] >> (id % 32)) & 1u;
    return n;
  }
  std::vector<int32_t> ids(const std::string& text) { return tok_->encode(text, false, false); }
  std::shared_ptr<TokenConstraint> json_object() {
    ConstraintSpec spec;
    spec.kind = ConstraintKind::kJsonObject;
    auto c = TokenConstraint::create(*vocab_, spec);
    EXPECT_TRUE(c.is_ok()) << c.message();
    return std::shared_ptr<TokenConstraint>(std::move(c).value());
  }
  static inline tokenizer::Tokenizer* tok_ = nullptr;
  static inline std::shared_ptr<const GrammarVocab>* vocab_ = nullptr;
};

TEST_F(ThinkingBudgetTest, BudgetForcesTheClosingTag) {
  const std::vector<int32_t> close = tok_->encode("</think>", false, true);
  ASSERT_GT(close.size(), 1u);  // text on this vocabulary: forced token by token
  const std::vector<int32_t> words = ids(" one two three four five six seven eight nine ten");
  ASSERT_GE(words.size(), 6u);
  for (int64_t budget : {0, 1, 5}) {
    auto t = make(budget, /*in_thinking=*/true);
    ASSERT_NE(t, nullptr);
    for (int64_t k = 0; k < budget; ++k) {
      EXPECT_EQ(count_allowed(mask(*t)), n_vocab()) << "thinking allows every token";
      ASSERT_TRUE(t->consume({&words[static_cast<size_t>(k)], 1}).is_ok());
    }
    EXPECT_EQ(t->thinking_tokens(), budget);
    // Spent: only the closing tag, token by token; a thinking token is refused.
    EXPECT_EQ(t->forced_tokens(16), close);
    for (size_t j = 0; j < close.size(); ++j) {
      const auto m = mask(*t);
      EXPECT_EQ(count_allowed(m), 1);
      EXPECT_TRUE((m[close[j] / 32] >> (close[j] % 32)) & 1u);
      EXPECT_FALSE(t->consume({&words[0], 1}).is_ok());
      ASSERT_TRUE(t->consume({&close[j], 1}).is_ok());
    }
    EXPECT_TRUE(t->thinking_closed());
    EXPECT_EQ(count_allowed(mask(*t)), n_vocab());
    EXPECT_EQ(t->thinking_tokens(), budget);
  }
}

TEST_F(ThinkingBudgetTest, NaturalCloseAndCount) {
  auto t = make(-1, true);
  const std::vector<int32_t> thought = ids("Let me think.");
  ASSERT_TRUE(t->consume(thought).is_ok());
  EXPECT_EQ(t->thinking_tokens(), static_cast<int64_t>(thought.size()));
  EXPECT_FALSE(t->thinking_closed());
  // The closing tag's text, however it is tokenized, ends the thinking; its own tokens are
  // not thinking tokens (counted while the tag was not known, uncounted when it completes).
  const std::vector<int32_t> close = ids("</think>");
  ASSERT_GT(close.size(), 1u);
  ASSERT_TRUE(t->consume({close.data(), close.size() - 1}).is_ok());
  EXPECT_EQ(t->thinking_tokens(), static_cast<int64_t>(thought.size() + close.size() - 1));
  ASSERT_TRUE(t->consume({&close.back(), 1}).is_ok());
  EXPECT_TRUE(t->thinking_closed());
  EXPECT_EQ(t->thinking_tokens(), static_cast<int64_t>(thought.size()));
  const int64_t n = t->thinking_tokens();
  ASSERT_TRUE(t->consume(ids(" The answer.")).is_ok());
  EXPECT_EQ(t->thinking_tokens(), n);
}

TEST_F(ThinkingBudgetTest, StartPhase) {
  auto t = make(2, false);
  ASSERT_TRUE(t->consume(ids("<think>")).is_ok());
  EXPECT_EQ(t->thinking_tokens(), 0);
  const auto w = ids(" a b");
  ASSERT_TRUE(t->consume(w).is_ok());
  EXPECT_EQ(count_allowed(mask(*t)), 1) << "budget 2 spent: the closing tag is forced";
  auto u = make(2, false);
  ASSERT_TRUE(u->consume(ids("Hello there friend")).is_ok());
  EXPECT_EQ(u->thinking_tokens(), 0) << "no thinking: the answer is not counted";
  EXPECT_EQ(count_allowed(mask(*u)), n_vocab());
}

// After the thinking the inner grammar decides, with masks equal to a fresh matcher's.
TEST_F(ThinkingBudgetTest, InnerGrammarAfterThinking) {
  auto inner = json_object();
  auto fresh = json_object();
  auto t = make(3, true, inner);
  ASSERT_TRUE(t->consume(ids(" maybe json")).is_ok());  // 2 or 3 tokens of thinking
  const std::vector<int32_t> close = tok_->encode("</think>", false, true);
  while (!t->thinking_closed()) {
    const auto f = t->forced_tokens(1);
    if (f.empty()) {
      const auto w = ids(" x");
      ASSERT_TRUE(t->consume(w).is_ok());
      continue;
    }
    ASSERT_TRUE(t->consume(f).is_ok());
  }
  EXPECT_EQ(mask(*t), mask(*fresh));
  const auto obj = ids("{\"a\": 1");
  ASSERT_TRUE(t->consume(obj).is_ok());
  ASSERT_TRUE(fresh->consume(obj).is_ok());
  EXPECT_EQ(mask(*t), mask(*fresh));
  EXPECT_FALSE(t->consume(ids(" <")).is_ok()) << "the inner grammar refuses";
  // Rollback reaches into the inner grammar.
  ASSERT_TRUE(t->rollback(static_cast<int32_t>(obj.size())).is_ok());
  ASSERT_TRUE(fresh->rollback(static_cast<int32_t>(obj.size())).is_ok());
  EXPECT_EQ(mask(*t), mask(*fresh));
}

// With an inner grammar and a prompt that did not open the block, the first token is the
// grammar's, or one whose text begins with "<think>" (Gemma has none: the grammar alone) —
// a "<" is the grammar's own (here a regex that starts with one), not the start of a tag.
TEST_F(ThinkingBudgetTest, StartWithInnerGrammar) {
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kRegex;
  spec.text = "<[0-9]+>";
  auto inner = TokenConstraint::create(*vocab_, spec);
  ASSERT_TRUE(inner.is_ok()) << inner.message();
  std::shared_ptr<TokenConstraint> in(std::move(inner).value());
  auto t = make(-1, false, in);
  const auto m = mask(*t);
  const int32_t lt = ids("<")[0];
  EXPECT_TRUE((m[lt / 32] >> (lt % 32)) & 1u);
  const int32_t word = ids("Hello")[0];
  EXPECT_FALSE((m[word / 32] >> (word % 32)) & 1u);
  ASSERT_TRUE(t->consume(ids("<42>")).is_ok());
  EXPECT_EQ(t->thinking_tokens(), 0);
  EXPECT_TRUE(t->accepting());
}

// With a grammar for the answer, the end of generation is refused while thinking.
TEST_F(ThinkingBudgetTest, NoEndInsideTheThinkingWithAGrammar) {
  const std::vector<int32_t> eog = {1, 106};
  auto t = ThinkingBudget::create(*tok_, n_vocab(), -1, true, json_object(), eog);
  ASSERT_TRUE(t.is_ok());
  auto m = mask(*t.value());
  for (int32_t id : eog) EXPECT_FALSE((m[id / 32] >> (id % 32)) & 1u);
  EXPECT_EQ(count_allowed(m), n_vocab() - 2);
  auto u = make(-1, true);  // no grammar: the model may end while thinking
  m = mask(*u);
  EXPECT_EQ(count_allowed(m), n_vocab());
}

TEST_F(ThinkingBudgetTest, RollbackValidPrefixAndClone) {
  auto t = make(4, true);
  const auto w = ids(" one two three four five six");
  ASSERT_TRUE(t->consume({w.data(), 3}).is_ok());
  const auto before = mask(*t);
  // valid_prefix leaves the state alone: 1 thinking token left, then only the tag.
  EXPECT_EQ(t->valid_prefix(w), 1);
  EXPECT_EQ(mask(*t), before);
  EXPECT_EQ(t->thinking_tokens(), 3);
  auto c = t->clone();
  ASSERT_TRUE(c.is_ok());
  ASSERT_TRUE(t->consume({&w[3], 1}).is_ok());
  EXPECT_EQ(count_allowed(mask(*t)), 1);
  EXPECT_EQ(count_allowed(mask(*c.value())), n_vocab()) << "the clone is independent";
  ASSERT_TRUE(t->rollback(2).is_ok());
  EXPECT_EQ(t->thinking_tokens(), 2);
  EXPECT_FALSE(t->rollback(100).is_ok());
}

}  // namespace
}  // namespace specula
