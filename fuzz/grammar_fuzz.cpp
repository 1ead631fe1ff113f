// fuzz/grammar_fuzz.cpp — libFuzzer target for structured outputs: the GBNF-to-Lark
// conversion (grammar/gbnf.h) and the constraint built from every kind a request may send
// (grammar/constraint.h over llguidance: GBNF, Lark, regex, JSON schema, choices), then
// driven for a few tokens as the sampler drives it.
// Input: a selector byte (kind = selector % 5), then the grammar / regex / schema text (for
// choices: parts separated by "\x00\x01"). The vocabulary is Qwen2.5's real tokenizer.json
// (fuzz_util.h tokenizer_json_path), end of generation <|im_end|> (151645).
// Properties: gbnf_to_lark returns Lark or an error naming "GBNF"; a constraint that
// compiles yields masks; a token its mask allows is consumed without error, and rolled back.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "grammar/constraint.h"
#include "grammar/gbnf.h"
#include "tokenizer/hf_tokenizer.h"

namespace {
using namespace specula;

struct Vocab {
  std::unique_ptr<tokenizer::HfTokenizer> tok;
  std::shared_ptr<GrammarVocab> vocab;
};

const Vocab& vocab() {
  static const Vocab v = [] {
    auto t = tokenizer::HfTokenizer::create(fuzz::read_file(fuzz::tokenizer_json_path("qwen2_5")), {});
    if (!t.is_ok()) fuzz::fail("cannot load the fixture tokenizer", t.message());
    Vocab out;
    out.tok = std::move(t).value();
    const int32_t n = out.tok->vocab().size();
    const int32_t eog[] = {151645};
    auto g = GrammarVocab::create(*out.tok, n, eog);
    if (!g.is_ok()) fuzz::fail("cannot make the grammar vocabulary", g.message());
    out.vocab = std::move(g).value();
    return out;
  }();
  return v;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Vocab& v = vocab();
  fuzz::Input in(data, size);
  ConstraintSpec spec;
  const uint8_t sel = in.byte();
  switch (sel % 5) {
    case 0: spec.kind = ConstraintKind::kGbnf; break;
    case 1: spec.kind = ConstraintKind::kLark; break;
    case 2: spec.kind = ConstraintKind::kRegex; break;
    case 3: spec.kind = ConstraintKind::kJsonSchema; break;
    default: spec.kind = ConstraintKind::kChoice; break;
  }
  spec.json_flexible_whitespace = (sel & 0x80) != 0;
  if (spec.kind == ConstraintKind::kChoice) {
    while (!in.rest().empty() && spec.choices.size() < 64) spec.choices.emplace_back(in.part());
  } else {
    spec.text = std::string(in.rest());
  }
  if (spec.kind == ConstraintKind::kGbnf) {
    auto lark = gbnf_to_lark(spec.text);
    if (!lark.is_ok() && !fuzz::starts_with(lark.message(), "GBNF")) fuzz::fail("a GBNF error not naming GBNF", lark.message());
  }
  auto c = TokenConstraint::create(v.vocab, spec);
  if (!c.is_ok()) return 0;
  TokenConstraint& m = **c;
  std::vector<uint32_t> bits(static_cast<size_t>(m.mask_words()));
  int consumed = 0;
  for (int step = 0; step < 6 && !m.stopped(); ++step) {
    if (!m.compute_mask(bits.data()).is_ok()) break;
    int32_t pick = -1;
    // The allowed id at a position the input chooses (so the walk differs between inputs).
    const size_t start = (size + static_cast<size_t>(step) * 7919) % (bits.size() * 32);
    for (size_t k = 0; k < bits.size() * 32 && pick < 0; ++k) {
      const size_t id = (start + k) % (bits.size() * 32);
      if (id < static_cast<size_t>(v.vocab->n_vocab()) && (bits[id / 32] >> (id % 32) & 1u)) pick = static_cast<int32_t>(id);
    }
    if (pick < 0) break;
    const int32_t one[] = {pick};
    if (Status st = m.consume(one); !st.is_ok()) {
      std::string bytes;
      for (unsigned char ch : v.tok->token_to_piece(pick, false)) bytes += std::to_string(ch) + " ";
      fuzz::fail("a token its own mask allowed was refused",
                 "step " + std::to_string(step) + ", token " + std::to_string(pick) + " (bytes " + bytes + "): " + st.message());
    }
    ++consumed;
  }
  volatile bool sink = m.accepting();
  (void)sink;
  if (consumed > 0 && !m.rollback(consumed).is_ok()) fuzz::fail("rollback of consumed tokens failed");
  return 0;
}
