// tokenizer/spm.h — SentencePiece BPE tokenizer (tokenizer.ggml.model = "llama").
//
// Algorithm (sentencepiece bpe_model.cc; llama.cpp llm_tokenizer_spm), per raw fragment:
//   1. prepend ' ' when vocab.add_space_prefix() and the fragment starts the input or
//      follows a special token; replace every ' ' by U+2581 '▁';
//   2. one symbol per UTF-8 character (a stray continuation/invalid byte is a symbol of
//      its own; a truncated sequence at the end is one short symbol);
//   3. repeatedly merge the adjacent pair whose concatenation is a vocab token with the
//      highest score, ties to the leftmost pair (a max-heap of candidate pairs with lazy
//      invalidation: O(n log n));
//   4. emit each final symbol's id; a symbol that is not a token (only single
//      characters can be: every merge produces a token) becomes one byte token
//      <0xXX> per UTF-8 byte (byte fallback), or unk when the vocab has no byte token.
// token_to_piece: normal tokens with '▁' -> ' '; byte tokens -> the raw byte;
// user-defined tokens verbatim; control/unknown tokens verbatim when render_special,
// otherwise empty; unused/undefined tokens empty.
// Does not normalize text (no NFKC, no whitespace collapsing), like llama.cpp.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace specula::tokenizer {

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(Vocab vocab) : Tokenizer(std::move(vocab)) {}

  std::string token_to_piece(int32_t id, bool render_special) const override;
  bool strip_leading_space() const override { return vocab_.add_space_prefix(); }

 protected:
  void encode_fragment(std::string_view fragment, bool first_after_special, std::vector<int32_t>* out) const override;
};

}  // namespace specula::tokenizer
