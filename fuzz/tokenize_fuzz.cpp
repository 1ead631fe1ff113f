// fuzz/tokenize_fuzz.cpp — libFuzzer target for encoding and decoding with real tokenizers:
// the byte-level BPE of Qwen2.5 (NFC normalizer, a regex pre-tokenizer) and the SentencePiece
// BPE with byte fallback of Gemma 3 — their real tokenizer.json files (fuzz_util.h
// tokenizer_json_path), loaded once.
// Input: a selector byte (bit 0: Gemma 3, bit 1: parse special tokens, bit 2: add BOS/EOS),
// then text. The same bytes are also read as little-endian int32 ids to decode (any value:
// out-of-range ids must be refused, not read).
// Properties: every id encode() makes is in the vocabulary; decode() of them succeeds; for
// Qwen2.5 on printable ASCII without special-token parsing, decode(encode(text)) == text
// (byte-level BPE is lossless there; NFC does not touch ASCII).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "tokenizer/hf_tokenizer.h"

namespace {
std::unique_ptr<specula::tokenizer::HfTokenizer> load(const char* name) {
  auto r = specula::tokenizer::HfTokenizer::create(specula::fuzz::read_file(specula::fuzz::tokenizer_json_path(name)), {});
  if (!r.is_ok()) specula::fuzz::fail("cannot load a fixture tokenizer", r.message());
  return std::move(r).value();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace specula;
  static const auto qwen2 = load("qwen2_5");
  static const auto gemma3 = load("gemma3");
  fuzz::Input in(data, size);
  const uint8_t mode = in.byte();
  const tokenizer::Tokenizer& tok = (mode & 1) ? *gemma3 : *qwen2;
  const bool special = (mode & 2) != 0, add = (mode & 4) != 0;
  const std::string_view text = in.rest();
  const std::vector<int32_t> ids = tok.encode(text, add, special);
  const int32_t n = tok.vocab().size();
  for (int32_t id : ids)
    if (id < 0 || id >= n) fuzz::fail("encode made an id outside the vocabulary", std::to_string(id));
  auto d = tok.decode(ids, false, true);
  if (!d.is_ok()) fuzz::fail("decode failed on the tokenizer's own ids", d.message());
  bool printable = !(mode & 1) && !special && !add;
  for (char c : text) printable = printable && c >= 0x20 && c < 0x7f;
  if (printable && *d != text) fuzz::fail("Qwen2 decode(encode(ascii)) differs", *d);
  // Arbitrary ids.
  std::vector<int32_t> raw(text.size() / 4);
  if (!raw.empty()) std::memcpy(raw.data(), text.data(), raw.size() * 4);
  for (bool remove : {false, true}) {
    auto r = tok.decode(raw, remove, !remove);
    volatile size_t sink = r.is_ok() ? r->size() : r.message().size();
    (void)sink;
  }
  for (int32_t id : raw) {
    volatile size_t sink = tok.vocab().valid_id(id) ? tok.token_to_piece(id, true).size() : 0;
    (void)sink;
  }
  return 0;
}
