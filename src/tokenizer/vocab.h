// tokenizer/vocab.h — a tokenizer vocabulary read from GGUF metadata.
//
// Owns: the token table (text, score, type per id), the text -> id index, the special
// ids (bos/eos/unk/pad, -1 when absent), the add_bos/add_eos/add_space_prefix flags and
// the tokenizer model name (`tokenizer.ggml.model`: "llama" = SentencePiece, "gpt2" =
// byte-level BPE, ...) used by make_tokenizer() to pick an algorithm, and for BPE the
// pre-tokenizer name (`tokenizer.ggml.pre`) and the merge list (`tokenizer.ggml.merges`).
// Keys (GGUF spec, docs/gguf.md "Tokenizer"): tokenizer.ggml.{model, pre, tokens, merges,
// scores, token_type, bos_token_id, eos_token_id, unknown_token_id, padding_token_id,
// add_bos_token, add_eos_token, add_space_prefix}. Defaults for absent optional keys
// follow llama.cpp (src/llama-vocab.cpp, load()) for the "llama" model: add_bos true,
// add_eos false, add_space_prefix true, bos 1, eos 2, unk 0.
// Merges are required when the model is "gpt2" (as llama.cpp) and kept verbatim; bpe.h
// parses and indexes them. Does not tokenize (spm.h, bpe.h).
// Copies share one immutable table, so a Vocab is cheap to copy and thread-safe to read.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "specula/status.h"

namespace specula::gguf {
class GgufFile;
}

namespace specula::tokenizer {

// Token types as stored in `tokenizer.ggml.token_type` (llama.cpp / sentencepiece
// numbering).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Everything a Vocab is built from; from_gguf() fills it from metadata, tests may
// build one by hand.
struct VocabData {
  std::string model;                 // tokenizer.ggml.model, e.g. "llama"
  std::string pre;                   // tokenizer.ggml.pre, e.g. "qwen2"; empty when absent
  std::vector<std::string> merges;   // tokenizer.ggml.merges, "left right" in rank order (BPE only)
  std::vector<std::string> tokens;   // [n_vocab] token text (SPM: spaces as U+2581)
  std::vector<float> scores;         // [n_vocab] merge priority (higher merges first); may be empty (all 0)
  std::vector<int32_t> types;        // [n_vocab] TokenType values; may be empty (all kNormal)
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;
};

class Vocab {
 public:
  Vocab() = default;

  // Reads the keys listed above. Errors name the key: missing, wrong type, length
  // different from tokenizer.ggml.tokens, special id out of range.
  static Result<Vocab> from_gguf(const gguf::GgufFile& file);
  // Validates `data` (same checks as from_gguf) and indexes it.
  static Result<Vocab> from_data(VocabData data);

  bool empty() const { return impl_ == nullptr; }
  const std::string& model() const { return impl_->data.model; }
  const std::string& pre() const { return impl_->data.pre; }
  const std::vector<std::string>& merges() const { return impl_->data.merges; }
  int32_t size() const { return static_cast<int32_t>(impl_->data.tokens.size()); }
  bool valid_id(int32_t id) const { return impl_ != nullptr && id >= 0 && id < size(); }

  // Id must be valid (SPECULA_CHECK-ed by callers that take user input).
  const std::string& text(int32_t id) const { return impl_->data.tokens[id]; }
  float score(int32_t id) const { return impl_->data.scores[id]; }
  TokenType type(int32_t id) const { return static_cast<TokenType>(impl_->data.types[id]); }
  bool is_control(int32_t id) const { return type(id) == TokenType::kControl; }
  bool is_byte(int32_t id) const { return type(id) == TokenType::kByte; }

  // Exact text -> id over every token (any type); -1 when absent. With duplicate texts
  // the highest id wins (as llama.cpp's token_to_id map).
  int32_t find(std::string_view text) const;

  // The byte token for `b`: "<0xXX>" if present, else the single-byte token; -1 if none.
  int32_t byte_to_token(uint8_t b) const { return impl_->byte_token[b]; }
  // For a kByte token "<0xXX>", its byte value.
  std::optional<uint8_t> token_to_byte(int32_t id) const;

  int32_t bos_id() const { return impl_->data.bos_id; }
  int32_t eos_id() const { return impl_->data.eos_id; }
  int32_t unk_id() const { return impl_->data.unk_id; }
  int32_t pad_id() const { return impl_->data.pad_id; }
  bool add_bos() const { return impl_->data.add_bos; }
  bool add_eos() const { return impl_->data.add_eos; }
  bool add_space_prefix() const { return impl_->data.add_space_prefix; }

  // Ids of the tokens that are split out of raw text before the subword algorithm
  // runs (kControl, kUserDefined, kUnknown), longest text first — the order of
  // llama.cpp's cache_special_tokens (std::sort by text length, descending).
  const std::vector<int32_t>& special_tokens() const { return impl_->special_tokens; }
  // Length in bytes of the longest token text.
  size_t max_token_len() const { return impl_->max_token_len; }

 private:
  struct Impl {
    VocabData data;
    // Open-addressing hash table of token ids keyed by text (linear probing,
    // power-of-two size >= 2 * n_vocab, -1 = empty slot).
    std::vector<int32_t> slots;
    size_t slot_mask = 0;
    int32_t byte_token[256];
    std::vector<int32_t> special_tokens;
    size_t max_token_len = 0;
  };
  std::shared_ptr<const Impl> impl_;
};

}  // namespace specula::tokenizer
