// core/utf8.h — UTF-8 encoding of one code point (RFC 3629 §3), shared by the BPE
// tokenizer and the Jinja interpreter.
// Does not validate: surrogates and code points above U+10FFFF are encoded as given
// (callers that take untrusted code points check them first).
#pragma once

#include <cstdint>
#include <string>

namespace specula {

// Appends the 1–4 byte UTF-8 encoding of cp to out.
inline void utf8_append(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace specula
