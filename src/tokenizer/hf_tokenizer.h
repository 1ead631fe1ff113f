// tokenizer/hf_tokenizer.h — a Hugging Face `tokenizer.json` (the serialization of the
// `tokenizers` library, huggingface/tokenizers) as a specula Tokenizer, giving the ids that
// library gives (the oracle: tests/fixtures/hf_tokenizer_reference.json.gz, a 1,796-string
// corpus on the Llama 3, Qwen3, Gemma 3, DeepSeek-V3, Llama 2, Gemma, Qwen2.5 and GPT-4o files,
// plus Oniguruma regex cases and decodes of crafted id sequences).
//
// Pipeline of encode(text) (tokenizers' TokenizerImpl::encode_single_sequence):
//   1. added tokens: the "added_tokens" whose `normalized` is false are found in the raw text
//      by a leftmost-longest scan over all of them (Aho-Corasick LeftmostLongest, as
//      AddedVocabulary::find_matches); a match of a `special` token is skipped (its text
//      then goes through the model) when special parsing is off — tokenizers'
//      `encode_special_tokens`; `single_word` matches need non-word characters around them,
//      `lstrip` / `rstrip` extend a match over the whitespace beside it;
//   2. each remaining piece is normalized, then searched for the `normalized` added tokens
//      (their content normalized the same way);
//   3. the rest is pre-tokenized and each pre-token encoded by the model.
// Normalizers: Sequence, NFC, NFD, NFKC, NFKD (utf8proc), Lowercase (per code point,
//   utf8proc_tolower: no one-to-many mappings such as U+0130), Replace (String or Regex
//   pattern), Prepend (non-empty input only), Strip, StripAccents (drops Mn marks).
// Regex patterns (Oniguruma syntax) run on PCRE2 10.42 after a rewrite that gives \p{X} of every
//   general category (and \d, \w, \b, \s, \h) Oniguruma's sets — its newer Unicode data
//   (unicode_additions.h); scripts and POSIX classes keep PCRE2's.
// Pre-tokenizers: Sequence, Split (String or Regex pattern; behaviours Removed, Isolated,
//   MergedWithPrevious, MergedWithNext, Contiguous; invert), ByteLevel (add_prefix_space,
//   use_regex with GPT-2's pattern; maps bytes to the byte alphabet), Digits
//   (individual_digits), Metaspace (replacement, prepend_scheme always / first / never,
//   split), Whitespace, WhitespaceSplit, Punctuation (Isolated).
// Models: BPE (vocab, merges as "a b" strings or [a, b] pairs — a later duplicate pair
//   overrides an earlier one, as the library's HashMap; unk_token, fuse_unk, byte_fallback
//   with <0xXX> tokens, ignore_merges). The merge loop is the library's Word::merge_all: a
//   min-heap on (rank, position), an entry valid while its left symbol is alive and the pair
//   at it still merges into the same token.
// Post-processors (add_special): TemplateProcessing's "single" (at most one special token
//   before and one after $A), ByteLevel (nothing to add), RobertaProcessing /
//   BertProcessing (cls ... sep), Sequence of these. tokenizer_config.json's
//   add_bos_token / add_eos_token (Options) override the template, as transformers'
//   LlamaTokenizerFast / GemmaTokenizerFast do.
// Decoders (token_to_piece, per token): ByteLevel (a token whose characters are all in the
//   byte alphabet becomes those bytes, any other token its UTF-8 text, as the library),
//   Replace (String pattern), ByteFallback (<0xXX> -> the byte), Fuse (nothing per token),
//   Strip (one leading ' ' after Fuse: strip_leading_space), Metaspace (replacement -> ' ',
//   the first token's leading space dropped unless prepend_scheme is never), Sequence.
//   decode() concatenates these pieces, so byte tokens that do not form whole UTF-8 characters
//   stay raw bytes where the library's decode writes U+FFFD (ByteFallback: one per byte token of
//   an invalid run; ByteLevel: from_utf8_lossy); valid sequences decode as the library's.
// Token types (Vocab): special added tokens are kControl (rendered only with
// render_special), other added tokens kUserDefined, <0xXX> tokens of a byte_fallback model
// kByte, the rest kNormal, ids without a token (GPT-4o's 199998, 200000-200017)
// kUndefined. BOS / EOS: the post-processor's tokens, or Options' texts.
// Input that is not valid UTF-8 has each invalid byte replaced by U+FFFD first (the library
// only takes valid strings). Errors name the JSON path: "[tokenizer.json] model.type
// 'Unigram' is not supported (supported: BPE)". Unigram, WordPiece and WordLevel models,
// the Precompiled (SentencePiece charsmap) and Bert normalizers are refused by name.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "specula/status.h"
#include "tokenizer/tokenizer.h"

namespace specula::gguf {
class GgufFile;
}

namespace specula::tokenizer {

class HfTokenizer final : public Tokenizer {
 public:
  struct Options {
    std::optional<bool> add_bos, add_eos;     // tokenizer_config.json add_bos_token / add_eos_token
    std::string bos_token, eos_token, unk_token, pad_token;  // tokenizer_config.json texts ("" = none)
    std::string origin = "tokenizer.json";    // names the file in errors
  };
  static Result<std::unique_ptr<HfTokenizer>> create(std::string_view json_text, const Options& options);
  ~HfTokenizer() override;

  std::string token_to_piece(int32_t id, bool render_special) const override;
  bool strip_leading_space() const override;
  // As the library's decode of the whole sequence: the pieces joined, where a run of byte
  // tokens (ByteFallback) that is not valid UTF-8 becomes one U+FFFD per token, and with a
  // ByteLevel decoder the bytes are read as UTF-8 with one U+FFFD per maximal invalid
  // subpart (Rust's from_utf8_lossy). token_to_piece keeps raw bytes (streaming needs them).
  Result<std::string> decode(std::span<const int32_t> ids, bool remove_special, bool render_special) const override;

  struct Impl;

 protected:
  void encode_piece(std::string_view part, bool parse_special, bool* at_start, std::vector<int32_t>* out) const override;
  void encode_fragment(std::string_view fragment, bool first_after_special, std::vector<int32_t>* out) const override;

 private:
  HfTokenizer(Vocab vocab, std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The tokenizer of a model file: tokenizer.ggml.* (GGUF vocabularies: SentencePiece, BPE)
// when present, else tokenizer.huggingface.json (a Hugging Face folder's tokenizer.json,
// formats/hf_folder.h) with the specula.tokenizer.* texts and tokenizer.ggml.add_bos_token /
// add_eos_token as Options. Errors: neither present, or the chosen reader's error.
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const gguf::GgufFile& file);

}  // namespace specula::tokenizer
