// tokenizer/detokenizer.h — streaming detokenizer: token ids in, valid UTF-8 text out.
//
// push(id) appends the token's piece (Tokenizer::token_to_piece) to a pending byte
// buffer and returns the longest prefix that is complete, valid UTF-8. A character
// whose bytes are split across tokens (byte-fallback tokens, e.g. emoji as <0xF0>
// <0x9F> <0x98> <0x80>) is held back until its last byte arrives. A byte sequence
// that can never become valid (a stray continuation byte, an overlong form, a
// surrogate, a code point > U+10FFFF, a lead byte followed by a non-continuation)
// is replaced by U+FFFD at once, one U+FFFD per maximal invalid subpart (Unicode
// 15, §3.9 "U+FFFD Substitution of Maximal Subparts"). finish() flushes what is
// held back, an incomplete sequence becoming one U+FFFD (or dropped: the server and the
// CLI drop the tail of a generation cut in the middle of a character, as the best
// servers do; its token's bytes still show in logprobs).
// With strip_leading_space (SentencePiece add_space_prefix) the first emitted space is
// dropped, like Tokenizer::decode. Does not stop on EOS or stop strings (the caller's
// job) and is not thread-safe (one per stream).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "specula/status.h"
#include "tokenizer/tokenizer.h"

namespace specula::tokenizer {

class StreamingDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool render_special = false);

  // Errors: id outside the vocabulary (the stream is left unchanged).
  Result<std::string> push(int32_t id);
  // Emits what is held back (incomplete sequence -> U+FFFD) and resets the stream.
  // drop_incomplete_tail: a sequence cut short at the end (a generation that stopped in
  // the middle of a character) is dropped instead of becoming U+FFFD.
  std::string finish(bool drop_incomplete_tail = false);
  // Bytes currently held back (0..3).
  size_t pending_bytes() const { return pending_.size(); }

  // Splits `bytes` into the longest valid UTF-8 prefix (with invalid subparts replaced
  // by U+FFFD, appended to *out) and returns how many trailing bytes form an incomplete
  // but still possibly valid sequence (not consumed). Exposed for tests.
  static size_t append_valid_utf8(std::string_view bytes, std::string* out);

 private:
  const Tokenizer* tokenizer_;
  bool render_special_;
  bool first_ = true;
  std::string pending_;
};

}  // namespace specula::tokenizer
