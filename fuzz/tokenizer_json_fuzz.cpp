// fuzz/tokenizer_json_fuzz.cpp — libFuzzer target for loading a tokenizer.json
// (tokenizer/hf_tokenizer.h: models BPE, WordPiece-free BPE with byte fallback, Unigram-free
// SentencePiece-style pieces; normalizers, pre-tokenizers with their regexes, decoders,
// added tokens) and then using what loaded.
// Input: a tokenizer.json text. Seeds (fuzz/make_seeds.py): the real tokenizer.json files of
// Qwen2.5, Llama 3, Gemma 3, Llama 2, DeepSeek-V3 and GPT-4o cut down to 600 ids.
// SPECULA_FUZZ_VERBOSE=1 prints why an input did not load (to check seeds).
// Property: create() returns a tokenizer or an error; one that loads encodes a fixed set of
// texts (ASCII, Unicode, control-token texts, whitespace runs) with and without special-token
// parsing into ids of its own vocabulary, and decodes those ids (and every piece) without
// failing on its own ids.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "tokenizer/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace specula;
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  tokenizer::HfTokenizer::Options opt;
  auto r = tokenizer::HfTokenizer::create(json, opt);
  if (!r.is_ok()) {
    static const bool verbose = std::getenv("SPECULA_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "not loaded: %s\n", r.message().c_str());
    return 0;
  }
  const tokenizer::Tokenizer& tok = **r;
  static const char* const kTexts[] = {
      "Hello world, 123 4567!",
      " leading space and  two\tspaces\n\nnew lines   ",
      "<|im_start|>user\n<|im_end|><s></s><bos><eos><unk>",
      "ünïcödé 日本語 😀 \xc3\x28 invalid \xff bytes",
      "",
  };
  const int32_t n = tok.vocab().size();
  for (const char* text : kTexts) {
    for (bool special : {false, true}) {
      const std::vector<int32_t> ids = tok.encode(text, true, special);
      for (int32_t id : ids)
        if (id < 0 || id >= n) fuzz::fail("encode made an id outside the vocabulary", std::to_string(id));
      auto d = tok.decode(ids, false, true);
      if (!d.is_ok()) fuzz::fail("decode failed on the tokenizer's own ids", d.message());
    }
  }
  volatile size_t sink = 0;
  for (int32_t id = 0; id < n && id < 4096; ++id) sink = sink + tok.token_to_piece(id, true).size();
  return 0;
}
