// tokenizer/byte_alphabet.h — GPT-2's bytes_to_unicode (openai/gpt-2 encoder.py): the
// alphabet byte-level BPE writes raw bytes in. Printable Latin-1 bytes (0x21-0x7E,
// 0xA1-0xAC, 0xAE-0xFF) map to themselves, the other 68 bytes to U+0100..U+0143 in order.
// Shared by the GGUF BPE tokenizer (bpe.h) and tokenizer.json's ByteLevel (hf_tokenizer.h).
#pragma once

#include <array>
#include <cstdint>

namespace specula::tokenizer {

struct ByteAlphabet {
  std::array<uint32_t, 256> to_cp{};      // byte -> code point
  std::array<int16_t, 0x144> to_byte{};   // code point (< 0x144) -> byte, -1 if none
  ByteAlphabet() {
    to_byte.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_cp[b] = printable ? b : next++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

inline const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace specula::tokenizer
