// tokenizer/detokenizer.cpp — incremental UTF-8 validation for streamed pieces (see
// detokenizer.h).
#include "tokenizer/detokenizer.h"

namespace specula::tokenizer {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of a valid sequence starting with `lead` (0 if `lead` cannot start one), and
// the allowed range of the second byte (Unicode Table 3-7, Well-Formed UTF-8).
struct LeadInfo {
  int len;
  uint8_t lo;
  uint8_t hi;
};
LeadInfo lead_info(uint8_t c) {
  if (c < 0x80) return {1, 0, 0};
  if (c >= 0xC2 && c <= 0xDF) return {2, 0x80, 0xBF};
  if (c == 0xE0) return {3, 0xA0, 0xBF};
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return {3, 0x80, 0xBF};
  if (c == 0xED) return {3, 0x80, 0x9F};
  if (c == 0xF0) return {4, 0x90, 0xBF};
  if (c >= 0xF1 && c <= 0xF3) return {4, 0x80, 0xBF};
  if (c == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

size_t StreamingDetokenizer::append_valid_utf8(std::string_view bytes, std::string* out) {
  size_t i = 0;
  size_t run = 0;  // start of the current run of valid bytes not yet copied
  while (i < bytes.size()) {
    const auto c = static_cast<uint8_t>(bytes[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    const LeadInfo info = lead_info(c);
    if (info.len == 0) {
      out->append(bytes.substr(run, i - run));
      out->append(kReplacement);
      run = ++i;
      continue;
    }
    // Count how many following bytes continue a well-formed sequence.
    int good = 1;
    bool broken = false;
    while (good < info.len) {
      if (i + good >= bytes.size()) break;  // ran out: maybe incomplete
      const auto d = static_cast<uint8_t>(bytes[i + good]);
      const uint8_t lo = good == 1 ? info.lo : 0x80;
      const uint8_t hi = good == 1 ? info.hi : 0xBF;
      if (d < lo || d > hi) {
        broken = true;
        break;
      }
      ++good;
    }
    if (good == info.len) {
      i += good;
      continue;
    }
    out->append(bytes.substr(run, i - run));
    if (!broken) return bytes.size() - i;  // incomplete tail: hold it back
    out->append(kReplacement);  // maximal subpart [i, i + good) is invalid
    i += good;
    run = i;
  }
  out->append(bytes.substr(run, i - run));
  return 0;
}

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool render_special)
    : tokenizer_(&tokenizer), render_special_(render_special) {}

Result<std::string> StreamingDetokenizer::push(int32_t id) {
  if (!tokenizer_->vocab().valid_id(id)) {
    return Status::error("[detokenizer] id " + std::to_string(id) + " out of range (vocab size " +
                         std::to_string(tokenizer_->vocab().size()) + ")");
  }
  std::string piece = tokenizer_->token_to_piece(id, render_special_);
  if (first_) {
    // Same rule as Tokenizer::decode without remove_special: only the first token may
    // lose the SentencePiece prefix space.
    first_ = false;
    if (tokenizer_->strip_leading_space() && !piece.empty() && piece.front() == ' ') {
      piece.erase(0, 1);
    }
  }
  pending_ += piece;
  std::string out;
  const size_t keep = append_valid_utf8(pending_, &out);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamingDetokenizer::finish(bool drop_incomplete_tail) {
  std::string out;
  const size_t keep = append_valid_utf8(pending_, &out);
  if (keep > 0 && !drop_incomplete_tail) out.append(kReplacement);
  pending_.clear();
  first_ = true;
  return out;
}

}  // namespace specula::tokenizer
