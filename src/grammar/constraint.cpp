// grammar/constraint.cpp — see constraint.h.
#include "grammar/constraint.h"

#include <vector>

#include <llguidance.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/utf8.h"
#include "grammar/gbnf.h"
#include "tokenizer/tokenizer.h"

namespace specula {

namespace {
// llguidance's message without the parser-state dump it appends after the first line.
std::string first_line(const char* e) {
  std::string s = e != nullptr ? e : "failed";
  const size_t nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

// A compile error as one line that explains it: llguidance's first line without the
// position in the grammar specula generated ("at 1(8): "), joined with the explanation a
// regex error gives below it ("error: unclosed group") and the character it points at;
// the snippets and the generated grammar's source lines are left out. E.g.
//   invalid regex "(unclosed" (in regex): regex parse error: unclosed group (at character 1)
std::string compile_message(const char* e) {
  const std::string all = e != nullptr ? e : "failed";
  std::vector<std::string> lines;
  for (size_t pos = 0; pos <= all.size();) {
    const size_t nl = std::min(all.find('\n', pos), all.size());
    lines.push_back(all.substr(pos, nl - pos));
    pos = nl + 1;
  }
  std::string out = lines[0];
  if (out.rfind("at ", 0) == 0) {  // "at LINE(COL): " of the generated grammar
    const size_t colon = out.find("): ");
    if (colon != std::string::npos && colon < 16) out = out.substr(colon + 3);
  }
  if (out.empty() || out.back() != ':') return out;
  // regex-syntax's layout: "    PATTERN", "    ^^^", "error: WHAT".
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].rfind("error: ", 0) != 0) continue;
    out += " " + lines[i].substr(7);
    if (i >= 2 && lines[i - 1].rfind("    ", 0) == 0) {
      const size_t caret = lines[i - 1].find('^');
      if (caret != std::string::npos && caret >= 4) out += " (at character " + std::to_string(caret - 4 + 1) + ")";
    }
    return out;
  }
  return out.substr(0, out.size() - 1);
}
}  // namespace

// llguidance calls this (from any thread) for the grammar's forced text: the model's own
// tokenization, no BOS, special-token parsing off.
size_t grammar_tokenize_callback(const void* user, const uint8_t* bytes, size_t n, uint32_t* out, size_t cap) {
  const auto* self = static_cast<const GrammarVocab*>(user);
  const std::vector<int32_t> ids =
      self->tokenizer_->encode(std::string_view(reinterpret_cast<const char*>(bytes), n), false, false);
  for (size_t i = 0; i < ids.size() && i < cap; ++i) out[i] = static_cast<uint32_t>(ids[i]);
  return ids.size();
}

Result<std::shared_ptr<GrammarVocab>> GrammarVocab::create(const tokenizer::Tokenizer& tokenizer, int32_t n_vocab,
                                                           std::span<const int32_t> eog) {
  if (n_vocab <= 0) return Status::error("[grammar] vocabulary is empty");
  if (eog.empty()) return Status::error("[grammar] the model has no end-of-generation token");
  const int32_t n_tok = tokenizer.vocab().size();
  std::vector<uint32_t> lens(static_cast<size_t>(n_vocab));
  std::string bytes;
  for (int32_t id = 0; id < n_vocab; ++id) {
    std::string piece;
    if (id >= n_tok) {
      piece = "\xff<[" + std::to_string(id) + "]>";  // padding id: never text
    } else if (tokenizer.vocab().is_control(id) || tokenizer.vocab().type(id) == tokenizer::TokenType::kUnknown ||
               tokenizer.vocab().type(id) == tokenizer::TokenType::kUnused) {
      // 0xFF starts llguidance's special tokens (toktrie's SPECIAL_TOKEN_MARKER): never
      // matched by text; the Lark dialect can name them (<|im_end|>).
      piece = "\xff" + tokenizer.token_to_piece(id, /*render_special=*/true);
    } else {
      piece = tokenizer.token_to_piece(id, /*render_special=*/false);
    }
    lens[static_cast<size_t>(id)] = static_cast<uint32_t>(piece.size());
    bytes += piece;
  }
  std::shared_ptr<GrammarVocab> v(new GrammarVocab());
  v->n_vocab_ = n_vocab;
  v->tokenizer_ = &tokenizer;
  std::vector<uint32_t> extra;
  for (size_t i = 1; i < eog.size(); ++i) extra.push_back(static_cast<uint32_t>(eog[i]));
  LlgTokenizerInitV2 init;
  std::memset(&init, 0, sizeof(init));
  init.struct_size = sizeof(init);
  init.vocab_size = static_cast<uint32_t>(n_vocab);
  init.tok_eos = static_cast<uint32_t>(eog[0]);
  init.token_lens = lens.data();
  init.token_bytes = reinterpret_cast<const uint8_t*>(bytes.data());
  init.tokenize_fn = &grammar_tokenize_callback;
  init.tokenize_user_data = v.get();
  init.tok_eos_extra = extra.empty() ? nullptr : extra.data();
  init.tok_eos_extra_count = static_cast<uint32_t>(extra.size());
  char err[1024] = {0};
  v->llg_ = llg_new_tokenizer_v2(&init, err, sizeof(err));
  if (v->llg_ == nullptr) return Status::error(std::string("[grammar] vocabulary: ") + err);
  return v;
}

GrammarVocab::~GrammarVocab() { llg_free_tokenizer(llg_); }

const char* constraint_kind_name(ConstraintKind k) {
  switch (k) {
    case ConstraintKind::kJsonObject: return "json_object";
    case ConstraintKind::kJsonSchema: return "json_schema";
    case ConstraintKind::kRegex: return "regex";
    case ConstraintKind::kChoice: return "choice";
    case ConstraintKind::kGbnf: return "grammar";
    case ConstraintKind::kLark: return "lark";
  }
  return "?";
}

namespace {
// The llguidance matcher of one grammar.
class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const GrammarVocab> vocab, LlgMatcher* m) : vocab_(std::move(vocab)), m_(m) {}
  ~GrammarConstraint() override;
  int32_t mask_words() const override { return (vocab_->n_vocab() + 31) / 32; }
  Status compute_mask(uint32_t* bits) override;
  Status consume(std::span<const int32_t> tokens) override;
  Status rollback(int32_t n) override;
  int32_t valid_prefix(std::span<const int32_t> tokens) override;
  std::vector<int32_t> forced_tokens(int32_t max_tokens) override;
  bool stopped() const override;
  bool accepting() override;
  Result<std::unique_ptr<TokenConstraint>> clone() const override;

 private:
  std::shared_ptr<const GrammarVocab> vocab_;
  LlgMatcher* m_ = nullptr;
  std::vector<uint32_t> scratch_;
};
}  // namespace

Result<std::unique_ptr<TokenConstraint>> TokenConstraint::create(std::shared_ptr<const GrammarVocab> vocab,
                                                                 const ConstraintSpec& spec) {
  const std::string what = std::string("[grammar] ") + constraint_kind_name(spec.kind) + ": ";
  std::string type, data;
  switch (spec.kind) {
    case ConstraintKind::kJsonObject:
    case ConstraintKind::kJsonSchema: {
      type = "json";
      // Key order matters: llguidance writes properties in the schema's order.
      nlohmann::ordered_json schema = spec.kind == ConstraintKind::kJsonObject
                                          ? nlohmann::ordered_json{{"type", "object"}}
                                          : nlohmann::ordered_json::parse(spec.text, nullptr, false);
      if (schema.is_discarded() || !(schema.is_object() || schema.is_boolean()))
        return Status::error(what + "the schema is not a JSON object");
      if (schema.is_boolean()) schema = schema.get<bool>() ? nlohmann::ordered_json::object()
                                                           : nlohmann::ordered_json{{"not", nlohmann::ordered_json::object()}};
      // json.dumps' separators and no other whitespace (a model cannot pad forever), unless
      // asked otherwise (here or by the schema's own x-guidance options).
      if (!schema.contains("x-guidance")) {
        schema["x-guidance"] = spec.json_flexible_whitespace
                                   ? nlohmann::ordered_json{{"whitespace_flexible", true}}
                                   : nlohmann::ordered_json{{"whitespace_flexible", false},
                                                            {"item_separator", ", "},
                                                            {"key_separator", ": "}};
      }
      data = schema.dump();
      break;
    }
    case ConstraintKind::kRegex:
      type = "regex";
      data = spec.text;
      break;
    case ConstraintKind::kChoice: {
      if (spec.choices.empty()) return Status::error(what + "no choices");
      type = "lark";
      data = "start: ";
      for (size_t i = 0; i < spec.choices.size(); ++i) {
        if (spec.choices[i].empty()) return Status::error(what + "choice " + std::to_string(i) + " is empty");
        // (dump() would throw on invalid UTF-8; a C API caller's bytes may be anything)
        if (!utf8_valid(spec.choices[i])) return Status::error(what + "choice " + std::to_string(i) + " is not valid UTF-8");
        data += (i ? " | " : "") + nlohmann::json(spec.choices[i]).dump(-1, ' ', true);
      }
      data += "\n";
      break;
    }
    case ConstraintKind::kGbnf: {
      auto lark = gbnf_to_lark(spec.text);
      if (!lark) return Status::error(what + lark.status().message());
      type = "lark";
      data = std::move(lark).value();
      break;
    }
    case ConstraintKind::kLark:
      type = "lark";
      data = spec.text;
      break;
  }
  if (data.find('\0') != std::string::npos) return Status::error(what + "contains a NUL byte");
  LlgConstraintInit init;
  llg_constraint_init_set_defaults(&init, vocab->llg());
  init.log_stderr_level = 0;
  init.log_buffer_level = 0;
  if (spec.kind == ConstraintKind::kGbnf) {
    // Character-level lexemes (gbnf.h) make many more Earley items per mask than a
    // lexer-level grammar: 20x llguidance's default budget (~50 ms at its 20k items/ms,
    // on the mask worker, beside the forward).
    init.limits.step_max_items = 1'000'000;
  }
  LlgMatcher* m = llg_new_matcher(&init, type.c_str(), data.c_str());
  if (const char* e = llg_matcher_get_error(m); e != nullptr) {
    std::string msg = what + compile_message(e);
    llg_free_matcher(m);
    return Status::error(msg);
  }
  std::unique_ptr<TokenConstraint> c = std::make_unique<GrammarConstraint>(std::move(vocab), m);
  // The first mask now, so that a grammar that cannot start (an empty language, limits
  // exceeded at once) is the request's error before it queues.
  std::vector<uint32_t> first(static_cast<size_t>(c->mask_words()));
  if (Status st = c->compute_mask(first.data()); !st.is_ok())
    return Status::error(what + st.message().substr(std::string("[grammar] ").size()));
  if (std::all_of(first.begin(), first.end(), [](uint32_t w) { return w == 0; }))
    return Status::error(what + "the grammar allows no output");
  return c;
}

GrammarConstraint::~GrammarConstraint() { llg_free_matcher(m_); }

namespace {
Status matcher_error(LlgMatcher* m, const char* op) {
  return Status::error(std::string("[grammar] ") + op + ": " + first_line(llg_matcher_get_error(m)));
}
}  // namespace

Status GrammarConstraint::compute_mask(uint32_t* bits) {
  const size_t n = llg_matcher_get_mask_byte_size(m_);
  const size_t want = static_cast<size_t>(mask_words()) * sizeof(uint32_t);
  if (n == want) {
    if (llg_matcher_compute_mask_into(m_, bits, n) != 0) return matcher_error(m_, "mask");
    return Status::ok();
  }
  scratch_.assign((n + 3) / 4, 0);
  if (llg_matcher_compute_mask_into(m_, scratch_.data(), n) != 0) return matcher_error(m_, "mask");
  std::memset(bits, 0, want);
  std::memcpy(bits, scratch_.data(), std::min(n, want));
  return Status::ok();
}

// Token ids as llguidance's u32 (ids are >= 0; int32_t and uint32_t may alias each other).
static const uint32_t* as_u32(std::span<const int32_t> tokens) { return reinterpret_cast<const uint32_t*>(tokens.data()); }

Status GrammarConstraint::consume(std::span<const int32_t> tokens) {
  if (tokens.empty()) return Status::ok();
  if (llg_matcher_consume_tokens(m_, as_u32(tokens), tokens.size()) != 0) return matcher_error(m_, "consume");
  return Status::ok();
}

Status GrammarConstraint::rollback(int32_t n) {
  if (n <= 0) return Status::ok();
  if (llg_matcher_rollback(m_, static_cast<size_t>(n)) != 0) return matcher_error(m_, "rollback");
  return Status::ok();
}

int32_t GrammarConstraint::valid_prefix(std::span<const int32_t> tokens) {
  if (tokens.empty()) return 0;
  const int32_t n = llg_matcher_validate_tokens(m_, as_u32(tokens), tokens.size());
  return n < 0 ? 0 : n;
}

std::vector<int32_t> GrammarConstraint::forced_tokens(int32_t max_tokens) {
  if (max_tokens <= 0) return {};
  std::vector<uint32_t> out(static_cast<size_t>(max_tokens));
  const int32_t n = llg_matcher_compute_ff_tokens(m_, out.data(), out.size());
  if (n <= 0) return {};
  return std::vector<int32_t>(out.begin(), out.begin() + std::min(n, max_tokens));
}

bool GrammarConstraint::stopped() const { return llg_matcher_is_stopped(m_); }
bool GrammarConstraint::accepting() { return llg_matcher_is_accepting(m_); }

Result<std::unique_ptr<TokenConstraint>> GrammarConstraint::clone() const {
  LlgMatcher* m = llg_clone_matcher(m_);
  if (m == nullptr || llg_matcher_is_error(m)) {
    llg_free_matcher(m);
    return Status::error("[grammar] clone failed");
  }
  return std::unique_ptr<TokenConstraint>(std::make_unique<GrammarConstraint>(vocab_, m));
}

void apply_token_mask(float* logits, int32_t n_vocab, const uint32_t* bits) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int32_t w = 0; w * 32 < n_vocab; ++w) {
    const uint32_t word = bits[w];
    if (word == 0xffffffffu) continue;
    const int32_t end = std::min(n_vocab, (w + 1) * 32);
    for (int32_t id = w * 32; id < end; ++id)
      if (((word >> (id - w * 32)) & 1u) == 0) logits[id] = ninf;
  }
}

}  // namespace specula
