// chat/tool_calls.cpp — see tool_calls.h.
#include "chat/tool_calls.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/json_text.h"

namespace specula::chat {

namespace {
using json = nlohmann::ordered_json;

constexpr const char* kOpen = "<tool_call>";
constexpr const char* kClose = "</tool_call>";
constexpr const char* kFence = "```";
constexpr const char* kMistral = "[TOOL_CALLS]";
constexpr const char* kMistralArgs = "[ARGS]";
constexpr const char* kPythonTag = "<|python_tag|>";

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

// The arguments object of a call ({} when absent; a JSON string holding an object is read
// as that object); null when they are not an object. Llama 3 names them "parameters".
json args_object(const json& j) {
  const char* key = j.contains("arguments") ? "arguments" : j.contains("parameters") ? "parameters" : nullptr;
  if (key == nullptr) return json::object();
  const json& a = j[key];
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
  return (j.contains("arguments") || j.contains("parameters")) &&
         std::find(tools.begin(), tools.end(), j["name"].get<std::string>()) != tools.end();
}

// The position of the bracket closing the JSON object/array that opens at s[pos]
// (strings skipped), or npos when it does not close.
size_t json_close(const std::string& s, size_t pos) {
  JsonBrackets brackets;
  int depth = 0;
  for (size_t end = pos; end < s.size(); ++end) {
    depth += brackets.step(s[end]);
    if (depth == 0) return end;
  }
  return std::string::npos;
}

// The top-level JSON values of a text holding one or more of them separated by
// whitespace (models list several calls as consecutive objects); empty when it is not
// such a text.
std::vector<json> json_values(const std::string& s) {
  std::vector<json> out;
  size_t pos = s.find_first_not_of(" \t\r\n");
  while (pos != std::string::npos) {
    if (s[pos] != '{' && s[pos] != '[') return {};
    const size_t end = json_close(s, pos);
    if (end == std::string::npos) return {};
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
// Llama 3: the whole answer is calls ({"name", "parameters"} objects, after an optional
// <|python_tag|>, separated by whitespace or ";"), each naming a tool; else it is text.
ParsedAnswer llama3_calls(const std::string& text, const std::vector<std::string>& tools) {
  std::string s = trim(text);
  if (s.rfind(kPythonTag, 0) == 0) s = trim(s.substr(std::string(kPythonTag).size()));
  std::string joined;
  JsonBrackets brackets;
  int depth = 0;
  for (char ch : s) {  // ";" between top-level objects is a separator
    const int before = depth;
    depth += brackets.step(ch);
    joined += (ch == ';' && before == 0 && depth == 0) ? ' ' : ch;
  }
  std::vector<ToolCall> calls;
  if (read_calls(joined, true, tools, &calls)) return ParsedAnswer{"", std::move(calls)};
  return ParsedAnswer{text, {}};
}

// Mistral: content, then [TOOL_CALLS] and either a JSON array of calls or name[ARGS]{...}
// repeated (each [TOOL_CALLS]-prefixed or not).
ParsedAnswer mistral_calls(const std::string& text, const std::vector<std::string>& tools) {
  const size_t at = text.find(kMistral);
  if (at == std::string::npos) {
    // [TOOL_CALLS] is a control token in Mistral's vocabularies: its text is not in the
    // answer. A bare array of calls naming the request's tools is calls.
    std::vector<ToolCall> calls;
    const std::string t = trim(text);
    if (!t.empty() && t[0] == '[' && read_calls(t, true, tools, &calls)) return ParsedAnswer{"", std::move(calls)};
    return ParsedAnswer{text, {}};
  }
  ParsedAnswer out;
  out.content = trim(text.substr(0, at));
  std::string rest = text.substr(at);
  // Drop every marker; what is left is "[...]" / "{...}" JSON, or name[ARGS]{...} runs.
  std::string body;
  for (size_t pos = 0;;) {
    const size_t m = rest.find(kMistral, pos);
    body += rest.substr(pos, m == std::string::npos ? std::string::npos : m - pos);
    if (m == std::string::npos) break;
    body += ' ';
    pos = m + std::string(kMistral).size();
  }
  if (body.find(kMistralArgs) == std::string::npos) {
    if (!read_calls(body, false, {}, &out.calls)) return ParsedAnswer{text, {}};
    return out;
  }
  size_t pos = 0;
  for (;;) {
    const size_t first = body.find_first_not_of(" \t\r\n", pos);
    if (first == std::string::npos) break;
    const size_t a = body.find(kMistralArgs, first);
    if (a == std::string::npos) return ParsedAnswer{text, {}};
    const std::string name = trim(body.substr(first, a - first));
    size_t j = a + std::string(kMistralArgs).size();
    if (name.empty() || j >= body.size() || body[j] != '{') return ParsedAnswer{text, {}};
    const size_t end = json_close(body, j);
    if (end == std::string::npos) return ParsedAnswer{text, {}};
    json args = json::parse(body.substr(j, end + 1 - j), nullptr, false);
    if (!args.is_object()) return ParsedAnswer{text, {}};
    out.calls.push_back({name, args.dump(-1, ' ', false, json::error_handler_t::replace)});
    pos = end + 1;
  }
  if (out.calls.empty()) return ParsedAnswer{text, {}};
  return out;
}

// Tags that may start a call, per format.
std::vector<std::string> call_tags(ToolFormat format) {
  switch (format) {
    case ToolFormat::kHermes: return {kOpen, kFence};
    case ToolFormat::kLlama3Json: return {kPythonTag};
    case ToolFormat::kMistral: return {kMistral};
    case ToolFormat::kNone: break;
  }
  return {};
}
}  // namespace

ToolFormat tool_format_of(const std::string& template_source) {
  if (template_source.find(kOpen) != std::string::npos) return ToolFormat::kHermes;
  if (template_source.find(kMistral) != std::string::npos) return ToolFormat::kMistral;
  if (template_source.find("<|start_header_id|>") != std::string::npos &&
      template_source.find("\"parameters\"") != std::string::npos && template_source.find("tools") != std::string::npos)
    return ToolFormat::kLlama3Json;
  return ToolFormat::kNone;
}

ParsedAnswer parse_tool_calls(ToolFormat format, const std::string& text, const std::vector<std::string>& tools) {
  switch (format) {
    case ToolFormat::kHermes:
      if (text.find(kOpen) != std::string::npos) return tagged(text);
      return fenced_or_bare(text, tools);
    case ToolFormat::kLlama3Json: return llama3_calls(text, tools);
    case ToolFormat::kMistral: return mistral_calls(text, tools);
    case ToolFormat::kNone: break;
  }
  return ParsedAnswer{text, {}};
}

Release releasable_content(ToolFormat format, const std::string& pending, bool at_start) {
  if (format == ToolFormat::kNone) return {pending.size(), false};
  if (format == ToolFormat::kLlama3Json) {
    // A Llama 3 answer is either all calls or all text: hold it while it could be a call.
    if (at_start) {
      const size_t first = pending.find_first_not_of(" \t\r\n");
      if (first == std::string::npos) return {0, false};
      if (pending[first] == '{' || pending.compare(first, std::string(kPythonTag).size(), kPythonTag) == 0 ||
          std::string(kPythonTag).compare(0, pending.size() - first, pending, first) == 0)
        return {0, true};
    }
    return {pending.size(), false};
  }
  if (at_start) {
    const size_t first = pending.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return {0, false};  // only whitespace so far: wait
    if (pending[first] == '{' || pending[first] == '[') return {0, true};
  }
  if (format == ToolFormat::kMistral && at_start) {
    const size_t first = pending.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return {0, false};
    if (pending[first] == '[' && pending.compare(first, std::string(kMistral).size(), kMistral) != 0 &&
        std::string(kMistral).compare(0, std::min(pending.size() - first, std::string(kMistral).size()), pending, first,
                                      std::string::npos) != 0)
      return {0, true};  // a bare call array (the marker was a control token)
  }
  const std::vector<std::string> tags = call_tags(format);
  size_t at = std::string::npos;
  for (const std::string& tag : tags) at = std::min(at, pending.find(tag));
  if (at != std::string::npos) return {at, true};
  // Hold back a suffix that is a proper prefix of a tag.
  size_t keep = 0;
  for (const std::string& tag : tags) {
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
                                        bool parallel, const std::string& mistral_marker) {
  if (format == ToolFormat::kNone)
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
    const std::string fname_json = nlohmann::json(fname).dump();
    if (format == ToolFormat::kHermes) {
      rules += rule + ": " + lit("<tool_call>\n{\"name\": " + fname_json + ", \"arguments\": ") + " %json " +
               params.dump() + " " + lit("}\n</tool_call>") + "\n";
    } else {
      const char* key = format == ToolFormat::kLlama3Json ? "parameters" : "arguments";
      rules += rule + ": " + lit("{\"name\": " + fname_json + ", \"" + key + "\": ") + " %json " + params.dump() + " " +
               lit("}") + "\n";
    }
    alts += (alts.empty() ? "" : " | ") + rule;
  }
  if (n == 0) return Status::error("no tool named '" + name + "'");
  std::string start;
  if (format == ToolFormat::kHermes) {
    // A newline may follow the last call (Qwen's models write one before ending).
    start = parallel ? "start: call (\"\\n\" call)* \"\\n\"?\n" : "start: call \"\\n\"?\n";
  } else if (format == ToolFormat::kLlama3Json) {
    start = parallel ? "start: call (\"; \" call)*\n" : "start: call\n";
  } else {
    // [TOOL_CALLS] [{...}, {...}] (Mistral v3's tool-call text, with its space).
    start = "start: " + mistral_marker + (parallel ? " \" [\" call (\", \" call)* \"]\"\n" : " \" [\" call \"]\"\n");
  }
  return start + "call: " + alts + "\n" + rules;
}

}  // namespace specula::chat
