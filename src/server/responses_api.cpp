// server/responses_api.cpp — see responses_api.h.
#include "server/responses_api.h"

#include <algorithm>
#include <set>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "server/engine_request.h"
#include "server/generation.h"
#include "server/json_util.h"
#include "server/openai_api.h"
#include "server/sampling_fields.h"

namespace specula::server {

using json = nlohmann::ordered_json;

namespace {

// Fields read (besides the OpenAI sampling fields), ignored (they change no token), and
// accepted only at their no-op value.
const char* const kRead[] = {"model",          "input",         "instructions",      "tools",    "tool_choice",
                             "parallel_tool_calls", "text",     "max_output_tokens", "stream",   "store",
                             "previous_response_id", "reasoning", "metadata",        "user",     "chat_template_kwargs"};
const char* const kIgnored[] = {"service_tier", "prompt_cache_key", "safety_identifier", "prompt_cache_retention",
                                "stream_options"};

bool listed(const char* const* b, const char* const* e, const std::string& k) {
  return std::any_of(b, e, [&](const char* x) { return k == x; });
}

std::optional<ApiError> check_fields(const json& j) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (v.is_null() || listed(std::begin(kRead), std::end(kRead), key) ||
        listed(std::begin(kIgnored), std::end(kIgnored), key) || is_sampling_key(key, SamplingApi::kOpenAi))
      continue;
    if (key == "background") {
      if (v == false) continue;
      return bad_request(key, "'background' responses are not supported; send the request and wait for it");
    }
    if (key == "truncation") {
      if (v == "disabled") continue;
      return bad_request(key, "'truncation' " + shown(v) + ": only \"disabled\" is supported (a request that does not "
                                                           "fit the context is refused)");
    }
    if (key == "include") {
      if (v.is_array() && std::all_of(v.begin(), v.end(), [](const json& x) {
            return x == "reasoning.encrypted_content" || x == "message.output_text.logprobs";
          }))
        continue;
      return bad_request(key, "'include' " + shown(v) + " asks for outputs this server does not produce");
    }
    if (key == "top_logprobs") {
      if (v == 0) continue;
      return bad_request(key, "'top_logprobs' is not supported on /v1/responses yet");
    }
    if (key == "max_tool_calls") return bad_request(key, "'max_tool_calls' is not supported");
    if (key == "conversation" || key == "prompt")
      return bad_request(key, "'" + key + "' objects are not supported; use previous_response_id");
    return bad_request(key, "unknown field '" + key + "' for /v1/responses");
  }
  return std::nullopt;
}

// A message's content as text: a string, or input_text / output_text / text parts
// (json_util.h), and refusal parts of an assistant's earlier answer when `refusals`.
bool content_text(const json& content, std::string* out, std::string* why, bool refusals = false) {
  if (refusals && content.is_array()) {  // (a refusal's text is the turn's text)
    json parts = content;
    for (json& p : parts)
      if (string_field(p, "type") == "refusal" && p.contains("refusal")) p = {{"type", "text"}, {"text", p["refusal"]}};
    return flatten_text_parts(parts, "content part", out, why, "", {"input_text", "output_text", "text"});
  }
  return flatten_text_parts(content, "content part", out, why, "", {"input_text", "output_text", "text"});
}

json parse_arguments(const json& args) {
  if (args.is_string()) {
    json parsed = json::parse(args.get<std::string>(), nullptr, false);
    if (!parsed.is_discarded()) return parsed;
  }
  return args;
}

// A float setting as a client wrote it (0.8, not 0.800000011920929).
double as_sent(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.7g", static_cast<double>(v));
  return std::strtod(buf, nullptr);
}

// o[key] when o is an object that has it, else null (never throws).
json field_or_null(const json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  auto it = o.find(key);
  return it == o.end() ? json(nullptr) : *it;
}

}  // namespace

std::variant<json, ApiError> items_to_messages(const json& items, const std::string& instructions) {
  json messages = json::array();
  if (!instructions.empty()) messages.push_back({{"role", "system"}, {"content", instructions}});
  std::string pending_reasoning;
  std::set<std::string> calls_seen;  // function_call ids so far (an output must answer one)
  // The assistant turn function calls join: the last message when it is an assistant turn
  // that nothing followed.
  auto assistant_turn = [&]() -> json& {
    if (messages.empty() || messages.back()["role"] != "assistant") {
      messages.push_back({{"role", "assistant"}, {"content", ""}});
      if (!pending_reasoning.empty()) messages.back()["reasoning_content"] = std::move(pending_reasoning);
      pending_reasoning.clear();
    }
    return messages.back();
  };
  for (size_t i = 0; i < items.size(); ++i) {
    const json& it = items[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (!it.is_object()) return bad_request("input", where + " must be an object");
    std::string type = string_field(it, "type");
    if (type.empty() && it.contains("role")) type = "message";
    if (type == "message") {
      const std::string role = string_field(it, "role");
      if (role != "user" && role != "system" && role != "developer" && role != "assistant")
        return bad_request("input", where + ".role " + shown(field_or_null(it, "role")) +
                                        " must be user, system, developer or assistant");
      std::string text, why;
      if (!it.contains("content") || !content_text(it["content"], &text, &why, role == "assistant"))
        return bad_request("input", where + ".content " + (why.empty() ? "is required" : why));
      json m = {{"role", role}, {"content", text}};
      if (role == "assistant" && !pending_reasoning.empty()) {
        m["reasoning_content"] = std::move(pending_reasoning);
        pending_reasoning.clear();
      }
      messages.push_back(std::move(m));
    } else if (type == "function_call") {
      if (!it.contains("call_id") || !it["call_id"].is_string() || !it.contains("name") || !it["name"].is_string() ||
          !it.contains("arguments") || !it["arguments"].is_string())
        return bad_request("input", where + ": a function_call item needs call_id, name and arguments (strings)");
      calls_seen.insert(it["call_id"].get<std::string>());
      json& turn = assistant_turn();
      if (!turn.contains("tool_calls")) turn["tool_calls"] = json::array();
      turn["tool_calls"].push_back({{"id", it["call_id"]},
                                    {"type", "function"},
                                    {"function", {{"name", it["name"]}, {"arguments", parse_arguments(it["arguments"])}}}});
    } else if (type == "function_call_output") {
      if (!it.contains("call_id") || !it["call_id"].is_string() || !it.contains("output"))
        return bad_request("input", where + ": a function_call_output item needs call_id and output");
      if (!calls_seen.count(it["call_id"].get<std::string>()))
        return bad_request("input", where + ".call_id " + shown(it["call_id"]) +
                                        " answers no function_call of the conversation (its own, or the previous "
                                        "response's)");
      std::string text, why;
      if (!content_text(it["output"], &text, &why)) return bad_request("input", where + ".output " + why);
      messages.push_back({{"role", "tool"}, {"tool_call_id", it["call_id"]}, {"content", text}});
    } else if (type == "reasoning") {
      // An earlier answer's thinking: the next assistant turn's reasoning_content.
      std::string text;
      for (const char* key : {"content", "summary"}) {
        if (!it.contains(key) || !it[key].is_array()) continue;
        for (const json& part : it[key])
          if (part.contains("text") && part["text"].is_string()) text += part["text"].get<std::string>();
        if (!text.empty()) break;
      }
      pending_reasoning += text;
    } else if (type == "item_reference") {
      return bad_request("input", where + ": item_reference items are not supported; use previous_response_id");
    } else {
      return bad_request("input", where + ".type " + shown(field_or_null(it, "type")) +
                                      " is not one of message, function_call, function_call_output, reasoning");
    }
  }
  return messages;
}

std::variant<ResponsesRequest, ApiError> parse_responses_request(const std::string& body, ResponseStore& store,
                                                                 const std::string& model,
                                                                 const SamplingDefaults& defaults) {
  auto parsed = parse_body_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
  if (auto e = check_fields(j)) return *e;
  FieldReader p{j, std::nullopt};
  ResponsesRequest r;
  CompletionParams& c = r.params;
  c.endpoint = Endpoint::kChat;
  c.sampling = api_default_sampling(SamplingApi::kOpenAi);
  defaults.apply(c.sampling);
  if (const json* m = p.get("model")) {
    if (!m->is_string()) return bad_request("model", "'model' must be a string, got " + shown(*m));
    c.model = m->get<std::string>();
  }
  if (auto e = read_sampling_fields(j, SamplingApi::kOpenAi, &c.sampling, &c.seed_given, &c.text_bias)) return *e;
  normalize_request_sampling(c.sampling);
  std::optional<int64_t> max_out;
  p.integer("max_output_tokens", 1, std::numeric_limits<int32_t>::max(), &max_out);
  p.boolean("stream", &c.stream);
  p.boolean("store", &r.store);
  p.boolean("parallel_tool_calls", &c.parallel_tool_calls);
  if (p.error) return *p.error;
  if (max_out) {
    c.max_tokens = static_cast<int32_t>(*max_out);
    c.max_tokens_field = "max_output_tokens";
  }
  std::string instructions;
  if (const json* ins = p.get("instructions")) {
    if (!ins->is_string()) return bad_request("instructions", "'instructions' must be a string");
    instructions = ins->get<std::string>();
  }
  if (const json* md = p.get("metadata")) {
    if (!md->is_object() || md->size() > 16 ||
        !std::all_of(md->begin(), md->end(), [](const json& v) { return v.is_string(); }))
      return bad_request("metadata", "'metadata' must be an object of at most 16 string values");
  }
  if (const json* kw = p.get("chat_template_kwargs")) {
    if (!kw->is_object()) return bad_request("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    c.template_kwargs = *kw;
  }
  // reasoning: {"effort", "summary"} — the effort is a thinking budget.
  if (const json* rs = p.get("reasoning")) {
    if (!rs->is_object()) return bad_request("reasoning", "'reasoning' must be an object");
    for (auto it = rs->begin(); it != rs->end(); ++it)
      if (it.key() != "effort" && it.key() != "summary" && it.key() != "generate_summary")
        return bad_request("reasoning", "unknown field 'reasoning." + it.key() + "'");
    if (rs->contains("effort") && !(*rs)["effort"].is_null()) {
      auto b = reasoning_effort_budget((*rs)["effort"]);
      if (!b)
        return bad_request("reasoning", "'reasoning.effort' " + shown((*rs)["effort"]) + " must be one of " + kReasoningEfforts);
      c.thinking_budget = *b;
      c.thinking_budget_field = "reasoning.effort";
    }
  }
  // text.format: the structured output.
  if (const json* t = p.get("text")) {
    if (!t->is_object()) return bad_request("text", "'text' must be an object");
    for (auto it = t->begin(); it != t->end(); ++it) {
      if (it.key() == "verbosity" && (it.value().is_null() || it.value() == "medium")) continue;
      if (it.key() != "format") return bad_request("text", "'text." + it.key() + "' is not supported");
    }
    if (t->contains("format") && !(*t)["format"].is_null()) {
      const json& f = (*t)["format"];
      if (!f.is_object())
        return bad_request("text", "'text.format' must be an object: {\"type\": \"text\"}, {\"type\": \"json_object\"} "
                                   "or {\"type\": \"json_schema\", \"name\", \"schema\"}, got " + shown(f));
      const std::string type = string_field(f, "type");
      if (type == "json_schema") {
        if (!f.contains("schema") || !(f["schema"].is_object() || f["schema"].is_boolean()))
          return bad_request("text", "'text.format' of type json_schema needs a 'schema' object");
        for (auto it = f.begin(); it != f.end(); ++it)
          if (it.key() != "type" && it.key() != "schema" && it.key() != "name" && it.key() != "strict" &&
              it.key() != "description")
            return bad_request("text", "unknown field 'text.format." + it.key() + "'");
        c.constraint = ConstraintSpec{ConstraintKind::kJsonSchema, f["schema"].dump(), {}, false};
        c.constraint_field = "text";
      } else if (type == "json_object") {
        c.constraint = ConstraintSpec{ConstraintKind::kJsonObject, "", {}, false};
        c.constraint_field = "text";
      } else if (type != "text") {
        return bad_request("text", "'text.format.type' " + shown(field_or_null(f, "type")) +
                                       " must be text, json_object or json_schema");
      }
    }
  }
  // tools (function tools) and tool_choice.
  if (const json* ts = p.get("tools")) {
    if (!ts->is_array()) return bad_request("tools", "'tools' must be an array");
    json tools = json::array();
    for (size_t i = 0; i < ts->size(); ++i) {
      const json& t = (*ts)[i];
      const std::string type = string_field(t, "type");
      if (type != "function")
        return bad_request("tools", "tools[" + std::to_string(i) + "].type " + shown(field_or_null(t, "type")) +
                                        " is not supported (function tools only)");
      if (t.contains("function") && !t.contains("name"))
        return bad_request("tools", "tools[" + std::to_string(i) + "] is in chat's shape ({\"function\": {...}}); "
                                    "Responses tools are flat: {\"type\": \"function\", \"name\", \"description\", "
                                    "\"parameters\"}");
      if (!t.contains("name") || !t["name"].is_string() || (t.contains("parameters") && !t["parameters"].is_null() &&
                                                            !t["parameters"].is_object()))
        return bad_request("tools", "tools[" + std::to_string(i) + "] needs a name (and parameters as an object)");
      json fn = {{"name", t["name"]}};
      if (t.contains("description") && t["description"].is_string()) fn["description"] = t["description"];
      fn["parameters"] = t.contains("parameters") && t["parameters"].is_object() ? t["parameters"] : json::object();
      tools.push_back({{"type", "function"}, {"function", fn}});
    }
    if (!tools.empty()) c.tools = tools;
  }
  if (const json* tc = p.get("tool_choice")) {
    if (*tc == "none") {
      c.tools = nullptr;
    } else if (*tc == "required") {
      c.forced_tool = "*";
    } else if (tc->is_object() && string_field(*tc, "type") == "function" && tc->contains("name") &&
               (*tc)["name"].is_string()) {
      c.forced_tool = (*tc)["name"].get<std::string>();
    } else if (*tc != "auto") {
      return bad_request("tool_choice", "'tool_choice' " + shown(*tc) +
                                            " must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}");
    }
    if (!c.forced_tool.empty()) {
      if (c.tools.is_null()) return bad_request("tool_choice", "'tool_choice' forces a tool call but 'tools' is empty");
      bool found = c.forced_tool == "*";
      for (const json& t : c.tools) found = found || t["function"]["name"] == c.forced_tool;
      if (!found) return bad_request("tool_choice", "'tool_choice' names '" + c.forced_tool + "', which is not in 'tools'");
      if (c.constraint)
        return bad_request("tool_choice", "'tool_choice' forces a tool call and 'text.format' constrains the text: give one");
    }
  }
  // The conversation: the stored one, then this request's items.
  if (const json* prev = p.get("previous_response_id")) {
    if (!prev->is_string()) return bad_request("previous_response_id", "'previous_response_id' must be a string");
    r.previous_response_id = prev->get<std::string>();
    if (r.previous_response_id.rfind("resp_", 0) != 0)
      return bad_request("previous_response_id", "'previous_response_id' " + shown(*prev) +
                                                     " is not a response id (they start with resp_)");
    StoredResponse stored;
    switch (store.get(r.previous_response_id, &stored)) {
      case ResponseStore::Lookup::kNotFound:
        return api_error(StatusCode::kNotFound,
                         "previous response '" + r.previous_response_id + "' not found (it was never stored, or deleted)",
                         "previous_response_id", "previous_response_not_found");
      case ResponseStore::Lookup::kEvicted:
        return api_error(StatusCode::kInvalidArgument,
                         "previous response '" + r.previous_response_id +
                             "' was evicted from the response store (it holds the most recent --responses-max); send the "
                             "whole conversation as input instead",
                         "previous_response_id", "previous_response_evicted");
      case ResponseStore::Lookup::kFound:
        break;
    }
    if (string_field(stored.response, "status") == "in_progress")
      return bad_request("previous_response_id", "previous response '" + r.previous_response_id +
                                                     "' is still in progress; wait for it to finish");
    if (stored.model != model)
      return bad_request("previous_response_id", "previous response '" + r.previous_response_id + "' belongs to model '" +
                                                     stored.model + "', not '" + model + "'");
    r.history = std::move(stored.conversation);
  }
  if (!r.history.is_array()) r.history = json::array();
  const json* in = p.get("input");
  if (in == nullptr) return bad_request("input", "'input' is required (a string or an array of items)");
  if (in->is_string()) {
    r.input = json::array({{{"type", "message"}, {"role", "user"}, {"content", {{{"type", "input_text"}, {"text", *in}}}}}});
  } else if (in->is_array()) {
    r.input = *in;
  } else {
    return bad_request("input", "'input' must be a string or an array of items, got " + shown(*in));
  }
  json all = r.history;
  for (const json& it : r.input) all.push_back(it);
  auto msgs = items_to_messages(all, instructions);
  if (auto* e = std::get_if<ApiError>(&msgs)) {
    // Errors in the new items are numbered as the client sent them.
    ApiError err = *e;
    if (!r.history.empty()) err.message += " (counting the " + std::to_string(r.history.size()) + " items of the previous response first)";
    return err;
  }
  c.messages = std::get<json>(msgs);
  if (c.messages.empty()) return bad_request("input", "'input' holds no message");
  // What the Response object repeats.
  r.echo = {{"instructions", instructions.empty() ? json(nullptr) : json(instructions)},
            {"max_output_tokens", max_out ? json(*max_out) : json(nullptr)},
            {"metadata", j.contains("metadata") && j["metadata"].is_object() ? j["metadata"] : json::object()},
            {"parallel_tool_calls", c.parallel_tool_calls},
            {"previous_response_id", r.previous_response_id.empty() ? json(nullptr) : json(r.previous_response_id)},
            {"reasoning", j.contains("reasoning") && j["reasoning"].is_object()
                              ? json{{"effort", field_or_null(j["reasoning"], "effort")},
                                     {"summary", field_or_null(j["reasoning"], "summary")}}
                              : json{{"effort", nullptr}, {"summary", nullptr}}},
            {"store", r.store},
            {"temperature", as_sent(c.sampling.temperature)},
            {"text", j.contains("text") && j["text"].is_object() && j["text"].contains("format")
                         ? json{{"format", j["text"]["format"]}}
                         : json{{"format", {{"type", "text"}}}}},
            {"tool_choice", j.contains("tool_choice") && !j["tool_choice"].is_null() ? j["tool_choice"] : json("auto")},
            {"tools", j.contains("tools") && j["tools"].is_array() ? j["tools"] : json::array()},
            {"top_p", as_sent(c.sampling.top_p)},
            {"truncation", "disabled"},
            {"user", j.contains("user") && j["user"].is_string() ? j["user"] : json(nullptr)}};
  return r;
}

// ---------------------------------------------------------------- ResponsesFormat

ResponsesFormat::ResponsesFormat(const ResponsesRequest& request, ResponseStore& store)
    : req_(request), store_(store), id_(ResponseStore::new_id("resp_")), created_(unix_now()) {}

json ResponsesFormat::in_progress_object(const std::string& model) const {
  json o = response_object("in_progress", json::array());
  o["model"] = model;
  return o;
}

json ResponsesFormat::response_object(const std::string& status, const json& output) const {
  json o = {{"id", id_},
            {"object", "response"},
            {"created_at", created_},
            {"status", status},
            {"background", false},
            {"error", nullptr},
            {"incomplete_details", nullptr}};
  for (auto it = req_.echo.begin(); it != req_.echo.end(); ++it) o[it.key()] = it.value();
  o["model"] = g_.model;
  o["output"] = output;
  o["usage"] = nullptr;
  return o;
}

std::string ResponsesFormat::event(const std::string& type, json data) {
  json e = {{"type", type}, {"sequence_number", seq_++}};
  for (auto it = data.begin(); it != data.end(); ++it) e[it.key()] = it.value();
  return "event: " + type + "\ndata: " + dump_json(e) + "\n\n";
}

json ResponsesFormat::function_call_item(const chat::ToolCall& call, size_t k) const {
  (void)k;
  return json{{"id", ResponseStore::new_id("fc_")},     {"type", "function_call"}, {"status", "completed"},
              {"call_id", ResponseStore::new_id("call_")}, {"name", call.name},      {"arguments", call.arguments}};
}

namespace {
json reasoning_item(const std::string& id, const std::string& text, const std::string& status) {
  json content = json::array();
  content.push_back({{"type", "reasoning_text"}, {"text", text}});
  return json{{"id", id}, {"type", "reasoning"}, {"summary", json::array()}, {"content", content}, {"status", status}};
}
json output_text_part(const std::string& text) {
  return json{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
}
// A message item; its content part unless it is only beginning (in_progress).
json message_item(const std::string& id, const std::string& text, const std::string& status) {
  json content = json::array();
  if (status != "in_progress") content.push_back(output_text_part(text));
  return json{{"id", id}, {"type", "message"}, {"status", status}, {"role", "assistant"}, {"content", content}};
}
}  // namespace

json ResponsesFormat::finish(const CompletionStream::Update& u, std::string* status) {
  *status = u.summary.outcome == Outcome::kLength ? "incomplete" : "completed";
  json resp = response_object(*status, done_items_);
  if (*status == "incomplete") resp["incomplete_details"] = {{"reason", "max_output_tokens"}};
  const int64_t rt = std::max<int64_t>(0, reasoning_tokens());
  resp["usage"] = {{"input_tokens", u.summary.n_prompt},
                   {"input_tokens_details", {{"cached_tokens", u.summary.cached_tokens}}},
                   {"output_tokens", u.summary.n_generated},
                   {"output_tokens_details", {{"reasoning_tokens", rt}}},
                   {"total_tokens", u.summary.n_prompt + u.summary.n_generated}};
  finished_ = true;
  if (req_.store) {
    StoredResponse s;
    s.id = id_;
    s.model = g_.model;
    s.response = resp;
    s.conversation = req_.history;
    for (const json& it : req_.input) s.conversation.push_back(it);
    for (const json& it : done_items_) s.conversation.push_back(it);
    store_.replace(std::move(s));  // (not when it was deleted while it ran)
  }
  return resp;
}

json ResponsesFormat::whole(const std::string& text, const std::vector<TokenLogprob>&, const CompletionStream::Update& u) {
  const chat::SplitAnswer split = split_whole(text);
  const chat::ParsedAnswer a = calls_.parse_whole(split.content, u.summary.outcome == Outcome::kLength);
  // Items: the reasoning (when there was any), a message (its text; or empty when the
  // answer is nothing else), the calls; an answer cut by max_output_tokens has its last
  // item incomplete (the reasoning, when it was cut while thinking).
  const bool cut = u.summary.outcome == Outcome::kLength;
  const bool has_reasoning = !split.reasoning.empty();
  const bool message = !a.content.empty() || (a.calls.empty() && !has_reasoning);
  done_items_ = json::array();
  if (has_reasoning)
    done_items_.push_back(reasoning_item(ResponseStore::new_id("rs_"), split.reasoning,
                                         cut && !message && a.calls.empty() ? "incomplete" : "completed"));
  if (message)
    done_items_.push_back(message_item(ResponseStore::new_id("msg_"), a.content, cut ? "incomplete" : "completed"));
  for (size_t k = 0; k < a.calls.size(); ++k) done_items_.push_back(function_call_item(a.calls[k], k));
  std::string status;
  return finish(u, &status);
}

std::string ResponsesFormat::stream_start() {
  const json r = response_object("in_progress", json::array());
  // (one statement each: the operands of + are evaluated in no fixed order)
  std::string out = event("response.created", {{"response", r}});
  out += event("response.in_progress", {{"response", r}});
  return out;
}

std::string ResponsesFormat::reasoning_delta(const std::string& text) {
  if (text.empty()) return "";
  std::string out;
  if (!reasoning_open_) {
    reasoning_open_ = true;
    reasoning_id_ = ResponseStore::new_id("rs_");
    reasoning_index_ = output_index_++;
    json item = reasoning_item(reasoning_id_, "", "in_progress");
    item["content"] = json::array();
    out += event("response.output_item.added", {{"output_index", reasoning_index_}, {"item", item}});
    out += event("response.content_part.added", {{"item_id", reasoning_id_},
                                                 {"output_index", reasoning_index_},
                                                 {"content_index", 0},
                                                 {"part", {{"type", "reasoning_text"}, {"text", ""}}}});
  }
  reasoning_text_ += text;
  return out + event("response.reasoning_text.delta",
                     {{"item_id", reasoning_id_}, {"output_index", reasoning_index_}, {"content_index", 0}, {"delta", text}});
}

std::string ResponsesFormat::close_reasoning(const std::string& status) {
  if (!reasoning_open_) return "";
  reasoning_open_ = false;
  const json item = reasoning_item(reasoning_id_, reasoning_text_, status);
  done_items_.push_back(item);
  std::string out = event("response.reasoning_text.done", {{"item_id", reasoning_id_},
                                                           {"output_index", reasoning_index_},
                                                           {"content_index", 0},
                                                           {"text", reasoning_text_}});
  out += event("response.content_part.done", {{"item_id", reasoning_id_},
                                              {"output_index", reasoning_index_},
                                              {"content_index", 0},
                                              {"part", {{"type", "reasoning_text"}, {"text", reasoning_text_}}}});
  out += event("response.output_item.done", {{"output_index", reasoning_index_}, {"item", item}});
  return out;
}

std::string ResponsesFormat::text_delta(const std::string& text) {
  std::string out;
  if (!message_open_) {
    message_open_ = true;
    message_id_ = ResponseStore::new_id("msg_");
    message_index_ = output_index_++;
    out += event("response.output_item.added",
                 {{"output_index", message_index_}, {"item", message_item(message_id_, "", "in_progress")}});
    out += event("response.content_part.added", {{"item_id", message_id_},
                                                 {"output_index", message_index_},
                                                 {"content_index", 0},
                                                 {"part", output_text_part("")}});
  }
  if (text.empty()) return out;
  message_text_ += text;
  return out + event("response.output_text.delta", {{"item_id", message_id_},
                                                    {"output_index", message_index_},
                                                    {"content_index", 0},
                                                    {"delta", text},
                                                    {"logprobs", json::array()}});
}

std::string ResponsesFormat::close_message(const std::string& status) {
  if (!message_open_) return "";
  message_open_ = false;
  json item = message_item(message_id_, message_text_, status);
  done_items_.push_back(item);
  std::string out = event("response.output_text.done", {{"item_id", message_id_},
                                                         {"output_index", message_index_},
                                                         {"content_index", 0},
                                                         {"text", message_text_},
                                                         {"logprobs", json::array()}});
  out += event("response.content_part.done", {{"item_id", message_id_},
                                              {"output_index", message_index_},
                                              {"content_index", 0},
                                              {"part", output_text_part(message_text_)}});
  out += event("response.output_item.done", {{"output_index", message_index_}, {"item", item}});
  return out;
}

std::string ResponsesFormat::stream_piece(const CompletionStream::Update& u) {
  const chat::SplitAnswer split = reasoning_.feed(u.text);
  std::string out = reasoning_delta(split.reasoning);
  const std::string content = calls_.feed(split.content);
  if (!content.empty()) {
    out += close_reasoning();
    out += text_delta(content);
  }
  return out;
}

std::string ResponsesFormat::stream_end(const CompletionStream::Update& u) {
  if (u.summary.outcome == Outcome::kFailed || u.summary.outcome == Outcome::kCancelled) {
    const ApiError e = generation_error(u, g_.params);
    json r = response_object("failed", done_items_);
    const std::string code = e.api_code.empty() ? (http_status(e) < 500 ? "invalid_request" : "server_error") : e.api_code;
    r["error"] = {{"code", code}, {"message", e.message}};
    // An `error` event (what went wrong), then the response as it ended.
    std::string out = event("error", {{"code", code}, {"message", e.message}, {"param", e.param.empty() ? json(nullptr) : json(e.param)}});
    out += event("response.failed", {{"response", r}});
    return out;
  }
  const bool cut = u.summary.outcome == Outcome::kLength;
  const chat::SplitAnswer split = reasoning_.finish();
  std::string out = reasoning_delta(split.reasoning);
  std::string content = calls_.feed(split.content);
  const chat::ParsedAnswer a = calls_.finish(cut);
  content += a.content;
  // As whole(): a message when there is text, or nothing else; the last item cut.
  const bool message = message_open_ || !content.empty() || (a.calls.empty() && reasoning_index_ < 0);
  out += close_reasoning(cut && !message && a.calls.empty() ? "incomplete" : "completed");
  if (message) {
    out += text_delta(content);
    out += close_message(cut ? "incomplete" : "completed");
  }
  for (size_t k = 0; k < a.calls.size(); ++k) {
    json item = function_call_item(a.calls[k], k);
    const int index = output_index_++;
    json added = item;
    added["status"] = "in_progress";
    added["arguments"] = "";
    out += event("response.output_item.added", {{"output_index", index}, {"item", added}});
    out += event("response.function_call_arguments.delta",
                 {{"item_id", item["id"]}, {"output_index", index}, {"delta", a.calls[k].arguments}});
    out += event("response.function_call_arguments.done",
                 {{"item_id", item["id"]}, {"output_index", index}, {"arguments", a.calls[k].arguments}});
    out += event("response.output_item.done", {{"output_index", index}, {"item", item}});
    done_items_.push_back(std::move(item));
  }
  std::string status;
  json resp = finish(u, &status);
  return out + event(status == "completed" ? "response.completed" : "response.incomplete", {{"response", resp}});
}

// ---------------------------------------------------------------- routes

void handle_responses(ServedModel& served, const http::Request& req, http::Exchange& ex, GenerationLog* log) {
  ResponseStore& store = served.responses();
  auto parsed = parse_responses_request(req.body, store, served.id(), served.sampling_defaults());
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  const ResponsesRequest& r = std::get<ResponsesRequest>(parsed);
  ResponsesFormat fmt(r, store);
  // Stored from the start as in_progress, in memory only (GET shows it, DELETE may remove
  // it); the answer replaces it (and writes its file); a generation that ends without one
  // (refused, failed, its client gone) takes it out again.
  if (r.store) {
    StoredResponse s;
    s.id = fmt.response_id();
    s.model = served.id();
    s.response = fmt.in_progress_object(served.id());
    s.conversation = r.history;
    for (const json& it : r.input) s.conversation.push_back(it);
    store.put(std::move(s), /*persist=*/false);
  }
  struct Unregister {  // (also when run_generation throws)
    ResponseStore& store;
    const ResponsesFormat& fmt;
    bool on;
    ~Unregister() {
      if (on && !fmt.finished()) store.remove(fmt.response_id());
    }
  } unregister{store, fmt, r.store};
  run_generation(served, r.params, ex, fmt, log);
}

bool is_response_item_path(const std::string& path) {
  const std::string prefix = "/v1/responses/";
  return path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0;
}

void handle_response_item(ResponseStore& store, const http::Request& req, http::Exchange& ex) {
  std::string rest = req.path.substr(std::string("/v1/responses/").size());
  std::string action;
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    action = rest.substr(slash + 1);
    rest.resize(slash);
  }
  const std::string& id = rest;
  auto method_error = [&] {
    ApiError e = bad_request("", "method " + req.method + " not allowed on " + req.path);
    e.http_override = 405;
    send_error(ex, e);
  };
  if (!action.empty() && action != "cancel" && action != "input_items")
    return send_error(ex, api_error(StatusCode::kNotFound, "no route for " + req.method + " " + req.path));
  StoredResponse s;
  const ResponseStore::Lookup found = store.get(id, &s);
  if (found != ResponseStore::Lookup::kFound)
    return send_error(ex, api_error(StatusCode::kNotFound,
                                    "response '" + id + "' not found" +
                                        (found == ResponseStore::Lookup::kEvicted ? " (evicted from the response store)" : ""),
                                    "response_id"));
  if (action.empty()) {
    if (req.method == "GET") return send_json(ex, s.response);
    if (req.method == "DELETE") {
      store.remove(id);
      return send_json(ex, json{{"id", id}, {"object", "response"}, {"deleted", true}});
    }
    return method_error();
  }
  if (action == "cancel") {
    if (req.method != "POST") return method_error();
    // Only background responses can be cancelled (a running one belongs to the request
    // that started it, which cancels it by going away).
    return send_error(ex, bad_request("response_id", "response '" + id + "' is " + string_field(s.response, "status", "done") +
                                                         "; only background responses can be cancelled"));
  }
  if (req.method != "GET") return method_error();
  // input_items: the items this response was given (its history included), newest first
  // unless ?order=asc.
  json items = json::array();
  const size_t n_out = s.response.contains("output") && s.response["output"].is_array() ? s.response["output"].size() : 0;
  const size_t n_in = s.conversation.size() >= n_out ? s.conversation.size() - n_out : 0;
  for (size_t i = 0; i < n_in; ++i) {
    json it = s.conversation[i];
    if (!it.contains("id")) it["id"] = id + "_in_" + std::to_string(i);
    items.push_back(std::move(it));
  }
  if (req.target.find("order=asc") == std::string::npos) std::reverse(items.begin(), items.end());
  json body = {{"object", "list"},
               {"data", items},
               {"first_id", items.empty() ? json(nullptr) : items.front()["id"]},
               {"last_id", items.empty() ? json(nullptr) : items.back()["id"]},
               {"has_more", false}};
  send_json(ex, body);
}

}  // namespace specula::server
