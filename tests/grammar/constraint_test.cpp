// tests/grammar/constraint_test.cpp — GBNF -> Lark conversion (text and refusals) and
// TokenConstraint over Gemma 3's real 262k vocabulary: masks checked against a brute-force
// oracle over every token's bytes (a token is allowed iff the text so far plus its bytes is
// a prefix of a sentence), consume / rollback / valid_prefix / forced tokens, end of
// generation only when complete, compile errors that name the problem.
#include "grammar/constraint.h"
#include "grammar/gbnf.h"

#include <gtest/gtest.h>

#include "../test_util.h"
#include "formats/gguf.h"
#include "chat/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace specula {
namespace {

TEST(Gbnf, ConvertsToCharacterLevelLark) {
  auto l = gbnf_to_lark("root ::= \"ab\" [0-9]+ | other # note\nother ::= (\"x\" | [^a-c]){2,3} .");
  ASSERT_TRUE(l.is_ok()) << l.message();
  EXPECT_EQ(*l,
            "start: r_root\n"
            "r_root: (/a/ /b/) (/[0-9]/)+ | r_other\n"
            "r_other: ((/x/ | /[^a-c]/)){2,3} /(?s:.)/\n");
  // Names with '-' and upper case stay distinct; escapes become code points.
  l = gbnf_to_lark("root ::= a-b A\na-b ::= \"\\n\\x41\\u00e9\"\nA ::= [\\]\\-]");
  ASSERT_TRUE(l.is_ok()) << l.message();
  EXPECT_EQ(*l,
            "start: r_root\n"
            "r_root: r_a_hb r__ua\n"
            "r_a_hb: (/\\x{A}/ /A/ /\\x{E9}/)\n"
            "r__ua: /[\\x{5D}\\x{2D}]/\n");
}

TEST(Gbnf, RefusalsNameTheProblem) {
  struct Case {
    const char* gbnf;
    const char* want;
  };
  const Case cases[] = {
      {"", "empty"},
      {"rot ::= \"a\"", "no rule 'root'"},
      {"root ::= value", "undefined rule 'value'"},
      {"root ::= \"a", "unterminated string"},
      {"root ::= [a-", "unterminated character class"},
      {"root ::= [z-a]", "out of order"},
      {"root ::= \"\\q\"", "unknown escape"},
      {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
      {"root \"a\"", "expected '::='"},
      {"root ::= (\"a\"", "expected ')'"},
      {"root ::= \"a\"{3,1}", "n < m"},
      {"root ::= \"a\" $", "unexpected character"},
      {"root ::= \"\\uD800\"", "Unicode scalar"},
      {"root ::= []", "empty character class"},
  };
  for (const Case& c : cases) {
    auto l = gbnf_to_lark(c.gbnf);
    ASSERT_FALSE(l.is_ok()) << c.gbnf;
    EXPECT_NE(l.message().find(c.want), std::string::npos) << c.gbnf << " -> " << l.message();
  }
  auto l = gbnf_to_lark("root ::= \"a\"\n\nx ::= y");
  ASSERT_FALSE(l.is_ok());
  EXPECT_NE(l.message().find("line 3"), std::string::npos) << l.message();
}

class ConstraintTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = testing::default_tokenizer().release();
    if (tok_ == nullptr) return;
    eog_ = {1, 106};  // <eos>, <end_of_turn>
    auto g = GrammarVocab::create(*tok_, tok_->vocab().size(), eog_);
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
  static std::unique_ptr<TokenConstraint> make(ConstraintSpec spec) {
    auto c = TokenConstraint::create(*vocab_, spec);
    EXPECT_TRUE(c.is_ok()) << c.message();
    return c.is_ok() ? std::move(c).value() : nullptr;
  }
  static bool allowed(const std::vector<uint32_t>& m, int32_t id) { return (m[id / 32] >> (id % 32)) & 1u; }
  std::vector<uint32_t> mask(TokenConstraint& c) {
    std::vector<uint32_t> m(static_cast<size_t>(c.mask_words()));
    EXPECT_TRUE(c.compute_mask(m.data()).is_ok());
    return m;
  }
  static inline tokenizer::Tokenizer* tok_ = nullptr;
  static inline std::vector<int32_t> eog_;
  static inline std::shared_ptr<const GrammarVocab>* vocab_ = nullptr;
};

// Oracle: the sentences are exactly `words`; after text `so_far`, token t may be allowed
// only if it is a normal token whose bytes extend so_far to a prefix of some word.
TEST_F(ConstraintTest, ChoiceMaskEqualsBruteForce) {
  const std::vector<std::string> words = {"Paris", "London", "Lisbon", " Rome"};
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kChoice;
  spec.choices = words;
  auto c = make(spec);
  ASSERT_NE(c, nullptr);
  std::string so_far;
  const int32_t n = tok_->vocab().size();
  for (int step = 0; step < 4; ++step) {
    const auto m = mask(*c);
    int32_t n_allowed = 0, pick = -1, live = 0;
    for (const auto& w : words) live += w.compare(0, so_far.size(), so_far) == 0;
    for (int32_t id = 0; id < n; ++id) {
      bool want = false;
      if (!tok_->vocab().is_control(id)) {
        const std::string piece = tok_->token_to_piece(id, false);
        const std::string s = so_far + piece;
        for (const auto& w : words) want |= !piece.empty() && w.compare(0, s.size(), s) == 0 && s.size() <= w.size();
      }
      // While several words are still possible the mask is exactly the oracle's; once one
      // word is left its bytes are forced and llguidance allows a subset (the tokens of its
      // own tokenization of the forced bytes), never more.
      if (live > 1 || !want) {
        ASSERT_EQ(allowed(m, id), want) << "step " << step << " after '" << so_far << "': id " << id << " '"
                                      << tok_->token_to_piece(id, true) << "'";
      }
      n_allowed += want && allowed(m, id);
      // Walk towards "Lisbon" with the shortest allowed token that stays in it.
      if (want && allowed(m, id)) {
        const std::string piece = tok_->token_to_piece(id, false);
        const std::string s = so_far + piece;
        if (std::string("Lisbon").compare(0, s.size(), s) == 0 &&
            (pick < 0 || piece.size() < tok_->token_to_piece(pick, false).size()))
          pick = id;
      }
    }
    ASSERT_GT(n_allowed, 0);
    EXPECT_FALSE(allowed(m, 1));  // not complete yet: no end of generation
    ASSERT_GE(pick, 0);
    ASSERT_TRUE(c->consume(std::vector<int32_t>{pick}).is_ok());
    so_far += tok_->token_to_piece(pick, false);
    if (so_far == "Lisbon") break;
  }
  // The rest of the word, then only end-of-generation ids remain.
  const std::vector<int32_t> rest = tok_->encode(std::string("Lisbon").substr(so_far.size()), false, false);
  ASSERT_TRUE(c->consume(rest).is_ok());
  EXPECT_TRUE(c->stopped());
  const auto m = mask(*c);
  for (int32_t id = 0; id < n; ++id) EXPECT_EQ(allowed(m, id), id == 1 || id == 106) << id;
}

TEST_F(ConstraintTest, ConsumeRollbackValidPrefixAndForced) {
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kRegex;
  spec.text = "Hello, [a-z]+!";
  auto c = make(spec);
  ASSERT_NE(c, nullptr);
  const auto m0 = mask(*c);
  const std::vector<int32_t> ok = tok_->encode("Hello, world!", false, false);
  ASSERT_GE(ok.size(), 3u);
  EXPECT_EQ(c->valid_prefix(ok), static_cast<int32_t>(ok.size()));
  std::vector<int32_t> bad = ok;
  bad[bad.size() - 2] = tok_->encode("7", false, false)[0];
  EXPECT_EQ(c->valid_prefix(bad), static_cast<int32_t>(bad.size()) - 2);
  // The text up to the letters is forced.
  const std::vector<int32_t> forced = c->forced_tokens(16);
  ASSERT_FALSE(forced.empty());
  std::string ftext;
  for (int32_t id : forced) ftext += tok_->token_to_piece(id, false);
  EXPECT_EQ(std::string("Hello, ").compare(0, ftext.size(), ftext), 0) << ftext;
  // consume(2) + rollback(2) is the start again; consume all: accepting and stopped.
  ASSERT_TRUE(c->consume(std::span<const int32_t>(ok.data(), 2)).is_ok());
  EXPECT_NE(mask(*c), m0);
  ASSERT_TRUE(c->rollback(2).is_ok());
  EXPECT_EQ(mask(*c), m0);
  ASSERT_TRUE(c->consume(ok).is_ok());
  EXPECT_TRUE(c->accepting());
  EXPECT_TRUE(c->stopped());
  // A token the grammar refuses is an error, not a crash.
  auto c2 = make(spec);
  EXPECT_FALSE(c2->consume(tok_->encode("Bye", false, false)).is_ok());
}

TEST_F(ConstraintTest, GbnfKeepsCharacterLevelMeaning) {
  // "[a-z]+ "ing"": a greedy lexer would lose "sing" to [a-z]+; the character-level
  // conversion keeps it.
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kGbnf;
  spec.text = "root ::= [a-z]+ \"ing\"";
  for (const char* word : {"sing", "singing", "bring"}) {
    auto c = make(spec);
    ASSERT_NE(c, nullptr);
    const auto ids = tok_->encode(word, false, false);
    ASSERT_EQ(c->valid_prefix(ids), static_cast<int32_t>(ids.size())) << word;
    ASSERT_TRUE(c->consume(ids).is_ok()) << word;
    EXPECT_TRUE(c->accepting()) << word;
  }
  auto c = make(spec);
  const auto ids = tok_->encode("ing", false, false);
  ASSERT_TRUE(c->consume(ids).is_ok());
  EXPECT_FALSE(c->accepting());  // [a-z]+ needs a letter before "ing"
}

// A JSON grammar in GBNF as llama.cpp users write it (control characters excluded from
// strings with \x00-\x1F, bounded repetition): JSON text is accepted, broken JSON is not.
TEST_F(ConstraintTest, GbnfJsonGrammar) {
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kGbnf;
  spec.text = R"(root ::= object
value ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? ws "}"
array ::= "[" ws ( value ("," ws value)* )? ws "]"
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\""
number ::= "-"? ([0-9] | [1-9] [0-9]{0,15}) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
ws ::= | " " | "\n" [ \t]{0,20}
)";
  const std::string good = "{\"name\": \"Al\\u00e9 \\\"x\\\"\",\n  \"age\": -30.5e2, \"tags\": [true, null, {}]}";
  auto c = make(spec);
  ASSERT_NE(c, nullptr);
  const auto ids = tok_->encode(good, false, false);
  EXPECT_EQ(c->valid_prefix(ids), static_cast<int32_t>(ids.size())) << good;
  ASSERT_TRUE(c->consume(ids).is_ok());
  EXPECT_TRUE(c->accepting());
  for (const char* bad : {"{\"a\": 01}", "{\"a\":\t1}", "{'a': 1}", "[1]"}) {
    auto b = make(spec);
    const auto bids = tok_->encode(bad, false, false);
    EXPECT_LT(b->valid_prefix(bids), static_cast<int32_t>(bids.size())) << bad;
  }
}

TEST_F(ConstraintTest, JsonSchemaKeepsPropertyOrderAndCompactSeparators) {
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kJsonSchema;
  spec.text = R"({"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"boolean"}},
                  "required":["zeta","alpha"],"additionalProperties":false})";
  auto c = make(spec);
  ASSERT_NE(c, nullptr);
  const auto good = tok_->encode(R"({"zeta": 1, "alpha": true})", false, false);
  EXPECT_EQ(c->valid_prefix(good), static_cast<int32_t>(good.size()));
  const auto reordered = tok_->encode(R"({"alpha": true, "zeta": 1})", false, false);
  EXPECT_LT(c->valid_prefix(reordered), static_cast<int32_t>(reordered.size()));
  const auto spaced = tok_->encode("{\n  \"zeta\": 1", false, false);
  EXPECT_LT(c->valid_prefix(spaced), static_cast<int32_t>(spaced.size()));
  ASSERT_TRUE(c->consume(good).is_ok());
  EXPECT_TRUE(c->stopped());
  // Flexible whitespace, when asked.
  spec.json_flexible_whitespace = true;
  auto f = make(spec);
  EXPECT_EQ(f->valid_prefix(spaced), static_cast<int32_t>(spaced.size()));
}

TEST_F(ConstraintTest, CompileErrorsNameTheKind) {
  struct Case {
    ConstraintKind kind;
    const char* text;
    const char* want;
  };
  const Case cases[] = {
      {ConstraintKind::kJsonSchema, "[1]", "json_schema"},
      {ConstraintKind::kJsonSchema, R"({"type":"objekt"})", "json_schema"},
      {ConstraintKind::kRegex, "(a", "regex"},
      {ConstraintKind::kGbnf, "root ::= x", "undefined rule 'x'"},
      {ConstraintKind::kLark, "start: nothing_defined", "lark"},
      {ConstraintKind::kRegex, "", "regex"},
  };
  for (const Case& k : cases) {
    ConstraintSpec spec;
    spec.kind = k.kind;
    spec.text = k.text;
    auto c = TokenConstraint::create(*vocab_, spec);
    if (k.kind == ConstraintKind::kRegex && std::string(k.text).empty()) {
      // The empty regex is the empty string: only end of generation.
      ASSERT_TRUE(c.is_ok()) << c.message();
      EXPECT_TRUE(c.value()->stopped() || c.value()->accepting());
      continue;
    }
    ASSERT_FALSE(c.is_ok()) << k.text;
    EXPECT_NE(c.message().find(k.want), std::string::npos) << k.text << " -> " << c.message();
  }
  ConstraintSpec choice;
  choice.kind = ConstraintKind::kChoice;
  EXPECT_FALSE(TokenConstraint::create(*vocab_, choice).is_ok());
  // Found by fuzz/grammar_fuzz.cpp: a choice that is not UTF-8 threw out of create() (the
  // JSON escaping of the choice); it is an error naming it now.
  choice.choices = {"ok", "bad \xff\x9a byte"};
  auto bad = TokenConstraint::create(*vocab_, choice);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("choice 1 is not valid UTF-8"), std::string::npos) << bad.message();
}

// The forced-call grammars of every tool format compile and take a call in that format
// (and nothing else).
TEST_F(ConstraintTest, ForcedToolCallGrammarsAcceptTheirFormat) {
  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}}}])");
  struct Case {
    chat::ToolFormat format;
    const char* good;
    const char* bad;
  };
  const Case cases[] = {
      {chat::ToolFormat::kHermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_time\""},
      {chat::ToolFormat::kLlama3Json, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
       "{\"name\": \"get_weather\", \"arguments\""},
      {chat::ToolFormat::kMistral, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
       "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"town\""},
  };
  for (const Case& k : cases) {
    auto g = chat::forced_tool_grammar(k.format, tools, "get_weather", false);
    ASSERT_TRUE(g.is_ok()) << g.message();
    ConstraintSpec spec;
    spec.kind = ConstraintKind::kLark;
    spec.text = *g;
    auto c = make(spec);
    ASSERT_NE(c, nullptr) << *g;
    const auto good = tok_->encode(k.good, false, false);
    EXPECT_EQ(c->valid_prefix(good), static_cast<int32_t>(good.size())) << k.good;
    ASSERT_TRUE(c->consume(good).is_ok());
    EXPECT_TRUE(c->accepting()) << k.good;
    auto c2 = make(spec);
    const auto bad = tok_->encode(k.bad, false, false);
    EXPECT_LT(c2->valid_prefix(bad), static_cast<int32_t>(bad.size())) << k.bad;
  }
}

TEST(TokenMask, AppliesBitsExactly) {
  std::vector<float> logits(70, 1.0f);
  std::vector<uint32_t> bits = {0x1u, 0xffffffffu, 0x20u};
  apply_token_mask(logits.data(), 70, bits.data());
  for (int32_t id = 0; id < 70; ++id) {
    const bool keep = id == 0 || (id >= 32 && id < 64) || id == 69;
    EXPECT_EQ(std::isinf(logits[id]), !keep) << id;
  }
}

}  // namespace
}  // namespace specula
