// chat/chat_template.h — render OpenAI-style chat messages with a model's Jinja
// chat template, byte for byte as transformers' apply_chat_template does.
//
// Oracle: transformers renders with Python Jinja2 3.x in an ImmutableSandboxedEnvironment
// (trim_blocks=True, lstrip_blocks=True, loopcontrols), with globals raise_exception
// and strftime_now and a `tojson` filter that is json.dumps(ensure_ascii=False, ...).
// tools/make_chat_template_fixtures.py records Jinja2's output for the committed
// templates; tests/chat/chat_template_test.cpp checks equality.
//
// Supported Jinja subset (jinja/ast.h, jinja/eval.h): text, {{ }}, {# #}, whitespace
// control (-, +), {% raw %}, if/elif/else, for (tuple targets, `if` filter, else,
// loop.index/index0/revindex/revindex0/first/last/length/previtem/nextitem/cycle),
// break/continue, set (names, tuples, ns.attr, block set), macro (positional, keyword
// and default arguments), generation (transformers' no-op block); literals, attribute /
// subscript / slice access, arithmetic, ~, comparisons (chained), and/or/not, in,
// conditional expressions, printf-style `%` on strings, jinja2's built-in filters but
// urlize and all its tests (jinja/eval.cpp kFilters/kTests; `random` only where its
// result is not random: an empty or one-item sequence), str methods (strip, lstrip,
// rstrip, startswith, endswith, split, upper, lower, replace, title, capitalize, find,
// count, join), dict methods (get, items, keys, values), globals range, namespace,
// dict, raise_exception, strftime_now. Markup (from safe/escape) is tracked as far as
// escape, `+`, `%`, repr, the `escaped` test and the case/strip methods go.
// Not supported (parse errors): extends/block/include/import, call blocks, filter
// blocks, with, recursive loops, *args/**kwargs, the urlize filter and the cycler,
// joiner and lipsum globals; filters that jinja2 makes generators of (select, map,
// batch, ...) give lists; case mapping covers Latin, Greek and Cyrillic only (no
// final-sigma or Turkish-i rules).
//
// Hostile templates cannot hang or crash the caller: parse nesting is capped at
// jinja::kMaxParseDepth, rendering at ChatTemplateLimits; exceeding one is an error.
// Does not tokenize the rendered prompt and does not parse model output (tool calls).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "specula/status.h"

namespace specula::gguf {
class GgufFile;
}

namespace specula::jinja {
struct Template;
}

namespace specula::chat {

struct ChatTemplateLimits {
  size_t max_output_bytes = size_t{16} << 20;     // rendered prompt size
  int64_t max_string_bytes = int64_t{64} << 20;   // all strings built while rendering
  int64_t max_loop_iterations = 1'000'000;        // all loops together; also range() length
  int64_t max_steps = 10'000'000;                 // expression evaluations (bounds CPU time)
  int max_depth = 500;                            // nested evaluation, incl. macro recursion
};

// A rendered prompt and the byte ranges of it that came from what a client wrote
// (message content, names, tool calls and results, tool definitions): sorted, disjoint.
// Tokenize those with special-token parsing off (Tokenizer::encode_segments), so that
// text like "<|im_end|>" in a message can never become a control token; only the
// template's own text (scaffolding) may.
struct RenderedPrompt {
  std::string text;
  std::vector<std::pair<size_t, size_t>> untrusted;
};

class ChatTemplate {
 public:
  // Errors: "[chat_template] LINE:COL: what" for syntax errors, unknown tags, filters
  // or tests, and nesting deeper than jinja::kMaxParseDepth.
  static Result<ChatTemplate> parse(std::string source);

  // Renders with the variables of `context`, a JSON object that should hold
  // "messages" (array of {role, content, ...}; content may be a string or an array of
  // parts, passed through as-is), "add_generation_prompt" (bool), "bos_token",
  // "eos_token"; every other key (tools, ...) is visible too. Like apply_chat_template,
  // "tools" and "documents" are None when absent and "add_generation_prompt" is false.
  // Pass an ordered_json to keep the caller's key order (it shows in `tojson` output);
  // nlohmann::json sorts keys. Errors: "[chat_template] LINE:COL: what", including
  // "raise_exception: <message>" raised by the template and exceeded limits.
  Result<std::string> render(const nlohmann::ordered_json& context) const;
  Result<std::string> render(const nlohmann::json& context) const;

  // render(), and where the client's text landed: every string under "messages" (but a
  // message's "role" when it is system/user/assistant/tool/developer) and under "tools"
  // and "documents" is untrusted. The interpreter tracks untrusted text exactly through
  // output, concatenation, strip/trim and captured blocks and macros; any other string an
  // operation derives from untrusted input is untrusted whole (jinja/value.h Spans).
  Result<RenderedPrompt> render_marked(const nlohmann::ordered_json& context) const;
  Result<RenderedPrompt> render_marked(const nlohmann::json& context) const;

  void set_limits(const ChatTemplateLimits& limits) { limits_ = limits; }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::shared_ptr<const jinja::Template> tpl_;
  ChatTemplateLimits limits_;
};

// The model's template from GGUF metadata `tokenizer.chat_template`; std::nullopt when
// the file has none (or the key is not a string).
std::optional<std::string> chat_template_from_gguf(const gguf::GgufFile& f);

}  // namespace specula::chat
