// tokenizer/vocab.cpp — reads and indexes a tokenizer vocabulary (see vocab.h).
// Does not tokenize.
#include "tokenizer/vocab.h"

#include <algorithm>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>

#include "formats/gguf.h"

namespace specula::tokenizer {
namespace {

constexpr const char* kKeyModel = "tokenizer.ggml.model";
constexpr const char* kKeyPre = "tokenizer.ggml.pre";
constexpr const char* kKeyTokens = "tokenizer.ggml.tokens";
constexpr const char* kKeyMerges = "tokenizer.ggml.merges";
constexpr const char* kKeyScores = "tokenizer.ggml.scores";
constexpr const char* kKeyTypes = "tokenizer.ggml.token_type";
constexpr const char* kKeyBos = "tokenizer.ggml.bos_token_id";
constexpr const char* kKeyEos = "tokenizer.ggml.eos_token_id";
constexpr const char* kKeyUnk = "tokenizer.ggml.unknown_token_id";
constexpr const char* kKeyPad = "tokenizer.ggml.padding_token_id";
constexpr const char* kKeyAddBos = "tokenizer.ggml.add_bos_token";
constexpr const char* kKeyAddEos = "tokenizer.ggml.add_eos_token";
constexpr const char* kKeyAddSpacePrefix = "tokenizer.ggml.add_space_prefix";

// Reads an optional token id key into *out (left unchanged when the key is absent).
Status read_id(const gguf::GgufFile& f, const char* key, int32_t* out) {
  if (f.find(key) == nullptr) return Status::ok();
  Result<uint64_t> v = f.get_uint(key);
  if (!v) return Status::error("[vocab] " + v.message());
  if (*v > static_cast<uint64_t>(INT32_MAX)) {
    return Status::error("[vocab] " + std::string(key) + ": id " + std::to_string(*v) + " out of range");
  }
  *out = static_cast<int32_t>(*v);
  return Status::ok();
}

Status read_flag(const gguf::GgufFile& f, const char* key, bool* out) {
  if (f.find(key) == nullptr) return Status::ok();
  Result<bool> v = f.get_bool(key);
  if (!v) return Status::error("[vocab] " + v.message());
  *out = *v;
  return Status::ok();
}

// Load-time type fixes that llama.cpp applies (src/llama-vocab.cpp, load()) because
// GGUF files lack per-token attributes; needed to tokenize token for token alike.
// Tokens with these texts are end-of-generation or fill-in-the-middle markers and are
// promoted to control type when the file says otherwise (Gemma 3 stores "</s>" as
// user-defined: llama.cpp then neither splits it out of text without parse_special
// nor renders it without render_special).
constexpr std::string_view kControlLooking[] = {
    "</s>", "<EOT>", "<MID>", "<PAD>", "<PRE>", "<REPO>", "<SUF>", "<end_of_turn>", "<end_of_utterance>",
    "<eos>", "<fim-middle>", "<fim-pad>", "<fim-prefix>", "<fim-repo>", "<fim-suffix>", "<fim_middle>",
    "<fim_pad>", "<fim_prefix>", "<fim_suffix>", "<reponame>", "<turn|>", "<|calls|>", "<|call|>",
    "<|code_middle|>", "<|code_prefix|>", "<|code_suffix|>", "<|end_of_text|>", "<|endoftext|>", "<|end|>",
    "<|eom_id|>", "<|eot_id|>", "<|file_sep|>", "<|fim_middle|>", "<|fim_pad|>", "<|fim_prefix|>",
    "<|fim_repo|>", "<|fim_suffix|>", "<|flush|>", "<|im_end|>", "<|middle|>", "<|prefix|>", "<|repo_name|>",
    "<|return|>", "<|suffix|>", "<|tool_response>", "[EOS]", "[EOT]", "[PAD]", "[e~[", "_<EOT>",
    "\xE2\x96\x81<MID>", "\xE2\x96\x81<PRE>", "\xE2\x96\x81<SUF>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // <｜end▁of▁sentence｜>
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>",
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
};
// Harmony-format markers that llama.cpp forces to user-defined.
constexpr std::string_view kForcedUserDefined[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

void apply_type_overrides(VocabData* d) {
  std::unordered_set<std::string_view> control(std::begin(kControlLooking), std::end(kControlLooking));
  std::unordered_set<std::string_view> user(std::begin(kForcedUserDefined), std::end(kForcedUserDefined));
  // With duplicate texts llama.cpp's name lookup sees the highest id; map text -> id
  // for the few matching tokens only.
  std::unordered_map<std::string_view, size_t> hits;
  for (size_t i = 0; i < d->tokens.size(); ++i) {
    const std::string& t = d->tokens[i];
    if (t.size() < 4 || t.size() > 32) continue;
    if (control.count(t) != 0 || user.count(t) != 0 || t == "<|plamo:eos|>") hits[t] = i;
  }
  // A vocab with these markers has an ordinary "</s>" (llama.cpp: gemma4, plamo).
  const bool normal_s = hits.count("<|tool_response>") != 0 || hits.count("<|plamo:eos|>") != 0;
  for (const auto& [text, id] : hits) {
    if (control.count(text) != 0) {
      if (normal_s && text == "</s>") continue;
      d->types[id] = static_cast<int32_t>(TokenType::kControl);
    } else if (user.count(text) != 0) {
      d->types[id] = static_cast<int32_t>(TokenType::kUserDefined);
    }
  }
}

size_t hash_text(std::string_view s) {
  // FNV-1a, 64-bit: fast for short keys, good enough spread for token texts.
  uint64_t h = 1469598103934665603ull;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return static_cast<size_t>(h ^ (h >> 29));
}

}  // namespace

Result<Vocab> Vocab::from_gguf(const gguf::GgufFile& f) {
  VocabData d;
  Result<std::string> model = f.get_string(kKeyModel);
  if (!model) return Status::error("[vocab] " + model.message());
  d.model = std::move(model.value());

  Result<std::vector<std::string>> tokens = f.get_string_array(kKeyTokens);
  if (!tokens) return Status::error("[vocab] " + tokens.message());
  d.tokens = std::move(tokens.value());
  if (f.find(kKeyPre) != nullptr) {
    Result<std::string> pre = f.get_string(kKeyPre);
    if (!pre) return Status::error("[vocab] " + pre.message());
    d.pre = std::move(pre.value());
  }
  // SentencePiece files may carry merges too; only BPE models use them.
  if (d.model != "llama" && f.find(kKeyMerges) != nullptr) {
    Result<std::vector<std::string>> merges = f.get_string_array(kKeyMerges);
    if (!merges) return Status::error("[vocab] " + merges.message());
    d.merges = std::move(merges.value());
  } else if (d.model == "gpt2") {
    return Status::error(std::string("[vocab] ") + kKeyMerges + ": missing (required by tokenizer model 'gpt2')");
  }
  if (f.find(kKeyScores) != nullptr) {
    Result<std::vector<float>> scores = f.get_f32_array(kKeyScores);
    if (!scores) return Status::error("[vocab] " + scores.message());
    d.scores = std::move(scores.value());
  }
  if (f.find(kKeyTypes) != nullptr) {
    Result<std::vector<int32_t>> types = f.get_i32_array(kKeyTypes);
    if (!types) return Status::error("[vocab] " + types.message());
    d.types = std::move(types.value());
  }

  // Defaults per tokenizer model, as llama.cpp applies them before reading the keys.
  if (d.model == "llama") {
    d.bos_id = 1;
    d.eos_id = 2;
    d.unk_id = 0;
    d.add_bos = true;
    d.add_eos = false;
    d.add_space_prefix = true;
  }
  SPECULA_RETURN_IF_ERROR(read_id(f, kKeyBos, &d.bos_id));
  SPECULA_RETURN_IF_ERROR(read_id(f, kKeyEos, &d.eos_id));
  SPECULA_RETURN_IF_ERROR(read_id(f, kKeyUnk, &d.unk_id));
  SPECULA_RETURN_IF_ERROR(read_id(f, kKeyPad, &d.pad_id));
  SPECULA_RETURN_IF_ERROR(read_flag(f, kKeyAddBos, &d.add_bos));
  SPECULA_RETURN_IF_ERROR(read_flag(f, kKeyAddEos, &d.add_eos));
  SPECULA_RETURN_IF_ERROR(read_flag(f, kKeyAddSpacePrefix, &d.add_space_prefix));
  if (!d.types.empty() && d.types.size() == d.tokens.size()) apply_type_overrides(&d);
  return from_data(std::move(d));
}

Result<Vocab> Vocab::from_data(VocabData d) {
  const size_t n = d.tokens.size();
  if (d.model.empty()) return Status::error(std::string("[vocab] ") + kKeyModel + ": empty tokenizer model name");
  if (n == 0) return Status::error(std::string("[vocab] ") + kKeyTokens + ": no tokens");
  if (n > static_cast<size_t>(INT32_MAX)) {
    return Status::error(std::string("[vocab] ") + kKeyTokens + ": " + std::to_string(n) + " tokens is too many");
  }
  if (d.scores.empty()) d.scores.assign(n, 0.0f);
  if (d.types.empty()) d.types.assign(n, static_cast<int32_t>(TokenType::kNormal));
  if (d.scores.size() != n) {
    return Status::error(std::string("[vocab] ") + kKeyScores + ": " + std::to_string(d.scores.size()) +
                         " entries, expected " + std::to_string(n) + " (length of " + kKeyTokens + ")");
  }
  if (d.types.size() != n) {
    return Status::error(std::string("[vocab] ") + kKeyTypes + ": " + std::to_string(d.types.size()) +
                         " entries, expected " + std::to_string(n) + " (length of " + kKeyTokens + ")");
  }
  for (size_t i = 0; i < n; ++i) {
    if (d.types[i] < 0 || d.types[i] > static_cast<int32_t>(TokenType::kByte)) {
      // llama.cpp treats unknown types as undefined; keep the same.
      d.types[i] = static_cast<int32_t>(TokenType::kUndefined);
    }
    // llama.cpp renames empty tokens so that they can never match text.
    if (d.tokens[i].empty()) d.tokens[i] = "[EMPTY_" + std::to_string(i) + "]";
  }
  const auto check_id = [&](const char* key, int32_t id) -> Status {
    if (id < -1 || id >= static_cast<int32_t>(n)) {
      return Status::error(std::string("[vocab] ") + key + ": id " + std::to_string(id) + " out of range (vocab size " +
                           std::to_string(n) + ")");
    }
    return Status::ok();
  };
  SPECULA_RETURN_IF_ERROR(check_id(kKeyBos, d.bos_id));
  SPECULA_RETURN_IF_ERROR(check_id(kKeyEos, d.eos_id));
  SPECULA_RETURN_IF_ERROR(check_id(kKeyUnk, d.unk_id));
  SPECULA_RETURN_IF_ERROR(check_id(kKeyPad, d.pad_id));
  if (d.add_bos && d.bos_id < 0) return Status::error(std::string("[vocab] ") + kKeyAddBos + " is set but there is no BOS id");
  if (d.add_eos && d.eos_id < 0) return Status::error(std::string("[vocab] ") + kKeyAddEos + " is set but there is no EOS id");

  auto impl = std::make_shared<Impl>();
  impl->data = std::move(d);
  const VocabData& data = impl->data;
  size_t cap = 1;
  while (cap < 2 * n) cap <<= 1;
  impl->slots.assign(cap, -1);
  impl->slot_mask = cap - 1;
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = data.tokens[i];
    size_t s = hash_text(t) & impl->slot_mask;
    while (impl->slots[s] >= 0 && data.tokens[impl->slots[s]] != t) s = (s + 1) & impl->slot_mask;
    impl->slots[s] = static_cast<int32_t>(i);  // later ids win over duplicates
    impl->max_token_len = std::max(impl->max_token_len, t.size());
  }
  Vocab v;
  v.impl_ = impl;
  const auto lookup = [&](std::string_view s) { return v.find(s); };
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    int32_t id = lookup(hex);
    if (id < 0) {
      const char one = static_cast<char>(b);
      id = lookup(std::string_view(&one, 1));
    }
    impl->byte_token[b] = id;
  }
  for (size_t i = 0; i < n; ++i) {
    const auto t = static_cast<TokenType>(data.types[i]);
    if (t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown) {
      impl->special_tokens.push_back(static_cast<int32_t>(i));
    }
  }
  // Same input order and comparator as llama.cpp, so that equal-length tokens end up
  // in the same (implementation-defined) order with the same standard library.
  std::sort(impl->special_tokens.begin(), impl->special_tokens.end(), [&](int32_t a, int32_t b) {
    return data.tokens[a].size() > data.tokens[b].size();
  });

  return v;
}

int32_t Vocab::find(std::string_view text) const {
  const std::vector<std::string>& tokens = impl_->data.tokens;
  for (size_t s = hash_text(text) & impl_->slot_mask;; s = (s + 1) & impl_->slot_mask) {
    const int32_t id = impl_->slots[s];
    if (id < 0) return -1;
    if (tokens[id] == text) return id;
  }
}

std::optional<uint8_t> Vocab::token_to_byte(int32_t id) const {
  if (!valid_id(id) || type(id) != TokenType::kByte) return std::nullopt;
  const std::string& t = text(id);
  if (t.size() == 6 && t[0] == '<' && t[1] == '0' && t[2] == 'x' && t[5] == '>') {
    const auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    const int hi = hex(t[3]);
    const int lo = hex(t[4]);
    if (hi >= 0 && lo >= 0) return static_cast<uint8_t>(hi * 16 + lo);
  }
  if (t.size() == 1) return static_cast<uint8_t>(t[0]);  // a byte token stored as the byte itself
  return std::nullopt;
}

}  // namespace specula::tokenizer
