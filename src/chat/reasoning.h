// chat/reasoning.h — the thinking of reasoning models in their chat output: which templates
// have it, where a generation starts (inside a thinking block or not) and how an answer's
// text splits into its reasoning and its content, whole or streamed.
//
// Format: "<think>" ... "</think>" — Qwen3 (the model writes "<think>\n" itself; with
// enable_thinking false its template writes an empty block), QwQ and the DeepSeek-R1
// distills (their generation prompt ends with "<think>\n", so the answer starts inside the
// block and only "</think>" is written). A template that mentions "<think>" has it.
// The split is verbatim, as vLLM's reasoning parsers do it: reasoning = the text between the
// tags, content = the text after "</think>"; reasoning + content == the raw text without
// the two tags (nothing trimmed). An answer whose text does not start with "<think>" (and
// whose prompt did not open one) is all content; an unclosed block (cut by max_tokens) is
// all reasoning. A "<think>" written by the user stays text: only the model's output and the
// template's generation prompt are read here (the prompt's ids tokenize client text with
// special-token parsing off: chat/prompt.h).
// Does not: enforce a thinking budget (grammar/thinking_budget.h) or render templates.
#pragma once

#include <cstddef>
#include <string>

namespace specula::chat {

enum class ReasoningFormat { kNone, kThink };

inline constexpr const char* kThinkOpen = "<think>";
inline constexpr const char* kThinkClose = "</think>";

// The reasoning format of a chat template (kThink when its source mentions "<think>").
ReasoningFormat reasoning_format_of(const std::string& template_source);

// Whether a rendered prompt leaves the model inside a thinking block: it ends with
// "<think>" and optional whitespace (DeepSeek-R1's "<think>\n"). `trusted_from`: where the
// template's own text begins after the last client text (RenderedPrompt::untrusted) — a tag
// the client wrote (an assistant prefill ending in "<think>") does not count.
bool prompt_opens_thinking(const std::string& prompt_text, size_t trusted_from = 0);
// Whether a rendered prompt already closed the thinking block it opened for this answer:
// it ends with "</think>" and optional whitespace (Qwen3's enable_thinking false writes
// "<think>\n\n</think>\n\n"). The answer is then all content: a "<think>" in it is text.
bool prompt_closes_thinking(const std::string& prompt_text, size_t trusted_from = 0);

struct SplitAnswer {
  std::string reasoning;  // between the tags (empty: none)
  std::string content;    // after "</think>" (all of it when there was no thinking)
  bool has_reasoning = false;  // a thinking block was opened (reasoning may still be empty)
};

// Splits a whole answer. `in_thinking`: the prompt opened the block.
SplitAnswer split_reasoning(const std::string& text, bool in_thinking);

// The streamed split: text fed as it comes; what is surely reasoning or content goes out,
// a possible partial tag is held until the next feed (or finish()).
// Invariant: the concatenation of every feed()'s and finish()'s pieces equals
// split_reasoning() of the whole text.
class ReasoningStream {
 public:
  ReasoningStream() = default;
  // Inactive (kNone): text passes through as content.
  ReasoningStream(ReasoningFormat format, bool in_thinking);
  SplitAnswer feed(const std::string& text);
  SplitAnswer finish();
  bool active() const { return format_ != ReasoningFormat::kNone; }

 private:
  SplitAnswer take(bool at_end);
  ReasoningFormat format_ = ReasoningFormat::kNone;
  enum class Phase { kStart, kThinking, kContent } phase_ = Phase::kContent;
  bool opened_ = false;
  std::string held_;
};

}  // namespace specula::chat
