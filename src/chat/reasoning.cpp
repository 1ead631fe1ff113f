// chat/reasoning.cpp — see reasoning.h.
#include "chat/reasoning.h"

#include <algorithm>
#include <cstring>

namespace specula::chat {

ReasoningFormat reasoning_format_of(const std::string& template_source) {
  return template_source.find(kThinkOpen) != std::string::npos ? ReasoningFormat::kThink : ReasoningFormat::kNone;
}

namespace {
// The prompt ends with `tag` (starting at or after trusted_from) and optional whitespace.
bool ends_with_tag(const std::string& text, const char* tag, size_t trusted_from) {
  size_t end = text.size();
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == ' ' || text[end - 1] == '\r' || text[end - 1] == '\t'))
    --end;
  const size_t n = std::strlen(tag);
  return end >= n && end - n >= trusted_from && text.compare(end - n, n, tag) == 0;
}
}  // namespace

bool prompt_opens_thinking(const std::string& prompt_text, size_t trusted_from) {
  return ends_with_tag(prompt_text, kThinkOpen, trusted_from);
}
bool prompt_closes_thinking(const std::string& prompt_text, size_t trusted_from) {
  return ends_with_tag(prompt_text, kThinkClose, trusted_from);
}

ReasoningStream::ReasoningStream(ReasoningFormat format, bool in_thinking)
    : format_(format),
      phase_(format == ReasoningFormat::kNone ? Phase::kContent : in_thinking ? Phase::kThinking : Phase::kStart),
      opened_(format != ReasoningFormat::kNone && in_thinking) {}

SplitAnswer ReasoningStream::feed(const std::string& text) {
  held_ += text;
  return take(false);
}

SplitAnswer ReasoningStream::finish() { return take(true); }

SplitAnswer ReasoningStream::take(bool at_end) {
  SplitAnswer out;
  const std::string open = kThinkOpen, close = kThinkClose;
  for (;;) {
    if (phase_ == Phase::kStart) {
      if (held_.size() < open.size() && open.compare(0, held_.size(), held_) == 0 && !at_end) break;
      if (held_.compare(0, open.size(), open) == 0) {
        held_.erase(0, open.size());
        phase_ = Phase::kThinking;
        opened_ = true;
      } else {
        phase_ = Phase::kContent;
      }
      continue;
    }
    if (phase_ == Phase::kThinking) {
      const size_t at = held_.find(close);
      if (at != std::string::npos) {
        out.reasoning += held_.substr(0, at);
        held_.erase(0, at + close.size());
        phase_ = Phase::kContent;
        continue;
      }
      // Hold the longest tail that could be the start of "</think>".
      size_t keep = 0;
      if (!at_end)
        for (size_t k = std::min(held_.size(), close.size() - 1); k > 0; --k)
          if (held_.compare(held_.size() - k, k, close, 0, k) == 0) {
            keep = k;
            break;
          }
      out.reasoning += held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      break;
    }
    out.content += held_;
    held_.clear();
    break;
  }
  out.has_reasoning = opened_;
  return out;
}

SplitAnswer split_reasoning(const std::string& text, bool in_thinking) {
  ReasoningStream s(ReasoningFormat::kThink, in_thinking);
  SplitAnswer a = s.feed(text);
  SplitAnswer b = s.finish();
  a.reasoning += b.reasoning;
  a.content += b.content;
  a.has_reasoning = b.has_reasoning;
  return a;
}

}  // namespace specula::chat
