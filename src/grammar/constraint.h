// grammar/constraint.h — structured outputs: a request's grammar as a per-step token mask.
//
// The grammar engine is llguidance (crates.io, MIT; https://github.com/guidance-ai/llguidance,
// linked through its C API, llguidance.h — third_party/llguidance, scripts/build_llguidance.sh):
// an Earley parser over a derivative-based lexer that computes, for the tokens generated so
// far, the set of vocabulary tokens that keep the output a prefix of the language. What is
// specula's: the vocabulary bridge (GrammarVocab), the constraint kinds and their request
// forms (ConstraintSpec), GBNF (llama.cpp's grammar format) converted to llguidance's Lark
// dialect (grammar/gbnf.h), and the use of masks inside the engine's rounds
// (decoding/round.h: masks for every constrained row computed on a worker thread while the
// target forward runs; drafts cut where they leave the grammar; forced tokens proposed as
// free drafts).
//
// Masks are bitsets: uint32 words, bit (id % 32) of word (id / 32) set when token `id` is
// allowed; [mask_words()] words covering the model's n_vocab ids. End-of-generation ids
// (all of the model's) are allowed exactly when the grammar accepts the text so far.
// Thread-compatible: one TokenConstraint is used by one thread at a time (the engine's
// mask worker or the engine thread, never both); a GrammarVocab is shared read-only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "specula/status.h"

struct LlgTokenizer;
struct LlgMatcher;

namespace specula {

namespace tokenizer {
class Tokenizer;
}

// A model's vocabulary as llguidance sees it: the bytes of every id in [0, n_vocab)
// (control and padding ids as unmatchable special tokens), the end-of-generation ids, and
// the model's own tokenizer (for the grammar's forced text). Built once per model (measured:
// 0.4 s for Qwen2.5's 151,936 ids, 0.9-1.0 s for Gemma 3's 262,144, 2 cores). `tokenizer`
// must outlive it.
class GrammarVocab {
 public:
  // Errors: n_vocab <= 0, no end-of-generation id, llguidance's own tokenizer errors.
  static Result<std::shared_ptr<GrammarVocab>> create(const tokenizer::Tokenizer& tokenizer, int32_t n_vocab,
                                                      std::span<const int32_t> eog);
  ~GrammarVocab();
  GrammarVocab(const GrammarVocab&) = delete;
  GrammarVocab& operator=(const GrammarVocab&) = delete;
  int32_t n_vocab() const { return n_vocab_; }
  const LlgTokenizer* llg() const { return llg_; }

 private:
  GrammarVocab() = default;
  LlgTokenizer* llg_ = nullptr;
  int32_t n_vocab_ = 0;
  const tokenizer::Tokenizer* tokenizer_ = nullptr;
  friend size_t grammar_tokenize_callback(const void*, const uint8_t*, size_t, uint32_t*, size_t);
};

// What a request constrains its output to.
enum class ConstraintKind {
  kJsonObject,  // any JSON object (OpenAI response_format {"type": "json_object"})
  kJsonSchema,  // `text` is a JSON schema (OpenAI json_schema, vLLM guided_json)
  kRegex,       // `text` is a regular expression (Rust regex syntax; vLLM guided_regex)
  kChoice,      // exactly one of `choices` (vLLM guided_choice)
  kGbnf,        // `text` is a GBNF grammar (llama.cpp's `grammar`; root rule `root`)
  kLark,        // `text` is a grammar in llguidance's Lark dialect (vLLM guided_grammar)
};

struct ConstraintSpec {
  ConstraintKind kind = ConstraintKind::kJsonObject;
  std::string text;                  // schema / regex / grammar
  std::vector<std::string> choices;  // kChoice
  // JSON: allow any whitespace between tokens as the JSON grammar does (false: exactly the
  // separators ", " and ": " as Python's json.dumps writes them, and no other whitespace —
  // a small model cannot pad forever). A schema's own "x-guidance" options win.
  bool json_flexible_whitespace = false;
};

// The kind's name as requests spell it ("json_object", "json_schema", "regex", "choice",
// "grammar", "lark").
const char* constraint_kind_name(ConstraintKind k);

// One request's matcher: the state after the tokens consumed so far. An interface: the
// grammar's matcher (create()) and the thinking budget (grammar/thinking_budget.h, which
// may wrap a grammar for the text after the thinking) implement it; decoding/round.h only
// sees this.
class TokenConstraint {
 public:
  // Compiles the grammar (milliseconds; large schemas longer: call it off the engine
  // thread). Errors name what is wrong: "[grammar] json_schema: ..." with llguidance's
  // message (unsupported schema keyword, bad regex, GBNF syntax with its line).
  static Result<std::unique_ptr<TokenConstraint>> create(std::shared_ptr<const GrammarVocab> vocab,
                                                         const ConstraintSpec& spec);
  TokenConstraint() = default;
  virtual ~TokenConstraint() = default;
  TokenConstraint(const TokenConstraint&) = delete;
  TokenConstraint& operator=(const TokenConstraint&) = delete;

  // uint32 words of a mask: (n_vocab + 31) / 32.
  virtual int32_t mask_words() const = 0;
  // The allowed tokens after the consumed ones into bits [mask_words()]. Errors: the
  // matcher failed (llguidance's message).
  virtual Status compute_mask(uint32_t* bits) = 0;
  // Advances by tokens (each must be allowed). Errors: a token the grammar refuses.
  virtual Status consume(std::span<const int32_t> tokens) = 0;
  // Undoes the last n consumed tokens.
  virtual Status rollback(int32_t n) = 0;
  // How many leading tokens of `tokens` the grammar accepts (0..size), without consuming.
  virtual int32_t valid_prefix(std::span<const int32_t> tokens) = 0;
  // The tokens the grammar forces next (each the only way on; at most max_tokens).
  virtual std::vector<int32_t> forced_tokens(int32_t max_tokens) = 0;
  // Nothing may follow but end of generation.
  virtual bool stopped() const = 0;
  // The text so far is a complete sentence of the grammar.
  virtual bool accepting() = 0;
  // An independent matcher in the same state (n > 1 choices).
  virtual Result<std::unique_ptr<TokenConstraint>> clone() const = 0;
  // Whether its masks say where the text ends (a grammar: the request's ignore_eos then
  // yields to it); false for one that only shapes part of the text (a thinking budget
  // without an inner grammar).
  virtual bool governs_eos() const { return true; }
};

// logits[id] = -inf for every id in [0, n_vocab) whose bit is clear.
void apply_token_mask(float* logits, int32_t n_vocab, const uint32_t* bits);

}  // namespace specula
