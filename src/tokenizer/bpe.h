// tokenizer/bpe.h — byte-level BPE tokenizer (tokenizer.ggml.model = "gpt2"), as GPT-2
// (Radford et al. 2019, openai/gpt-2 encoder.py) and llama.cpp llm_tokenizer_bpe.
//
// Algorithm, per raw fragment (the special-token split is Tokenizer::encode's):
//   0. input repair, as llama.cpp unicode_cpts_from_utf8 + unicode_cpt_to_utf8: every
//      byte that does not start a (leniently decoded) UTF-8 sequence becomes U+FFFD
//      (EF BF BD); overlong forms are re-encoded shortest; surrogates are kept. So
//      invalid UTF-8 does not round-trip (llama.cpp's ids are the oracle); a code point
//      above U+10FFFF (where llama.cpp throws) is treated as invalid bytes too;
//   1. pre-tokenize with the regex of `tokenizer.ggml.pre` (PCRE2, UTF + UCP, compiled
//      and JIT-ed once; per-call match data, so encode is thread-safe). `\s` is spelled
//      out as llama.cpp's whitespace set (it includes U+0085), and \p{L} / \p{N} gain
//      the Unicode 15.0/15.1 letters and digits of llama.cpp's tables that PCRE2 10.42
//      (Unicode 14) lacks; a newer Unicode in PCRE2 than in llama.cpp could still
//      differ on code points assigned later. Supported pre types:
//        qwen2 (and deepseek-r1-qwen, kormo, f2llmv2):
//          (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|
//          \p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//        gpt2 (and mpt, olmo, jais, trillion, granite-docling):
//          's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      (llama.cpp src/llama-vocab.cpp llm_tokenizer_bpe; its hand-written splitters in
//      src/unicode.cpp compute the same matches). "default" (a 4-regex cascade in
//      llama.cpp, not the GPT-2 regex) and others are rejected by create();
//   2. map each pre-token byte to the GPT-2 byte-to-unicode alphabet (bytes_to_unicode:
//      printable Latin-1 maps to itself, the other 68 bytes to U+0100..U+0143);
//   3. start with one symbol per byte and repeatedly merge the adjacent pair with the
//      lowest rank in `tokenizer.ggml.merges` ("left right", rank = index; the first
//      occurrence of a duplicate wins), ties to the leftmost pair — a min-heap of
//      candidate pairs over a linked list of symbols with lazy invalidation,
//      O(n log n) per pre-token. Symbols are token ids; a pair -> (rank, merged id)
//      hash table replaces string work. Merge parts that are not vocab tokens get
//      ids past the vocab so that malformed merge lists behave as in llama.cpp;
//   4. emit each symbol's id; a symbol that is not a token falls back, as llama.cpp,
//      to the single-byte tokens of its encoded text's bytes (missing ones dropped).
// token_to_piece: normal tokens are mapped back from the byte alphabet to raw bytes
// (characters outside it are copied as UTF-8); user-defined tokens verbatim;
// control/unknown tokens verbatim when render_special, otherwise empty; byte tokens
// their byte; unused/undefined tokens empty.
// add_bos/add_eos come from the vocab flags (Qwen: add_bos_token = false).
// Does not implement llama.cpp's ignore_merges (llama3-style pre types) or
// clean_up_tokenization_spaces (off for qwen2), and does not normalize text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "specula/status.h"
#include "tokenizer/tokenizer.h"

namespace specula::tokenizer {

class BpeTokenizer final : public Tokenizer {
 public:
  // Errors: "[bpe] unsupported pre-tokenizer 'x' (tokenizer.ggml.pre) for tokenizer
  // model 'gpt2'", "[bpe] tokenizer.ggml.merges: no merges (...)", "[bpe]
  // tokenizer.ggml.merges: entry 12 'abc' is not 'left right'", regex compile errors.
  static Result<std::unique_ptr<BpeTokenizer>> create(const Vocab& vocab);
  ~BpeTokenizer() override;

  std::string token_to_piece(int32_t id, bool render_special) const override;

  // The pre-tokenizer's split of `text` (already repaired UTF-8) into byte ranges
  // {offset, length}. Exposed for tests.
  std::vector<std::pair<size_t, size_t>> pre_tokenize(std::string_view text) const;

 protected:
  void encode_fragment(std::string_view fragment, bool first_after_special, std::vector<int32_t>* out) const override;

 private:
  struct Regex;  // owns the compiled PCRE2 pattern
  struct Merge {
    uint64_t key;     // (left id << 32) | right id; kEmptyKey when the slot is free
    int32_t rank;
    int32_t merged;   // id of left+right (vocab token or synthetic)
  };

  explicit BpeTokenizer(Vocab vocab);
  const Merge* find_merge(int32_t left, int32_t right) const;
  // Text (in the byte alphabet) of a symbol id.
  const std::string& symbol_text(int32_t id) const;
  // Runs steps 2-4 on one pre-token.
  void encode_word(std::string_view word, std::vector<int32_t>* out) const;

  std::unique_ptr<Regex> regex_;
  std::vector<Merge> merges_;  // open addressing, power-of-two size
  size_t merge_mask_ = 0;
  std::vector<std::string> synthetic_;  // texts of ids vocab.size() + i
  int32_t byte_symbol_[256];            // symbol id of each byte's alphabet character
};

// Bytes held right now by all threads' BPE merge scratch (each thread keeps at most
// ~1.7 MiB between words; a longer word's scratch is freed when it is done).
int64_t bpe_scratch_bytes();

}  // namespace specula::tokenizer
