// chat/tool_calls.h — finding the tool calls in a model's chat output, for the formats
// of the models specula runs.
//
// Hermes format (Qwen2.5 / Qwen3 chat templates, NousResearch Hermes): each call is
//   <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>
// after optional text; a template that writes "<tool_call>" uses it. Small Qwen2.5 models
// (Coder 0.5B-1.5B) often write the same object in a Markdown code block (```json ...
// ```) or bare instead, which llama.cpp's Hermes parser accepts too; those are read as
// calls only when "name" is one of the request's tools and "arguments" an object (an
// array of such objects: several calls).
// Text that does not parse as calls stays text (the answer then has no tool_calls),
// never dropped.
// tool_choice "required" or a named function is enforced with a grammar of the format's
// calls (forced_tool_grammar, run by grammar/constraint.h).
// Does not: Gemma (its templates have no tool-call format), Llama's built-in tools
// (brave_search / wolfram_alpha / code_interpreter calls in <|python_tag|> Python).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "specula/status.h"

namespace specula::chat {

// Llama 3.x JSON (Meta's llama3.1+ templates, "Respond in the format {"name": function
// name, "parameters": dictionary of argument name and its value}"): the answer is one call
// object {"name", "parameters"} (or "arguments"), optionally after <|python_tag|>, several
// separated by ";" or newlines; read as calls only when each name is one of the tools.
// Mistral (templates that write [TOOL_CALLS]): "[TOOL_CALLS]" then a JSON array of
// {"name", "arguments", "id"?} objects (v3 tokenizers), or name[ARGS]{json} repeated
// (v11+); text before [TOOL_CALLS] is content.
enum class ToolFormat { kNone, kHermes, kLlama3Json, kMistral };

// The tool-call format a chat template writes and expects back; kNone when it has none:
// "<tool_call>" -> Hermes, "[TOOL_CALLS]" -> Mistral, a Llama 3 header template that
// mentions "parameters" and tools -> Llama 3 JSON.
ToolFormat tool_format_of(const std::string& template_source);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text of the arguments object (OpenAI's function.arguments)
};

struct ParsedAnswer {
  std::string content;          // text outside the calls (trimmed when there are calls)
  std::vector<ToolCall> calls;  // in order; empty: a plain answer
};

// A grammar (llguidance's Lark dialect) whose sentences are `format` calls of the tool
// named `name` ("*": any of `tools`, OpenAI's [{"type": "function", "function": {"name",
// "parameters"}}]) with arguments valid for its parameters schema; `parallel`: one or
// more calls, else exactly one. Hermes: <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>;
// Llama 3: {"name": "f", "parameters": {...}} (";" between calls); Mistral: [TOOL_CALLS]
// [{"name": "f", "arguments": {...}}, ...] — `mistral_marker` is how the grammar names the
// [TOOL_CALLS] token (its text, or llguidance's <[id]> for a control token).
// Errors: the format has no calls (a template without tool calls).
Result<std::string> forced_tool_grammar(ToolFormat format, const nlohmann::ordered_json& tools,
                                        const std::string& name, bool parallel,
                                        const std::string& mistral_marker = "\"[TOOL_CALLS]\"");

// Splits a whole answer into text and calls; `tools`: the request's tool names.
ParsedAnswer parse_tool_calls(ToolFormat format, const std::string& text, const std::vector<std::string>& tools);

// Streaming: of `pending` (text not yet sent; `at_start`: nothing sent yet), how many
// leading bytes are surely content, and whether what follows them starts a possible call
// (then everything from there is held until the end and parsed).
struct Release {
  size_t content = 0;
  bool call_started = false;
};
Release releasable_content(ToolFormat format, const std::string& pending, bool at_start);

// The tool-call side of one answer, streamed or whole, for any API's answer format:
// text goes out until a possible call starts, the rest is held and parsed at the end;
// without parallel calls an answer keeps its first call only. Inactive (format kNone):
// text passes through and there are no calls.
class ToolCallStream {
 public:
  ToolCallStream() = default;
  ToolCallStream(ToolFormat format, std::vector<std::string> tools, bool parallel)
      : format_(format), tools_(std::move(tools)), parallel_(parallel) {}
  // One update's text; returns what can be sent as content now.
  std::string feed(const std::string& text);
  // At the end of a stream: the held text as content, or the calls in it (none when the
  // answer was cut by max_tokens).
  ParsedAnswer finish(bool cut_by_length);
  // A whole (non-streamed) answer.
  ParsedAnswer parse_whole(const std::string& text, bool cut_by_length) const;

 private:
  ParsedAnswer parse(const std::string& text, bool cut_by_length) const;
  ToolFormat format_ = ToolFormat::kNone;
  std::vector<std::string> tools_;
  bool parallel_ = true;
  std::string pending_;  // held text: a possible or begun call
  bool in_call_ = false;
  bool released_any_ = false;
};

}  // namespace specula::chat
