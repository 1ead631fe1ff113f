// core/utf8.h — UTF-8 encoding of one code point (RFC 3629 §3), shared by the BPE
// tokenizer and the Jinja interpreter, and the strict validity check the tokenizers share.
// Does not validate: surrogates and code points above U+10FFFF are encoded as given
// (callers that take untrusted code points check them first).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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

// Strict UTF-8 (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF) — the condition for
// PCRE2_NO_UTF_CHECK and what Rust / Python strings hold.
inline bool utf8_valid(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const auto cont = [](uint8_t c) { return (c & 0xC0) == 0x80; };
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      ++i;
    } else if (c >= 0xC2 && c <= 0xDF) {
      if (i + 1 >= n || !cont(p[i + 1])) return false;
      i += 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      if (i + 2 >= n || !cont(p[i + 1]) || !cont(p[i + 2])) return false;
      if (c == 0xE0 && p[i + 1] < 0xA0) return false;  // overlong
      if (c == 0xED && p[i + 1] >= 0xA0) return false;  // surrogate
      i += 3;
    } else if (c >= 0xF0 && c <= 0xF4) {
      if (i + 3 >= n || !cont(p[i + 1]) || !cont(p[i + 2]) || !cont(p[i + 3])) return false;
      if (c == 0xF0 && p[i + 1] < 0x90) return false;  // overlong
      if (c == 0xF4 && p[i + 1] >= 0x90) return false;  // > U+10FFFF
      i += 4;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace specula
