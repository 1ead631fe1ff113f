// server/anthropic_api.cpp — see anthropic_api.h.
#include "server/anthropic_api.h"

#include <algorithm>
#include <limits>

#include "server/engine_request.h"
#include "server/generation.h"
#include "server/openai_api.h"
#include "server/routes.h"
#include "server/sampling_fields.h"

namespace specula::server {

using json = nlohmann::ordered_json;

namespace {

// Text of an Anthropic content value (a string, or text blocks).
bool flatten_blocks(const json& content, std::string* out, std::string* why) {
  if (content.is_null()) {
    *why = "must be a string or an array of content blocks";
    return false;
  }
  return flatten_text_parts(content, "content block", out, why);
}

ApiError bad(const std::string& param, const std::string& message) { return bad_request(param, message); }

}  // namespace

namespace {

// Read, or ignored because they change no token of the answer (cache_control: the prompt
// cache works on its own; inference_geo, speed, service_tier, metadata and the account
// fields: this server has one place, one speed and no accounts); anything else refused.
std::optional<ApiError> check_fields(const json& j) {
  static const char* const kRead[] = {"model",          "max_tokens",   "messages",      "system",
                                      "stop_sequences", "stream",       "metadata",      "service_tier",
                                      "cache_control",  "inference_geo", "speed",        "user_profile_id",
                                      "workspace_id"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (v.is_null() || std::any_of(std::begin(kRead), std::end(kRead), [&](const char* k) { return key == k; }) ||
        is_sampling_key(key, SamplingApi::kAnthropic))
      continue;
    if (key == "thinking") continue;  // read_thinking
    if (key == "tools" || key == "tool_choice") continue;  // read_tools
    if (key == "output_config" && v.is_object()) {  // effort: read_thinking; format: read_output_format
      bool ok = true;
      for (auto f = v.begin(); f != v.end(); ++f)
        ok = ok && (f.key() == "effort" || f.key() == "format" || f.value().is_null());
      if (ok) continue;
      return bad(key, "unknown field in 'output_config' (effort and format are read)");
    }
    if (key == "mcp_servers" || key == "container" || key == "diagnostics")
      return bad(key, "'" + key + "' is not implemented yet");
    return bad(key, "unknown field '" + key + "' for /v1/messages");
  }
  return std::nullopt;
}

// Extended thinking: thinking {"type": "enabled", "budget_tokens": N} (the thinking budget),
// {"type": "disabled"} (the template is asked not to think, and a block the model opens
// anyway is closed at once), {"type": "adaptive"} (the model decides); output_config.effort
// (low, medium, high, max) as a budget when thinking gives none.
std::optional<ApiError> read_thinking(const json& j, CompletionParams& c) {
  if (j.contains("output_config") && j["output_config"].is_object() && j["output_config"].contains("effort") &&
      !j["output_config"]["effort"].is_null()) {
    const json& e = j["output_config"]["effort"];
    auto b = e == "max" ? std::optional<int64_t>(-1) : reasoning_effort_budget(e);
    if (!b || e == "none" || e == "minimal" || e == "xhigh")
      return bad("output_config", "'output_config.effort' " + shown(e) + " must be \"low\", \"medium\", \"high\" or \"max\"");
    c.thinking_budget = *b;
    c.thinking_budget_field = "output_config.effort";
  }
  if (!j.contains("thinking") || j["thinking"].is_null()) return std::nullopt;
  const json& t = j["thinking"];
  const std::string type = string_field(t, "type");
  if (!t.is_object() || (type != "enabled" && type != "disabled" && type != "adaptive"))
    return bad("thinking", "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N}, {\"type\": \"disabled\"} or "
                           "{\"type\": \"adaptive\"}");
  for (auto it = t.begin(); it != t.end(); ++it)
    if (it.key() != "type" && it.key() != "budget_tokens" && it.key() != "display")
      return bad("thinking", "unknown field 'thinking." + it.key() + "'");
  if (type == "disabled") {
    if (!c.template_kwargs.is_object()) c.template_kwargs = json::object();
    c.template_kwargs["enable_thinking"] = false;
    c.thinking_budget = 0;
    c.thinking_budget_field = "thinking";
  } else if (type == "enabled") {
    const json& b = t.contains("budget_tokens") ? t["budget_tokens"] : json(nullptr);
    if (!b.is_number_integer() || b.get<int64_t>() < 0 || b.get<int64_t>() > std::numeric_limits<int32_t>::max())
      return bad("thinking", "'thinking.budget_tokens' must be a non-negative integer, got " + shown(b));
    c.thinking_budget = b.get<int64_t>();
    c.thinking_budget_field = "thinking.budget_tokens";
  }
  return std::nullopt;
}

// Structured outputs: output_config.format {"type": "json_schema", "schema": {...}}.
std::optional<ApiError> read_output_format(const json& j, CompletionParams& c) {
  if (!j.contains("output_config") || !j["output_config"].is_object() || !j["output_config"].contains("format") ||
      j["output_config"]["format"].is_null())
    return std::nullopt;
  const json& f = j["output_config"]["format"];
  if (!f.is_object() || string_field(f, "type") != "json_schema" || !f.contains("schema") || !f["schema"].is_object())
    return bad("output_config", "'output_config.format' must be {\"type\": \"json_schema\", \"schema\": {...}}");
  for (auto it = f.begin(); it != f.end(); ++it)
    if (it.key() != "type" && it.key() != "schema")
      return bad("output_config", "unknown field 'output_config.format." + it.key() + "'");
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kJsonSchema;
  spec.text = f["schema"].dump();
  c.constraint = std::move(spec);
  c.constraint_field = "output_config";
  return std::nullopt;
}

// Tools: Anthropic's {name, description, input_schema} as the chat template's
// {"type": "function", "function": {name, description, parameters}}; and tool_choice.
std::optional<ApiError> read_tools(FieldReader& p, CompletionParams& c) {
  if (const json* tools = p.get("tools")) {
    if (!tools->is_array()) return bad("tools", "'tools' must be an array");
    json out = json::array();
    for (const json& t : *tools) {
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string() ||
          (t.contains("type") && t["type"] != "custom") ||
          (t.contains("input_schema") && !t["input_schema"].is_object()))
        return bad("tools", "'tools' entries must be client tools {name, description, input_schema} (server tools "
                            "are not implemented)");
      json fn = {{"name", t["name"]}};  // OpenAI's order: name, description, parameters
      if (t.contains("description")) fn["description"] = t["description"];
      fn["parameters"] = t.contains("input_schema") ? t["input_schema"] : json::object();
      out.push_back({{"type", "function"}, {"function", fn}});
    }
    if (!out.empty()) c.tools = std::move(out);
  }
  const json* tc = p.get("tool_choice");
  if (tc == nullptr) return std::nullopt;
  const std::string type = string_field(*tc, "type");
  if (tc->is_object() && tc->contains("disable_parallel_tool_use")) {
    if (!(*tc)["disable_parallel_tool_use"].is_boolean())
      return bad("tool_choice", "'tool_choice.disable_parallel_tool_use' must be a boolean");
    c.parallel_tool_calls = !(*tc)["disable_parallel_tool_use"].get<bool>();
  }
  if (type == "none") {
    c.tools = nullptr;
  } else if (type == "any") {
    c.forced_tool = "*";
  } else if (type == "tool" && tc->contains("name") && (*tc)["name"].is_string()) {
    c.forced_tool = (*tc)["name"].get<std::string>();
  } else if (type != "auto") {
    return bad("tool_choice", "'tool_choice' " + shown(*tc) +
                                  " must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\": ...}");
  }
  if (c.forced_tool.empty()) return std::nullopt;
  if (c.tools.is_null()) return bad("tool_choice", "'tool_choice' forces a tool call but 'tools' is empty");
  bool found = c.forced_tool == "*";
  for (const json& t : c.tools) found |= t["function"]["name"] == c.forced_tool;
  if (!found) return bad("tool_choice", "'tool_choice' names '" + c.forced_tool + "', which is not in 'tools'");
  if (c.constraint)
    return bad("tool_choice", "'tool_choice' forces a tool call and 'output_config.format' constrains the text: give one");
  return std::nullopt;
}

// One message's content blocks: tool_result blocks (user) become tool messages before the
// text; tool_use blocks (assistant) become the turn's tool_calls; the rest is its text.
std::optional<ApiError> read_blocks(const json& msg, const std::string& where, CompletionParams& c, std::string* text,
                                    json* calls, bool* only_results, std::string* reasoning) {
  std::string why;
  json text_blocks = json::array();
  for (const json& b : msg["content"]) {
    const std::string type = string_field(b, "type");
    if (type == "tool_result" && msg["role"] == "user") {
      std::string result;
      const json rc = b.contains("content") && !b["content"].is_null() ? b["content"] : json("");
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string() || !flatten_blocks(rc, &result, &why))
        return bad("messages",
                   where + ": a tool_result needs a tool_use_id and text content" + (why.empty() ? "" : " (" + why + ")"));
      // A failed tool's result says so (the template has no field for it).
      if (b.contains("is_error") && b["is_error"] == true) result = "Error: " + result;
      c.messages.push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", result}});
    } else if ((type == "thinking" || type == "redacted_thinking") && msg["role"] == "assistant") {
      // An earlier turn's thinking: the template's reasoning_content (redacted: nothing to show).
      if (type == "thinking") {
        if (!b.contains("thinking") || !b["thinking"].is_string())
          return bad("messages", where + ": a thinking block needs its 'thinking' text");
        *reasoning += b["thinking"].get<std::string>();
      }
    } else if (type == "tool_use" && msg["role"] == "assistant") {
      if (!b.contains("id") || !b.contains("name") || !b["name"].is_string() || !b.contains("input") ||
          !b["input"].is_object())
        return bad("messages", where + ": a tool_use block needs id, name and an input object");
      calls->push_back({{"id", b["id"]}, {"type", "function"}, {"function", {{"name", b["name"]}, {"arguments", b["input"]}}}});
    } else {
      text_blocks.push_back(b);
    }
  }
  if (!flatten_blocks(text_blocks, text, &why)) return bad("messages", where + ".content " + why);
  *only_results = text_blocks.empty() && calls->empty() && reasoning->empty();
  return std::nullopt;
}

// system, then the messages as OpenAI-style messages.
std::optional<ApiError> read_messages(FieldReader& p, CompletionParams& c, bool count_tokens) {
  if (const json* sys = p.get("system")) {
    std::string text, why;
    if (!flatten_blocks(*sys, &text, &why)) return bad("system", "'system' " + why);
    if (!text.empty()) c.messages.push_back({{"role", "system"}, {"content", text}});
  }
  const json* ms = p.get("messages");
  if (ms == nullptr || !ms->is_array() || ms->empty()) return bad("messages", "'messages' must be a non-empty array");
  for (size_t i = 0; i < ms->size(); ++i) {
    const json& msg = (*ms)[i];
    const std::string where = "messages." + std::to_string(i);
    if (!msg.is_object()) return bad("messages", where + " must be an object");
    if (!msg.contains("role") || !(msg["role"] == "user" || msg["role"] == "assistant"))
      return bad("messages", where + ".role must be \"user\" or \"assistant\"");
    if (!msg.contains("content")) return bad("messages", where + ".content is required");
    std::string text, why, reasoning;
    json calls = json::array();
    if (msg["content"].is_array()) {
      bool only_results = false;
      if (auto e = read_blocks(msg, where, c, &text, &calls, &only_results, &reasoning)) return e;
      if (only_results) continue;
    } else if (!flatten_blocks(msg["content"], &text, &why)) {
      return bad("messages", where + ".content " + why);
    }
    json m = {{"role", msg["role"]}, {"content", text}};
    if (!calls.empty()) m["tool_calls"] = std::move(calls);
    if (!reasoning.empty()) m["reasoning_content"] = std::move(reasoning);
    c.messages.push_back(std::move(m));
  }
  // A final assistant message is a prefill the answer must continue; chat templates close
  // the turn instead. Refused until continuation is implemented.
  if (!count_tokens && !c.messages.empty() && c.messages.back()["role"] == "assistant")
    return bad("messages", "a final assistant message (prefill) is not supported yet");
  return std::nullopt;
}

// max_tokens (required), stream, the sampling fields, stop_sequences.
std::optional<ApiError> read_generation(const json& j, FieldReader& p, CompletionParams& c) {
  std::optional<int64_t> max_tokens;
  p.integer("max_tokens", 1, std::numeric_limits<int32_t>::max(), &max_tokens);
  p.boolean("stream", &c.stream);
  if (p.error) return p.error;
  if (auto e = read_sampling_fields(j, SamplingApi::kAnthropic, &c.sampling, &c.seed_given)) return e;
  normalize_request_sampling(c.sampling);  // top_p 0: nothing but the most likely token
  if (!max_tokens) return bad("max_tokens", "'max_tokens' is required");
  c.max_tokens = static_cast<int32_t>(*max_tokens);
  if (const json* st = p.get("stop_sequences")) {
    if (!st->is_array() || st->size() > 16)
      return bad("stop_sequences", "'stop_sequences' must be an array of at most 16 strings");
    for (const json& s : *st) {
      if (!s.is_string()) return bad("stop_sequences", "'stop_sequences' must hold strings, found " + shown(s));
      if (!s.get<std::string>().empty()) c.stop.push_back(s.get<std::string>());
    }
  }
  return std::nullopt;
}

}  // namespace

std::variant<CompletionParams, ApiError> parse_messages_request(const std::string& body, bool count_tokens) {
  auto parsed = parse_body_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
  if (auto e = check_fields(j)) return *e;
  FieldReader p{j, std::nullopt};
  CompletionParams c;
  c.endpoint = Endpoint::kChat;
  if (auto e = read_output_format(j, c)) return *e;
  if (auto e = read_thinking(j, c)) return *e;
  // Anthropic's defaults: temperature 1.0 and no truncation of the distribution.
  c.sampling = api_default_sampling(SamplingApi::kAnthropic);
  const json* m = p.get("model");
  if (m == nullptr || !m->is_string()) return bad("model", "'model' must be a string");
  c.model = m->get<std::string>();
  c.messages = json::array();
  if (auto e = read_tools(p, c)) return *e;
  if (auto e = read_messages(p, c, count_tokens)) return *e;
  if (count_tokens) return c;
  if (auto e = read_generation(j, p, c)) return *e;
  return c;
}

std::string anthropic_stop_reason(const std::string& finish_reason, const std::string& stop_sequence) {
  if (finish_reason == "length") return "max_tokens";
  return stop_sequence.empty() ? "end_turn" : "stop_sequence";
}

json anthropic_tool_use(const std::string& message_id, size_t k, const chat::ToolCall& call, bool with_input) {
  json input = json::object();
  if (with_input) {
    input = json::parse(call.arguments, nullptr, false);
    if (!input.is_object()) input = json::object();
  }
  return json{{"type", "tool_use"},
              {"id", "toolu_" + message_id + "_" + std::to_string(k)},
              {"name", call.name},
              {"input", input}};
}

json anthropic_message(const std::string& id, const std::string& model, const std::string& text,
                       const std::vector<chat::ToolCall>& calls, const std::string& stop_reason,
                       const std::string& stop_sequence, const AnthropicUsage& usage) {
  json content = json::array();
  if (!text.empty() || calls.empty()) content.push_back({{"type", "text"}, {"text", text}});
  for (size_t k = 0; k < calls.size(); ++k) content.push_back(anthropic_tool_use(id, k, calls[k], true));
  return json{{"id", id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", model},
              {"content", content},
              {"stop_reason", stop_reason.empty() ? json(nullptr) : json(stop_reason)},
              {"stop_sequence", stop_sequence.empty() ? json(nullptr) : json(stop_sequence)},
              {"usage",
               {{"input_tokens", usage.input_tokens},
                {"output_tokens", usage.output_tokens},
                {"cache_creation_input_tokens", 0},
                {"cache_read_input_tokens", usage.cache_read_input_tokens}}}};
}

std::string anthropic_event(const json& data) {
  return "event: " + string_field(data, "type", "message") + "\ndata: " + dump_json(data) + "\n\n";
}

// ---------------------------------------------------------------- AnthropicFormat

namespace {
std::string stop_reason(const CompletionStream::Update& u, const chat::ParsedAnswer& a) {
  return a.calls.empty() ? anthropic_stop_reason(u.finish_reason, u.stop_sequence) : "tool_use";
}
AnthropicUsage usage(const RequestSummary& s) {
  return AnthropicUsage{s.n_prompt - s.cached_tokens, s.n_generated, s.cached_tokens};
}
}  // namespace

json AnthropicFormat::whole(const std::string& text, const std::vector<TokenLogprob>&, const CompletionStream::Update& u) {
  const chat::SplitAnswer split = split_whole(text);
  const chat::ParsedAnswer a = calls_.parse_whole(split.content, u.summary.outcome == Outcome::kLength);
  json msg = anthropic_message(g_.id, g_.model, a.content, a.calls, stop_reason(u, a), u.stop_sequence, usage(u.summary));
  if (!split.reasoning.empty()) {  // (an empty block is none: a stream sends none either)
    // The thinking first, as Claude's extended thinking answers (no signature: nothing here
    // checks one when the block comes back).
    msg["content"].insert(msg["content"].begin(), json{{"type", "thinking"}, {"thinking", split.reasoning}, {"signature", ""}});
    // A thinking-only answer has no empty text block.
    if (a.content.empty() && a.calls.empty() && msg["content"].size() == 2) msg["content"].erase(1);
  }
  return msg;
}

std::string AnthropicFormat::thinking_delta(const std::string& thinking) {
  if (thinking.empty()) return "";
  std::string out;
  if (!thinking_open_) {
    thinking_open_ = true;
    out += anthropic_event({{"type", "content_block_start"},
                            {"index", index_},
                            {"content_block", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}}});
  }
  return out + anthropic_event({{"type", "content_block_delta"},
                                {"index", index_},
                                {"delta", {{"type", "thinking_delta"}, {"thinking", thinking}}}});
}

std::string AnthropicFormat::close_thinking() {
  if (!thinking_open_) return "";
  thinking_open_ = false;
  std::string out = anthropic_event(
      {{"type", "content_block_delta"}, {"index", index_}, {"delta", {{"type", "signature_delta"}, {"signature", ""}}}});
  out += anthropic_event({{"type", "content_block_stop"}, {"index", index_++}});
  return out;
}

std::string AnthropicFormat::stream_start() {
  json msg = anthropic_message(g_.id, g_.model, "", {}, "", "", AnthropicUsage{g_.n_prompt, 0, 0});
  msg["content"] = json::array();
  return anthropic_event({{"type", "message_start"}, {"message", msg}}) + anthropic_event({{"type", "ping"}});
}

std::string AnthropicFormat::stream_piece(const CompletionStream::Update& u) {
  const chat::SplitAnswer split = reasoning_.feed(u.text);
  std::string out = thinking_delta(split.reasoning);
  const std::string content = calls_.feed(split.content);
  if (!content.empty()) out += close_thinking();
  return out + text_delta(content);
}

std::string AnthropicFormat::stream_end(const CompletionStream::Update& u) {
  if (u.summary.outcome == Outcome::kFailed || u.summary.outcome == Outcome::kCancelled)
    return anthropic_event(anthropic_error_body(generation_error(u, g_.params)));
  const chat::SplitAnswer split = reasoning_.finish();
  std::string out = thinking_delta(split.reasoning);
  std::string content = calls_.feed(split.content);
  const chat::ParsedAnswer a = calls_.finish(u.summary.outcome == Outcome::kLength);
  content += a.content;
  const bool had_thinking = thinking_open_ || index_ > 0;
  out += close_thinking();
  out += text_delta(content);
  // An empty answer is an empty text block (a thinking-only one has none).
  if (!text_open_ && a.calls.empty() && !had_thinking) out += text_delta("", true);
  if (text_open_) out += anthropic_event({{"type", "content_block_stop"}, {"index", index_++}});
  for (size_t k = 0; k < a.calls.size(); ++k) {
    out += anthropic_event({{"type", "content_block_start"}, {"index", index_},
                            {"content_block", anthropic_tool_use(g_.id, k, a.calls[k], false)}});
    out += anthropic_event({{"type", "content_block_delta"}, {"index", index_},
                            {"delta", {{"type", "input_json_delta"}, {"partial_json", a.calls[k].arguments}}}});
    out += anthropic_event({{"type", "content_block_stop"}, {"index", index_++}});
  }
  const AnthropicUsage us = usage(u.summary);
  return out + anthropic_event({{"type", "message_delta"},
                                {"delta",
                                 {{"stop_reason", stop_reason(u, a)},
                                  {"stop_sequence", u.stop_sequence.empty() ? json(nullptr) : json(u.stop_sequence)}}},
                                {"usage",
                                 {{"output_tokens", us.output_tokens},
                                  {"input_tokens", us.input_tokens},
                                  {"cache_read_input_tokens", us.cache_read_input_tokens}}}}) +
         anthropic_event({{"type", "message_stop"}});
}

std::string AnthropicFormat::text_delta(const std::string& text, bool open_even_if_empty) {
  if (text.empty() && !open_even_if_empty) return "";
  std::string out;
  if (!text_open_) {
    text_open_ = true;
    out += anthropic_event(
        {{"type", "content_block_start"}, {"index", index_}, {"content_block", {{"type", "text"}, {"text", ""}}}});
  }
  if (!text.empty())
    out += anthropic_event(
        {{"type", "content_block_delta"}, {"index", index_}, {"delta", {{"type", "text_delta"}, {"text", text}}}});
  return out;
}

}  // namespace specula::server

namespace specula::server {

void handle_messages(ServedModel& served, const http::Request& req, http::Exchange& ex, bool count_tokens,
                     GenerationLog* log) {
  AnthropicFormat fmt;
  auto parsed = parse_messages_request(req.body, count_tokens);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, fmt, *e);
  const CompletionParams& c = std::get<CompletionParams>(parsed);
  if (!count_tokens) return run_generation(served, c, ex, fmt, log);
  std::vector<int32_t> ids;
  if (auto e = build_prompt(served, c, &ids)) return send_error(ex, fmt, *e);
  send_json(ex, json{{"input_tokens", ids.size()}});
}

}  // namespace specula::server
