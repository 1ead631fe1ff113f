// server/openai_api.cpp — see openai_api.h.
#include "server/openai_api.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

namespace specula::server {
namespace {

using json = nlohmann::ordered_json;

}  // namespace

std::string shown(const json& v) {
  if (v.is_array()) return v.empty() ? "[]" : "an array of " + std::to_string(v.size()) + " items";
  if (v.is_object()) return v.empty() ? "{}" : "an object";
  std::string s = dump_json(v);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

namespace {

// Deepest array/object nesting accepted. nlohmann's parser and destructor are iterative,
// but copying, dumping and template rendering recurse once per level, so a body of 100k
// '[' would overflow a worker's stack.
constexpr int kMaxDepth = 64;

// Nesting depth of the JSON text (brackets outside strings), stopping past `limit`.
int nesting_depth(const std::string& body, int limit) {
  JsonBrackets brackets;
  int depth = 0, deepest = 0;
  for (char ch : body) {
    depth += brackets.step(ch);
    deepest = std::max(deepest, depth);
    if (deepest > limit) return deepest;
  }
  return deepest;
}



// Nothing requested is silently dropped: a field is read, or accepted because it asks
// nothing of the output, or refused with a 400 naming it.
// Read: the fields parse_completion_request handles (kRead*). Ignored (they change no
// token and no field of the answer): user, metadata, store, service_tier (OpenAI),
// cache_prompt (llama-server; the prompt cache is always on), id_slot, slot_id,
// timings_per_token. A field that asks for something not implemented is refused unless
// it holds its no-op value (kNoOp); any other field is refused as unknown, as OpenAI's
// own API does ("Unrecognized request argument").
const char* const kReadCommon[] = {"model", "max_tokens", "max_completion_tokens", "n", "seed", "top_k",
                                   "temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty",
                                   "repeat_penalty", "stream", "stream_options", "ignore_eos", "speculative", "stop",
                                   "logit_bias", "logprobs", "top_logprobs", "n_predict", "repeat_last_n",
                                   "xtc_probability", "xtc_threshold", "dry_multiplier", "dry_base",
                                   "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers"};
const char* const kReadCompletions[] = {"prompt", "parse_special", "echo"};
// Structured outputs (parse_constraint_fields), on both routes.
const char* const kStructured[] = {"response_format", "grammar",      "json_schema",   "regex",         "choice",
                                   "guided_json",     "guided_regex", "guided_choice", "guided_grammar"};
const char* const kReadChat[] = {"messages", "parse_special", "tools", "tool_choice", "parallel_tool_calls"};
const char* const kIgnored[] = {"user", "metadata", "store", "service_tier", "cache_prompt", "id_slot", "slot_id",
                                "timings_per_token"};

bool listed(const char* const* begin, const char* const* end, const std::string& key) {
  return std::any_of(begin, end, [&](const char* k) { return key == k; });
}

std::optional<ApiError> check_fields(const json& body, Endpoint endpoint) {
  struct NoOp {
    const char* field;
    std::function<bool(const json&)> is_noop;
    const char* why;
  };
  static const std::vector<NoOp> kNoOp = {
      {"tools", [](const json& v) { return v.is_array() && v.empty(); }, "tools apply to /v1/chat/completions"},
      {"tool_choice", [](const json& v) { return v == "none" || v == "auto"; }, "tools apply to /v1/chat/completions"},
      {"parallel_tool_calls", [](const json& v) { return v.is_boolean(); }, "must be a boolean"},
      {"functions", [](const json& v) { return v.is_array() && v.empty(); }, "function calling is not implemented yet"},
      {"function_call", [](const json& v) { return v == "none" || v == "auto"; }, "function calling is not implemented yet"},
      {"echo", [](const json& v) { return v == false; }, "echo applies to /v1/completions"},
      {"suffix", [](const json& v) { return v == "" ; }, "suffix (fill-in-the-middle) is not implemented yet"},
      {"best_of", [](const json& v) { return v == 1; }, "best_of is not implemented"},
      {"modalities", [](const json& v) { return v == json::array({"text"}); }, "only text output is supported"},
      {"typical_p", [](const json& v) { return v == 1 || v == 1.0; }, "the typical-p sampler is not implemented"},
      {"tfs_z", [](const json& v) { return v == 1 || v == 1.0; }, "tail-free sampling is not implemented"},
      {"mirostat", [](const json& v) { return v == 0; }, "mirostat is not implemented"},
      {"n_probs", [](const json& v) { return v == 0; }, "use 'logprobs' / 'top_logprobs'"},
  };
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& key = it.key();
    if (listed(std::begin(kReadCommon), std::end(kReadCommon), key) || listed(std::begin(kIgnored), std::end(kIgnored), key))
      continue;
    if (endpoint == Endpoint::kCompletions ? listed(std::begin(kReadCompletions), std::end(kReadCompletions), key)
                                           : listed(std::begin(kReadChat), std::end(kReadChat), key))
      continue;
    if (it.value().is_null()) continue;  // null: the field's default
    if (listed(std::begin(kStructured), std::end(kStructured), key)) continue;  // parse_constraint_fields
    bool known = false;
    for (const NoOp& n : kNoOp) {
      if (key != n.field) continue;
      known = true;
      if (!n.is_noop(it.value()))
        return ApiError{400, "'" + key + "' " + shown(it.value()) + ": " + n.why, "invalid_request_error", key, ""};
    }
    if (!known)
      return ApiError{400,
                      "unknown field '" + key + "' for " +
                          (endpoint == Endpoint::kCompletions ? "/v1/completions" : "/v1/chat/completions"),
                      "invalid_request_error", key, ""};
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_constraint_fields(const json& body, CompletionParams& c) {
  auto bad = [](const std::string& field, const std::string& msg) {
    return ApiError{400, msg, "invalid_request_error", field, ""};
  };
  // A schema given as an object, or as JSON text (vLLM accepts both for guided_json).
  auto schema_of = [&](const json& v, const std::string& field, std::string* out) -> std::optional<ApiError> {
    if (v.is_string()) {
      json parsed = json::parse(v.get<std::string>(), nullptr, false);
      if (parsed.is_discarded()) return bad(field, "'" + field + "' is not valid JSON");
      if (!parsed.is_object() && !parsed.is_boolean()) return bad(field, "'" + field + "' must be a JSON schema object");
      *out = parsed.dump();
      return std::nullopt;
    }
    if (!v.is_object() && !v.is_boolean()) return bad(field, "'" + field + "' must be a JSON schema object");
    *out = v.dump();
    return std::nullopt;
  };
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (!listed(std::begin(kStructured), std::end(kStructured), key) || v.is_null()) continue;
    ConstraintSpec spec;
    if (key == "response_format") {
      if (!v.is_object() || !v.contains("type") || !v["type"].is_string())
        return bad(key, "'response_format' must be an object with a 'type' (text, json_object or json_schema)");
      const std::string type = v["type"].get<std::string>();
      for (auto f = v.begin(); f != v.end(); ++f)
        if (f.key() != "type" && f.key() != "json_schema" && f.key() != "schema")
          return bad(key, "unknown field 'response_format." + f.key() + "'");
      if (type == "text") continue;
      if (type == "json_object") {
        spec.kind = ConstraintKind::kJsonObject;
        if (v.contains("schema") && !v["schema"].is_null()) {  // llama-server's form
          spec.kind = ConstraintKind::kJsonSchema;
          if (auto e = schema_of(v["schema"], "response_format.schema", &spec.text)) return e;
        }
      } else if (type == "json_schema") {
        spec.kind = ConstraintKind::kJsonSchema;
        const json* s = nullptr;
        if (v.contains("json_schema") && v["json_schema"].is_object()) {
          const json& js = v["json_schema"];
          for (auto f = js.begin(); f != js.end(); ++f)
            if (f.key() != "name" && f.key() != "schema" && f.key() != "strict" && f.key() != "description")
              return bad(key, "unknown field 'response_format.json_schema." + f.key() + "'");
          if (js.contains("strict") && !js["strict"].is_null() && !js["strict"].is_boolean())
            return bad(key, "'response_format.json_schema.strict' must be a boolean");
          if (js.contains("name") && !js["name"].is_null() && !js["name"].is_string())
            return bad(key, "'response_format.json_schema.name' must be a string");
          if (js.contains("schema")) s = &js["schema"];
        } else if (v.contains("schema")) {
          s = &v["schema"];
        }
        if (s == nullptr || s->is_null())
          return bad(key, "'response_format' of type json_schema needs 'json_schema.schema'");
        if (auto e = schema_of(*s, "response_format.json_schema.schema", &spec.text)) return e;
      } else {
        return bad(key, "'response_format.type' " + shown(v["type"]) + " must be text, json_object or json_schema");
      }
    } else if (key == "json_schema" || key == "guided_json") {
      spec.kind = ConstraintKind::kJsonSchema;
      if (auto e = schema_of(v, key, &spec.text)) return e;
    } else if (key == "regex" || key == "guided_regex") {
      if (!v.is_string() || v.get<std::string>().empty()) return bad(key, "'" + key + "' must be a non-empty string");
      spec.kind = ConstraintKind::kRegex;
      spec.text = v.get<std::string>();
    } else if (key == "choice" || key == "guided_choice") {
      if (!v.is_array() || v.empty()) return bad(key, "'" + key + "' must be a non-empty array of strings");
      spec.kind = ConstraintKind::kChoice;
      for (const json& s : v) {
        if (!s.is_string() || s.get<std::string>().empty())
          return bad(key, "'" + key + "' entries must be non-empty strings");
        spec.choices.push_back(s.get<std::string>());
      }
    } else {  // grammar, guided_grammar: GBNF
      if (!v.is_string()) return bad(key, "'" + key + "' must be a string (a GBNF grammar)");
      if (v.get<std::string>().empty()) continue;  // llama-server: an empty grammar is none
      spec.kind = ConstraintKind::kGbnf;
      spec.text = v.get<std::string>();
    }
    if (c.constraint)
      return bad(key, "'" + key + "' and '" + c.constraint_field + "' both constrain the output: give one");
    c.constraint = std::move(spec);
    c.constraint_field = key;
  }
  return std::nullopt;
}

bool flatten_text_parts(const json& content, const char* noun, std::string* out, std::string* why) {
  if (content.is_null()) return true;
  if (content.is_string()) {
    *out = content.get<std::string>();
    return true;
  }
  if (!content.is_array()) {
    *why = std::string("must be a string or an array of ") + noun + "s";
    return false;
  }
  for (const json& part : content) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      *why = std::string(noun) + "s must be objects with a 'type'";
      return false;
    }
    if (part["type"] != "text") {
      *why = std::string(noun) + " type " + shown(part["type"]) + " is not supported (text only)";
      return false;
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      *why = std::string("a text ") + noun + " needs a string 'text'";
      return false;
    }
    *out += part["text"].get<std::string>();
  }
  return true;
}

std::string string_field(const json& o, const char* key, const std::string& fallback) {
  if (!o.is_object()) return fallback;
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : fallback;
}

int JsonBrackets::step(char ch) {
  if (in_string) {
    if (escaped) escaped = false;
    else if (ch == '\\') escaped = true;
    else if (ch == '"') in_string = false;
    return 0;
  }
  if (ch == '"') in_string = true;
  return ch == '[' || ch == '{' ? 1 : ch == ']' || ch == '}' ? -1 : 0;
}

std::string dump_json(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

nlohmann::ordered_json error_body(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}};
  err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  err["code"] = e.code.empty() ? json(nullptr) : json(e.code);
  return json{{"error", err}};
}

std::variant<json, ApiError> parse_body_object(const std::string& body) {
  if (nesting_depth(body, kMaxDepth) > kMaxDepth)
    return ApiError{400, "the request body nests arrays/objects deeper than " + std::to_string(kMaxDepth) + " levels",
                    "invalid_request_error", "", ""};
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return ApiError{400, "the request body is not valid JSON", "invalid_request_error", "", ""};
  if (!j.is_object()) return ApiError{400, "the request body must be a JSON object", "invalid_request_error", "", ""};
  return j;
}

std::variant<CompletionParams, ApiError> parse_completion_request(const std::string& body, Endpoint endpoint,
                                                                  const SamplingDefaults& defaults) {
  auto parsed = parse_body_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
  if (auto e = check_fields(j, endpoint)) return *e;
  FieldReader p{j, std::nullopt};
  CompletionParams c;
  c.endpoint = endpoint;
  if (auto e = parse_constraint_fields(j, c)) return *e;
  // llama-server's defaults for fields the client leaves out.
  c.sampling.temperature = 0.8f;
  c.sampling.top_k = 40;
  c.sampling.top_p = 0.95f;
  c.sampling.min_p = 0.05f;
  defaults.apply(c.sampling);

  if (const json* m = p.get("model")) {
    if (!m->is_string()) return ApiError{400, "'model' must be a string, got " + shown(*m), "invalid_request_error", "model", ""};
    c.model = m->get<std::string>();
  }
  if (endpoint == Endpoint::kCompletions) {
    const json* pr = p.get("prompt");
    if (pr == nullptr) return ApiError{400, "'prompt' is required", "invalid_request_error", "prompt", ""};
    if (pr->is_string()) {
      c.prompt_text = pr->get<std::string>();
    } else if (pr->is_array()) {
      if (pr->empty()) return ApiError{400, "'prompt' is an empty array", "invalid_request_error", "prompt", ""};
      if ((*pr)[0].is_string()) {
        if (pr->size() != 1)
          return ApiError{400, "'prompt' with several strings (batched prompts) is not supported; send one request per prompt",
                          "invalid_request_error", "prompt", ""};
        c.prompt_text = (*pr)[0].get<std::string>();
      } else {
        c.prompt_is_ids = true;
        for (const json& t : *pr) {
          if (!t.is_number_integer())
            return ApiError{400, "'prompt' must be a string or an array of token ids (integers), found " + shown(t),
                            "invalid_request_error", "prompt", ""};
          const int64_t id = t.is_number_unsigned() && t.get<uint64_t>() > 0x7fffffffULL ? int64_t{0x7fffffff} + 1
                                                                                      : t.get<int64_t>();
          if (id < 0 || id > std::numeric_limits<int32_t>::max())
            return ApiError{400, "token id " + shown(t) + " in 'prompt' is outside the vocabulary",
                            "invalid_request_error", "prompt", ""};
          c.prompt_ids.push_back(static_cast<int32_t>(id));
        }
      }
    } else {
      return ApiError{400, "'prompt' must be a string or an array of token ids, got " + shown(*pr),
                      "invalid_request_error", "prompt", ""};
    }
  } else {
    if (const json* ps = p.get("parse_special"); ps != nullptr && *ps == true)
      return ApiError{400,
                      "'parse_special' applies to /v1/completions; chat messages are always text (only the chat "
                      "template makes control tokens)",
                      "invalid_request_error", "parse_special", ""};
    const json* ms = p.get("messages");
    if (ms == nullptr || !ms->is_array() || ms->empty())
      return ApiError{400, "'messages' must be a non-empty array", "invalid_request_error", "messages", ""};
    c.messages = json::array();
    for (size_t i = 0; i < ms->size(); ++i) {
      const json& m = (*ms)[i];
      const std::string where = "messages[" + std::to_string(i) + "]";
      if (!m.is_object()) return ApiError{400, where + " must be an object", "invalid_request_error", "messages", ""};
      if (!m.contains("role") || !m["role"].is_string())
        return ApiError{400, where + ".role must be a string", "invalid_request_error", "messages", ""};
      const std::string role = m["role"].get<std::string>();
      if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer")
        return ApiError{400, where + ".role " + shown(m["role"]) + " is not one of system, user, assistant, tool, developer",
                        "invalid_request_error", "messages", ""};
      json out = m;
      std::string text, why;
      if (!flatten_text_parts(m.contains("content") ? m["content"] : json(nullptr), "content part", &text, &why))
        return ApiError{400, where + ".content " + why, "invalid_request_error", "messages", ""};
      out["content"] = text;
      if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
        if (!m["tool_calls"].is_array())
          return ApiError{400, where + ".tool_calls must be an array", "invalid_request_error", "messages", ""};
        for (json& tc : out["tool_calls"]) {
          if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object() ||
              !tc["function"].contains("name") || !tc["function"]["name"].is_string())
            return ApiError{400, where + ".tool_calls entries need function.name", "invalid_request_error", "messages", ""};
          json& args = tc["function"]["arguments"];
          if (args.is_string()) {  // OpenAI sends JSON text; templates print an object
            json parsed = json::parse(args.get<std::string>(), nullptr, false);
            if (!parsed.is_discarded()) args = std::move(parsed);
          }
        }
      }
      c.messages.push_back(std::move(out));
    }
  }

  if (endpoint == Endpoint::kChat) {
    if (const json* t = p.get("tools")) {
      if (!t->is_array()) return ApiError{400, "'tools' must be an array", "invalid_request_error", "tools", ""};
      for (const json& tool : *t) {
        const bool ok = string_field(tool, "type") == "function" && tool.contains("function") &&
                        tool["function"].is_object() && tool["function"].contains("name") &&
                        tool["function"]["name"].is_string() &&
                        (!tool["function"].contains("parameters") || tool["function"]["parameters"].is_object());
        if (!ok)
          return ApiError{400, "'tools' entries must be {\"type\": \"function\", \"function\": {\"name\", \"parameters\"}}",
                          "invalid_request_error", "tools", ""};
      }
      if (!t->empty()) c.tools = *t;
    }
    if (const json* tc = p.get("tool_choice")) {
      if (*tc == "none") {
        c.tools = nullptr;  // the model is not told of any tool
      } else if (*tc == "required") {
        c.forced_tool = "*";
      } else if (tc->is_object() && string_field(*tc, "type") == "function" && tc->contains("function") &&
                 (*tc)["function"].is_object() && (*tc)["function"].contains("name") &&
                 (*tc)["function"]["name"].is_string()) {
        c.forced_tool = (*tc)["function"]["name"].get<std::string>();
      } else if (*tc != "auto") {
        return ApiError{400, "'tool_choice' " + shown(*tc) +
                                 " must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                        "invalid_request_error", "tool_choice", ""};
      }
    }
    p.boolean("parallel_tool_calls", &c.parallel_tool_calls);
    if (!c.forced_tool.empty()) {
      if (c.tools.is_null())
        return ApiError{400, "'tool_choice' forces a tool call but 'tools' is empty", "invalid_request_error",
                        "tool_choice", ""};
      if (c.forced_tool != "*") {
        bool found = false;
        for (const json& t : c.tools) found |= t["function"]["name"] == c.forced_tool;
        if (!found)
          return ApiError{400, "'tool_choice' names '" + c.forced_tool + "', which is not in 'tools'",
                          "invalid_request_error", "tool_choice", ""};
      }
      if (c.constraint)
        return ApiError{400, "'tool_choice' forces a tool call and '" + c.constraint_field +
                                 "' constrains the text: give one", "invalid_request_error", "tool_choice", ""};
    }
  }

  std::optional<int64_t> max_tokens, max_completion, n, seed, top_k, logprobs_n, top_logprobs, repeat_last_n;
  p.integer("repeat_last_n", -1, std::numeric_limits<int32_t>::max(), &repeat_last_n);
  if (repeat_last_n) c.sampling.repeat_last_n = static_cast<int32_t>(*repeat_last_n);
  p.integer("max_tokens", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), &max_tokens);
  if (!max_tokens) {  // llama-server's name; -1 means "until the context is full"
    std::optional<int64_t> n_predict;
    p.integer("n_predict", -1, std::numeric_limits<int32_t>::max(), &n_predict);
    if (n_predict && *n_predict >= 0) max_tokens = n_predict;
  }
  p.integer("max_completion_tokens", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(),
            &max_completion);
  p.integer("n", 1, 16, &n);
  p.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &seed);
  p.integer("top_k", -1, std::numeric_limits<int32_t>::max(), &top_k);
  p.number("temperature", 0.0, 2.0, &c.sampling.temperature);
  p.number("top_p", 0.0, 1.0, &c.sampling.top_p);
  p.number("min_p", 0.0, 1.0, &c.sampling.min_p);
  p.number("presence_penalty", -2.0, 2.0, &c.sampling.presence_penalty);
  p.number("frequency_penalty", -2.0, 2.0, &c.sampling.frequency_penalty);
  p.number("repeat_penalty", 0.0, 10.0, &c.sampling.repeat_penalty);
  // XTC and DRY, llama-server's fields and ranges (sampler.h has their semantics).
  p.number("xtc_probability", 0.0, 1.0, &c.sampling.xtc_probability);
  p.number("xtc_threshold", 0.0, 1.0, &c.sampling.xtc_threshold);
  p.number("dry_multiplier", 0.0, 1000.0, &c.sampling.dry_multiplier);
  p.number("dry_base", 0.0, 1000.0, &c.sampling.dry_base);
  std::optional<int64_t> dry_allowed, dry_last_n;
  p.integer("dry_allowed_length", 0, 1 << 20, &dry_allowed);
  p.integer("dry_penalty_last_n", -1, std::numeric_limits<int32_t>::max(), &dry_last_n);
  if (dry_allowed) c.sampling.dry_allowed_length = static_cast<int32_t>(*dry_allowed);
  if (dry_last_n) c.sampling.dry_penalty_last_n = static_cast<int32_t>(*dry_last_n);
  if (c.sampling.dry_base < 1.0f) c.sampling.dry_base = 1.75f;  // llama-server: a base below 1 means the default
  if (const json* b = p.get("dry_sequence_breakers"); b != nullptr && !b->is_null()) {
    bool ok = b->is_array() && !b->empty() && b->size() <= 64;
    std::vector<std::string> breakers;
    for (const json& x : ok ? *b : json::array()) {
      if (!x.is_string() || x.get<std::string>().empty()) {
        ok = false;
        break;
      }
      breakers.push_back(x.get<std::string>());
    }
    if (!ok)
      return ApiError{400, "'dry_sequence_breakers' must be a non-empty array (at most 64) of non-empty strings",
                      "invalid_request_error", "dry_sequence_breakers", ""};
    c.sampling.dry_sequence_breakers = std::move(breakers);
  }
  p.boolean("stream", &c.stream);
  p.boolean("ignore_eos", &c.ignore_eos);
  p.boolean("parse_special", &c.parse_special);
  if (endpoint == Endpoint::kCompletions) p.boolean("echo", &c.echo);
  p.boolean("speculative", &c.speculative);
  if (p.error) return *p.error;
  if (c.sampling.top_p <= 0.0f) {  // OpenAI: top_p 0 keeps only the most likely token (greedy)
    c.sampling.temperature = 0.0f;
    c.sampling.top_p = 1.0f;
  }
  if (c.sampling.repeat_penalty <= 0.0f)
    return ApiError{400, "'repeat_penalty' must be > 0", "invalid_request_error", "repeat_penalty", ""};
  if (n && *n > 16)
    return ApiError{400, "'n' must be in [1, 16], got " + std::to_string(*n), "invalid_request_error", "n", ""};
  if (n) c.n = static_cast<int32_t>(*n);
  if (c.echo && c.n > 1)
    return ApiError{400, "'echo' with 'n' > 1 is not supported", "invalid_request_error", "echo", ""};
  const std::optional<int64_t>& mt = max_completion ? max_completion : max_tokens;
  if (mt) {
    if (*mt <= 0)
      return ApiError{400, std::string("'") + (max_completion ? "max_completion_tokens" : "max_tokens") +
                               "' must be a positive integer, got " + std::to_string(*mt),
                      "invalid_request_error", max_completion ? "max_completion_tokens" : "max_tokens", ""};
    c.max_tokens = static_cast<int32_t>(*mt);
  }
  if (seed) {
    c.seed_given = true;
    c.sampling.seed = static_cast<uint64_t>(*seed);
  }
  if (top_k) c.sampling.top_k = static_cast<int32_t>(*top_k);

  if (const json* st = p.get("stop")) {
    if (st->is_string()) {
      if (!st->get<std::string>().empty()) c.stop.push_back(st->get<std::string>());
    } else if (st->is_array()) {
      if (st->size() > 4)
        return ApiError{400, "'stop' takes at most 4 sequences, got " + std::to_string(st->size()),
                        "invalid_request_error", "stop", ""};
      for (const json& s : *st) {
        if (!s.is_string())
          return ApiError{400, "'stop' must be a string or an array of strings, found " + shown(s),
                          "invalid_request_error", "stop", ""};
        if (!s.get<std::string>().empty()) c.stop.push_back(s.get<std::string>());
      }
    } else {
      return ApiError{400, "'stop' must be a string or an array of strings, got " + shown(*st), "invalid_request_error",
                      "stop", ""};
    }
  }
  if (const json* so = p.get("stream_options")) {
    if (!so->is_object())
      return ApiError{400, "'stream_options' must be an object", "invalid_request_error", "stream_options", ""};
    if (so->contains("include_usage") && !(*so)["include_usage"].is_null()) {
      if (!(*so)["include_usage"].is_boolean())
        return ApiError{400, "'stream_options.include_usage' must be a boolean", "invalid_request_error",
                        "stream_options", ""};
      c.include_usage = (*so)["include_usage"].get<bool>();
    }
  }
  if (const json* lb = p.get("logit_bias")) {
    auto add = [&](const json& key, const json& val) -> std::optional<ApiError> {
      int64_t id = -1;
      if (key.is_string()) {
        const std::string k = key.get<std::string>();
        size_t used = 0;
        try {
          id = std::stoll(k, &used);
        } catch (...) {
          used = 0;
        }
        if (used == 0 || used != k.size()) id = -1;
      } else if (key.is_number_integer()) {
        id = key.get<int64_t>();
      }
      if (id < 0 || id > std::numeric_limits<int32_t>::max())
        return ApiError{400, "'logit_bias' keys must be token ids, got " + shown(key), "invalid_request_error",
                        "logit_bias", ""};
      float bias = 0.0f;
      if (val.is_number() && std::isfinite(val.get<double>()) && std::fabs(val.get<double>()) <= 100.0) {
        bias = static_cast<float>(val.get<double>());
      } else if (val.is_boolean() && !val.get<bool>()) {
        bias = -std::numeric_limits<float>::infinity();  // llama-server: false bans the token
      } else {
        return ApiError{400, "'logit_bias' values must be numbers in [-100, 100], got " + shown(val),
                        "invalid_request_error", "logit_bias", ""};
      }
      c.sampling.logit_bias.push_back({static_cast<int32_t>(id), bias});
      return std::nullopt;
    };
    if (lb->is_object()) {
      for (auto it = lb->begin(); it != lb->end(); ++it)
        if (auto e = add(json(it.key()), it.value())) return *e;
    } else if (lb->is_array()) {  // llama-server's [[id, bias], ...]
      for (const json& pair : *lb) {
        if (!pair.is_array() || pair.size() != 2)
          return ApiError{400, "'logit_bias' as an array takes [token_id, bias] pairs", "invalid_request_error",
                          "logit_bias", ""};
        if (auto e = add(pair[0], pair[1])) return *e;
      }
    } else {
      return ApiError{400, "'logit_bias' must be an object of token id -> bias", "invalid_request_error", "logit_bias", ""};
    }
  }
  // logprobs: completions take an integer (alternatives per token); chat a boolean plus
  // top_logprobs.
  if (const json* lp = p.get("logprobs")) {
    if (endpoint == Endpoint::kCompletions) {
      if (lp->is_boolean()) {
        if (lp->get<bool>()) c.logprobs = 0;
      } else {
        p.integer("logprobs", 0, 20, &logprobs_n);
        if (p.error) return *p.error;
        c.logprobs = static_cast<int32_t>(*logprobs_n);
      }
    } else {
      if (!lp->is_boolean())
        return ApiError{400, "'logprobs' must be a boolean, got " + shown(*lp), "invalid_request_error", "logprobs", ""};
      if (lp->get<bool>()) c.logprobs = 0;
    }
  }
  p.integer("top_logprobs", 0, 20, &top_logprobs);
  if (p.error) return *p.error;
  if (top_logprobs) {
    if (endpoint == Endpoint::kChat && c.logprobs < 0)
      return ApiError{400, "'top_logprobs' requires 'logprobs': true", "invalid_request_error", "top_logprobs", ""};
    c.logprobs = std::max<int32_t>(c.logprobs, static_cast<int32_t>(*top_logprobs));
  }
  return c;
}

namespace {
json logprobs_completion(const std::vector<TokenLogprob>& lps, int64_t text_offset) {
  json tokens = json::array(), values = json::array(), tops = json::array(), offsets = json::array();
  int64_t off = text_offset;
  for (const TokenLogprob& t : lps) {
    tokens.push_back(t.token);
    values.push_back(t.logprob);
    json top = json::object();
    for (const auto& [tok, lp] : t.top)
      if (!top.contains(tok)) top[tok] = lp;
    tops.push_back(std::isnan(t.logprob) ? json(nullptr) : top);  // echo's first token: null, as OpenAI
    offsets.push_back(off);
    off += static_cast<int64_t>(t.token.size());
  }
  return json{{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char ch : s) b.push_back(static_cast<int>(ch));
  return b;
}

json logprobs_chat(const std::vector<TokenLogprob>& lps) {
  json content = json::array();
  for (const TokenLogprob& t : lps) {
    json top = json::array();
    for (const auto& [tok, lp] : t.top) top.push_back(json{{"token", tok}, {"logprob", lp}, {"bytes", bytes_of(tok)}});
    content.push_back(json{{"token", t.token}, {"logprob", t.logprob}, {"bytes", bytes_of(t.token)}, {"top_logprobs", top}});
  }
  return json{{"content", content}};
}

json reason(const std::string& r) { return r.empty() ? json(nullptr) : json(r); }
}  // namespace

nlohmann::ordered_json usage_json(const Usage& u) {
  json j = json{{"prompt_tokens", u.prompt_tokens},
                {"completion_tokens", u.completion_tokens},
                {"total_tokens", u.prompt_tokens + u.completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  if (u.spec_rounds > 0)
    j["speculative"] = {{"rounds", u.spec_rounds},
                        {"draft_tokens", u.drafted},
                        {"accepted_tokens", u.accepted},
                        {"acceptance_rate", u.drafted > 0 ? static_cast<double>(u.accepted) / static_cast<double>(u.drafted) : 0.0},
                        {"mean_accepted_length", static_cast<double>(u.accepted) / static_cast<double>(u.spec_rounds)}};
  return j;
}

nlohmann::ordered_json completion_response(const std::string& id, int64_t created, const std::string& model,
                                   const std::string& text, const std::vector<TokenLogprob>* logprobs,
                                   const std::string& finish_reason, const Usage& usage) {
  json choice = {{"index", 0}, {"text", text}, {"finish_reason", reason(finish_reason)}};
  choice["logprobs"] = logprobs ? logprobs_completion(*logprobs, 0) : json(nullptr);
  return json{{"id", id},           {"object", "text_completion"}, {"created", created}, {"model", model},
              {"choices", {choice}}, {"usage", usage_json(usage)}};
}

nlohmann::ordered_json completion_chunk(const std::string& id, int64_t created, const std::string& model,
                                const std::string& text, const std::vector<TokenLogprob>* logprobs,
                                int64_t text_offset, const std::string& finish_reason) {
  json choice = {{"index", 0}, {"text", text}, {"finish_reason", reason(finish_reason)}};
  choice["logprobs"] = logprobs ? logprobs_completion(*logprobs, text_offset) : json(nullptr);
  return json{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model}, {"choices", {choice}}};
}

nlohmann::ordered_json chat_response(const std::string& id, int64_t created, const std::string& model,
                             const std::string& content, const std::vector<TokenLogprob>* logprobs,
                             const std::string& finish_reason, const Usage& usage) {
  json choice = {{"index", 0},
                 {"message", {{"role", "assistant"}, {"content", content}}},
                 {"finish_reason", reason(finish_reason)}};
  choice["logprobs"] = logprobs ? logprobs_chat(*logprobs) : json(nullptr);
  return json{{"id", id},           {"object", "chat.completion"}, {"created", created}, {"model", model},
              {"choices", {choice}}, {"usage", usage_json(usage)}};
}

nlohmann::ordered_json chat_chunk(const std::string& id, int64_t created, const std::string& model,
                          const std::string* content, bool delta_role, const std::vector<TokenLogprob>* logprobs,
                          const std::string& finish_reason) {
  json delta = json::object();
  if (delta_role) delta["role"] = "assistant";
  if (content) delta["content"] = *content;
  json choice = {{"index", 0}, {"delta", delta}, {"finish_reason", reason(finish_reason)}};
  choice["logprobs"] = logprobs ? logprobs_chat(*logprobs) : json(nullptr);
  return json{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model}, {"choices", {choice}}};
}

nlohmann::ordered_json usage_chunk(const std::string& id, int64_t created, const std::string& model, Endpoint endpoint,
                           const Usage& usage) {
  return json{{"id", id},
              {"object", endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", json::array()},
              {"usage", usage_json(usage)}};
}

}  // namespace specula::server
