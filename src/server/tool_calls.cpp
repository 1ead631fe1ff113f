// server/tool_calls.cpp — see tool_calls.h.
#include "server/tool_calls.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "server/openai_api.h"

namespace specula::server {

namespace {
using json = nlohmann::ordered_json;

constexpr const char* kOpen = "<tool_call>";
constexpr const char* kClose = "</tool_call>";
constexpr const char* kFence = "```";

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

// The arguments object of a call ({} when absent; a JSON string holding an object is read
// as that object); null when they are not an object.
json args_object(const json& j) {
  if (!j.contains("arguments")) return json::object();
  const json& a = j["arguments"];
  if (a.is_object()) return a;
  if (a.is_string()) {
    json parsed = json::parse(a.get<std::string>(), nullptr, false);
    if (parsed.is_object()) return parsed;
  }
  return nullptr;
}

std::string args_text(const json& j) { return args_object(j).dump(-1, ' ', false, json::error_handler_t::replace); }

// A call object as the model writes it: {"name": string, "arguments": an object, or JSON
// text of one} (strict: arguments given, and the name one of the tools).
bool call_object(const json& j, bool strict, const std::vector<std::string>& tools) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || args_object(j).is_null()) return false;
  if (!strict) return true;
  return j.contains("arguments") && std::find(tools.begin(), tools.end(), j["name"].get<std::string>()) != tools.end();
}

// The top-level JSON values of a text holding one or more of them separated by
// whitespace (models list several calls as consecutive objects); empty when it is not
// such a text.
std::vector<json> json_values(const std::string& s) {
  std::vector<json> out;
  size_t pos = s.find_first_not_of(" \t\r\n");
  while (pos != std::string::npos) {
    if (s[pos] != '{' && s[pos] != '[') return {};
    JsonBrackets brackets;
    int depth = 0;
    size_t end = pos;
    for (; end < s.size(); ++end) {
      depth += brackets.step(s[end]);
      if (depth == 0) break;
    }
    if (end >= s.size()) return {};
    json j = json::parse(s.substr(pos, end + 1 - pos), nullptr, false);
    if (j.is_discarded()) return {};
    out.push_back(std::move(j));
    pos = s.find_first_not_of(" \t\r\n", end + 1);
  }
  return out;
}

// Calls in a JSON text (objects, or arrays of them); strict: only known tools.
bool read_calls(const std::string& s, bool strict, const std::vector<std::string>& tools, std::vector<ToolCall>* out) {
  std::vector<json> items;
  for (json& j : json_values(s)) {
    if (j.is_array()) {
      for (const json& x : j) items.push_back(x);
    } else {
      items.push_back(std::move(j));
    }
  }
  if (items.empty()) return false;
  for (const json& it : items)
    if (!call_object(it, strict, tools)) return false;
  for (const json& it : items) out->push_back({it["name"].get<std::string>(), args_text(it)});
  return true;
}

ParsedAnswer tagged(const std::string& text) {
  ParsedAnswer out;
  std::string content;
  size_t pos = 0;
  for (;;) {
    const size_t open = text.find(kOpen, pos);
    if (open == std::string::npos) {
      content += text.substr(pos);
      break;
    }
    content += text.substr(pos, open - pos);
    const size_t body = open + std::string(kOpen).size();
    size_t close = text.find(kClose, body);
    const bool closed = close != std::string::npos;
    if (!closed) close = text.size();  // cut by EOS right after the JSON
    if (!read_calls(text.substr(body, close - body), false, {}, &out.calls)) return ParsedAnswer{text, {}};
    pos = closed ? close + std::string(kClose).size() : text.size();
  }
  out.content = trim(content);
  return out;
}

ParsedAnswer fenced_or_bare(const std::string& text, const std::vector<std::string>& tools) {
  ParsedAnswer out;
  std::string content;
  size_t pos = 0;
  for (;;) {
    const size_t open = text.find(kFence, pos);
    if (open == std::string::npos) {
      content += text.substr(pos);
      break;
    }
    size_t body = open + 3;
    const size_t eol = text.find('\n', body);
    if (eol == std::string::npos) {
      content += text.substr(pos);
      break;
    }
    const std::string lang = trim(text.substr(body, eol - body));
    size_t close = text.find(kFence, eol + 1);
    const bool closed = close != std::string::npos;
    if (!closed) close = text.size();
    std::vector<ToolCall> calls;
    if ((lang.empty() || lang == "json") && read_calls(text.substr(eol + 1, close - eol - 1), true, tools, &calls)) {
      content += text.substr(pos, open - pos);
      for (auto& c : calls) out.calls.push_back(std::move(c));
    } else {
      content += text.substr(pos, (closed ? close + 3 : text.size()) - pos);
    }
    pos = closed ? close + 3 : text.size();
  }
  if (out.calls.empty()) {
    std::vector<ToolCall> calls;
    if (read_calls(trim(text), true, tools, &calls)) return ParsedAnswer{"", std::move(calls)};
    return ParsedAnswer{text, {}};
  }
  out.content = trim(content);
  return out;
}
}  // namespace

ToolFormat tool_format_of(const std::string& template_source) {
  return template_source.find(kOpen) != std::string::npos ? ToolFormat::kHermes : ToolFormat::kNone;
}

ParsedAnswer parse_tool_calls(ToolFormat format, const std::string& text, const std::vector<std::string>& tools) {
  if (format != ToolFormat::kHermes) return ParsedAnswer{text, {}};
  if (text.find(kOpen) != std::string::npos) return tagged(text);
  return fenced_or_bare(text, tools);
}

Release releasable_content(ToolFormat format, const std::string& pending, bool at_start) {
  if (format != ToolFormat::kHermes) return {pending.size(), false};
  if (at_start) {
    const size_t first = pending.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return {0, false};  // only whitespace so far: wait
    if (pending[first] == '{' || pending[first] == '[') return {0, true};
  }
  size_t at = std::string::npos;
  for (const std::string& tag : {std::string(kOpen), std::string(kFence)}) at = std::min(at, pending.find(tag));
  if (at != std::string::npos) return {at, true};
  // Hold back a suffix that is a proper prefix of a tag.
  size_t keep = 0;
  for (const std::string& tag : {std::string(kOpen), std::string(kFence)}) {
    for (size_t k = std::min(pending.size(), tag.size() - 1); k > keep; --k)
      if (pending.compare(pending.size() - k, k, tag, 0, k) == 0) {
        keep = k;
        break;
      }
  }
  return {pending.size() - keep, false};
}

std::string ToolCallStream::feed(const std::string& text) {
  if (format_ == ToolFormat::kNone) return text;
  pending_ += text;
  if (in_call_) return "";
  const Release r = releasable_content(format_, pending_, !released_any_);
  in_call_ = r.call_started;
  std::string out = pending_.substr(0, r.content);
  pending_.erase(0, r.content);
  released_any_ = released_any_ || !out.empty();
  return out;
}

ParsedAnswer ToolCallStream::parse(const std::string& text, bool cut_by_length) const {
  if (format_ == ToolFormat::kNone || cut_by_length) return ParsedAnswer{text, {}};
  ParsedAnswer a = parse_tool_calls(format_, text, tools_);
  if (!parallel_ && a.calls.size() > 1) a.calls.resize(1);
  return a;
}

ParsedAnswer ToolCallStream::finish(bool cut_by_length) {
  ParsedAnswer a = in_call_ ? parse(pending_, cut_by_length) : ParsedAnswer{pending_, {}};
  pending_.clear();
  return a;
}

ParsedAnswer ToolCallStream::parse_whole(const std::string& text, bool cut_by_length) const {
  return parse(text, cut_by_length);
}


Result<std::string> forced_tool_grammar(ToolFormat format, const nlohmann::ordered_json& tools, const std::string& name,
                                        bool parallel) {
  if (format != ToolFormat::kHermes)
    return Status::error("the model's chat template has no tool-call format, so a call cannot be forced");
  auto lit = [](const std::string& s) { return nlohmann::json(s).dump(); };
  std::string rules, alts;
  int n = 0;
  for (const auto& t : tools) {
    const auto& fn = t["function"];
    const std::string fname = fn["name"].get<std::string>();
    if (name != "*" && fname != name) continue;
    const nlohmann::ordered_json params =
        fn.contains("parameters") && fn["parameters"].is_object() ? fn["parameters"] : nlohmann::ordered_json::object();
    const std::string rule = "call_" + std::to_string(n++);
    rules += rule + ": " + lit("<tool_call>\n{\"name\": " + nlohmann::json(fname).dump() + ", \"arguments\": ") +
             " %json " + params.dump() + " " + lit("}\n</tool_call>") + "\n";
    alts += (alts.empty() ? "" : " | ") + rule;
  }
  if (n == 0) return Status::error("no tool named '" + name + "'");
  // A newline may follow the last call (Qwen's models write one before ending).
  std::string start = parallel ? "start: call (\"\\n\" call)* \"\\n\"?\n" : "start: call \"\\n\"?\n";
  return start + "call: " + alts + "\n" + rules;
}

}  // namespace specula::server
