// server/openai_api.cpp — see openai_api.h.
#include "server/openai_api.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "server/generation.h"
#include "server/llama_api.h"
#include "server/routes.h"
#include "server/sampling_fields.h"

namespace specula::server {
namespace {

using json = nlohmann::ordered_json;

// Nothing requested is silently dropped: a field is read, or accepted because it asks
// nothing of the output, or refused with a 400 naming it.
// Read: the sampling fields (sampling/params.h's table) and the fields below (kRead*).
// Ignored (they change no token and no field of the answer): user, metadata, store,
// service_tier (OpenAI); cache_prompt (the prompt cache is always on), id_slot, slot_id
// (rows are not pinned), timings_per_token (timings come with the last chunk), verbose
// (a debug copy of the answer), return_progress (no prompt-progress events are sent),
// n_keep / n_discard (they only matter when llama-server shifts a full context, which
// specula never does: a full context ends the answer), sse_ping_interval, the
// speculative.* settings and backend_sampling (speculation is lossless and sampling runs
// where it runs: neither changes a token) — llama-server's; chat_template, reasoning_effort
// when null. A field that asks for something not implemented is refused unless it holds
// its no-op value (kNoOp); any other field is refused as unknown, as OpenAI's own API does
// ("Unrecognized request argument"). docs/API.md lists the policy.
const char* const kReadCommon[] = {"model", "lora", "max_tokens", "max_completion_tokens", "n", "stream", "stream_options",
                                   "ignore_eos", "speculative", "stop", "logprobs", "top_logprobs", "n_predict",
                                   "n_probs", "return_tokens", "verbose", "return_progress", "timings_per_token",
                                   "post_sampling_probs"};
const char* const kReadCompletions[] = {"prompt", "parse_special", "echo"};
const char* const kReadNative[] = {"response_fields"};
// Structured outputs (parse_constraint_fields), on both routes.
const char* const kStructured[] = {"response_format", "grammar",      "json_schema",   "regex",         "choice",
                                   "guided_json",     "guided_regex", "guided_choice", "guided_grammar"};
const char* const kReadChat[] = {"messages",           "parse_special",         "tools",
                                 "tool_choice",        "parallel_tool_calls",   "chat_template_kwargs",
                                 "add_generation_prompt", "continue_final_message", "reasoning_format",
                                 "thinking_budget_tokens", "reasoning_effort"};
const char* const kIgnored[] = {"user",          "metadata",         "store",           "service_tier",
                                "cache_prompt",  "id_slot",          "slot_id",         "n_keep",          "n_discard",
                                "sse_ping_interval", "backend_sampling", "speculative.n_max", "speculative.n_min",
                                "speculative.p_min", "speculative.type", "speculative.ngram_size_n",
                                "speculative.ngram_size_m", "speculative.ngram_min_hits", "mirostat_tau",
                                "mirostat_eta",  "dynatemp_exponent"};

bool listed(const char* const* begin, const char* const* end, const std::string& key) {
  return std::any_of(begin, end, [&](const char* k) { return key == k; });
}

bool is_zero(const json& v) { return v.is_number() && v.get<double>() == 0.0; }
bool is_empty_array(const json& v) { return v.is_array() && v.empty(); }

std::optional<ApiError> check_fields(const json& body, Endpoint endpoint, bool native) {
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
      {"suffix", [](const json& v) { return v == "" ; }, "use /infill for fill-in-the-middle"},
      {"best_of", [](const json& v) { return v == 1; }, "best_of is not implemented"},
      {"modalities", [](const json& v) { return v == json::array({"text"}); }, "only text output is supported"},
      {"typical_p", [](const json& v) { return v == 1 || v == 1.0; }, "the typical-p sampler is not implemented"},
      {"tfs_z", [](const json& v) { return v == 1 || v == 1.0; }, "tail-free sampling is not implemented"},
      {"mirostat", [](const json& v) { return v == 0; }, "mirostat is not implemented"},
      {"dynatemp_range", is_zero, "dynamic temperature is not implemented"},
      {"min_keep", is_zero, "min_keep is not implemented"},
      {"n_indent", is_zero, "n_indent is not implemented"},
      {"t_max_predict_ms", [](const json& v) { return is_zero(v) || v == -1; }, "time limits are not implemented"},
      {"t_max_prompt_ms", [](const json& v) { return is_zero(v) || v == -1; }, "time limits are not implemented"},
      {"n_cache_reuse", is_zero, "KV shifting for cache reuse is not implemented (the prompt cache reuses prefixes)"},
      {"samplers", [](const json&) { return false; }, "a custom sampler order is not supported (the chain is fixed: see docs/API.md)"},
      {"grammar_lazy", [](const json& v) { return v == false; }, "lazy grammars are not implemented"},
      {"grammar_triggers", is_empty_array, "lazy grammars are not implemented"},
      {"preserved_tokens", is_empty_array, "preserved_tokens is not implemented"},
      {"parse_tool_calls", [](const json& v) { return v == true; }, "tool calls are always parsed when tools are given"},
      {"chat_template", [](const json&) { return false; }, "the template is the server's (--chat-template)"},
      {"reasoning_effort", [](const json&) { return false; }, "reasoning applies to /v1/chat/completions"},
      {"reasoning_format", [](const json& v) { return v == "none"; }, "reasoning applies to /v1/chat/completions"},
      {"thinking_budget_tokens", [](const json&) { return false; }, "reasoning applies to /v1/chat/completions"},
      {"adaptive_target", [](const json& v) { return v.is_number() && v.get<double>() < 0; },
       "the adaptive-p sampler is not implemented"},
      {"adaptive_decay", [](const json& v) { return v.is_number(); }, "must be a number"},
      // SGLang's and vLLM's own fields (sglang-router re-serialises every request with
      // SGLang's defaults: no_stop_trim, skip_special_tokens, separate_reasoning,
      // stream_reasoning, return_hidden_states, ignore_eos, continue_final_message; vllm-router
      // the same and include_reasoning).
      {"no_stop_trim", [](const json& v) { return v == false; }, "the stop string is always trimmed from the answer"},
      {"include_stop_str_in_output", [](const json& v) { return v == false; },
       "the stop string is always trimmed from the answer"},
      {"skip_special_tokens", [](const json& v) { return v == true; }, "special tokens are never printed in the answer"},
      {"spaces_between_special_tokens", [](const json& v) { return v.is_boolean(); }, "must be a boolean"},
      {"separate_reasoning", [](const json& v) { return v.is_boolean(); }, "must be a boolean"},
      {"stream_reasoning", [](const json& v) { return v.is_boolean(); }, "must be a boolean"},
      // vllm-router adds vLLM's include_reasoning: the reasoning is in the answer either way.
      {"include_reasoning", [](const json& v) { return v.is_boolean(); }, "must be a boolean"},
      {"return_hidden_states", [](const json& v) { return v == false; }, "hidden states are not returned"},
      {"return_tokens_as_token_ids", [](const json& v) { return v == false; },
       "tokens are returned as text (return_tokens gives the ids)"},
      {"min_tokens", is_zero, "min_tokens is not implemented"},
      {"stop_token_ids", is_empty_array, "stop_token_ids is not implemented (stop takes strings)"},
  };
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& key = it.key();
    if (listed(std::begin(kReadCommon), std::end(kReadCommon), key) || listed(std::begin(kIgnored), std::end(kIgnored), key) ||
        is_sampling_key(key, SamplingApi::kOpenAi))
      continue;
    if (endpoint == Endpoint::kCompletions ? listed(std::begin(kReadCompletions), std::end(kReadCompletions), key)
                                           : listed(std::begin(kReadChat), std::end(kReadChat), key))
      continue;
    if (native && listed(std::begin(kReadNative), std::end(kReadNative), key)) continue;
    if (it.value().is_null()) continue;  // null: the field's default
    if (listed(std::begin(kStructured), std::end(kStructured), key)) continue;  // parse_constraint_fields
    bool known = false;
    for (const NoOp& n : kNoOp) {
      if (key != n.field) continue;
      known = true;
      if (!n.is_noop(it.value())) return bad_request(key, "'" + key + "' " + shown(it.value()) + ": " + n.why);
    }
    if (!known)
      return bad_request(key, "unknown field '" + key + "' for " +
                                  (native ? "/completion"
                                   : endpoint == Endpoint::kCompletions ? "/v1/completions"
                                                                        : "/v1/chat/completions"));
  }
  return std::nullopt;
}

// Token ids of a prompt (an array of integers), or why not.
std::optional<ApiError> read_ids(const json& arr, std::vector<int32_t>* out) {
  for (const json& t : arr) {
    if (!t.is_number_integer())
      return bad_request("prompt", "'prompt' must be a string or an array of token ids (integers), found " + shown(t));
    const int64_t id = t.is_number_unsigned() && t.get<uint64_t>() > 0x7fffffffULL ? int64_t{0x7fffffff} + 1
                                                                                : t.get<int64_t>();
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      return bad_request("prompt", "token id " + shown(t) + " in 'prompt' is outside the vocabulary");
    out->push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

// /v1/completions' prompt: a string, token ids, or a batch — an array of strings or of
// token-id arrays (one choice each; lm-eval's local-completions sends [[ids]]).
std::optional<ApiError> read_prompt(FieldReader& p, CompletionParams& c) {
  constexpr size_t kMaxBatch = 64;
  const json* pr = p.get("prompt");
  if (pr == nullptr) return bad_request("prompt", "'prompt' is required");
  if (pr->is_string()) {
    c.prompts.push_back({false, pr->get<std::string>(), {}, nullptr});
    return std::nullopt;
  }
  if (pr->is_object()) {  // llama-server's {"prompt_string": ..., "multimodal_data": [...]}
    if (!pr->contains("prompt_string"))
      return bad_request("prompt", "'prompt' as an object needs 'prompt_string'");
    const json wrapped = {{"prompt", json::array({*pr})}};
    FieldReader q{wrapped, std::nullopt};
    return read_prompt(q, c);
  }
  if (!pr->is_array()) return bad_request("prompt", "'prompt' must be a string or an array of token ids, got " + shown(*pr));
  if (pr->empty()) return bad_request("prompt", "'prompt' is an empty array");
  // One prompt of token ids, or (llama-server) of token ids and texts mixed.
  const bool has_number = std::any_of(pr->begin(), pr->end(), [](const json& x) { return x.is_number(); });
  if (has_number) {
    c.prompts.emplace_back();
    const bool all_ids = std::all_of(pr->begin(), pr->end(), [](const json& x) { return x.is_number(); });
    if (!all_ids) {
      for (const json& x : *pr) {
        if (x.is_string()) continue;
        std::vector<int32_t> one;
        if (auto e = read_ids(json::array({x}), &one)) return e;
      }
      c.prompts.back().mixed = *pr;
      return std::nullopt;
    }
    c.prompts.back().is_ids = true;
    return read_ids(*pr, &c.prompts.back().ids);
  }
  if (pr->size() > kMaxBatch)
    return bad_request("prompt", "'prompt' holds " + std::to_string(pr->size()) + " prompts; at most " +
                                     std::to_string(kMaxBatch) + " in one request");
  for (const json& x0 : *pr) {
    // llama-server's {"prompt_string": ...} (with "multimodal_data": images, refused).
    const json& x = x0.is_object() && x0.contains("prompt_string") ? x0["prompt_string"] : x0;
    if (x0.is_object() && x0.contains("multimodal_data"))
      return api_error(StatusCode::kUnimplemented, "'prompt' has multimodal_data; this server serves a text-only model",
                       "prompt");
    if (x.is_string()) {
      c.prompts.push_back({false, x.get<std::string>(), {}, nullptr});
    } else if (x.is_array() && !x.empty() && std::any_of(x.begin(), x.end(), [](const json& y) { return y.is_string(); })) {
      c.prompts.emplace_back();
      for (const json& y : x) {
        if (y.is_string()) continue;
        std::vector<int32_t> one;
        if (auto e = read_ids(json::array({y}), &one)) return e;
      }
      c.prompts.back().mixed = x;
    } else if (x.is_array() && !x.empty()) {
      c.prompts.emplace_back();
      c.prompts.back().is_ids = true;
      if (auto e = read_ids(x, &c.prompts.back().ids)) return e;
    } else {
      return bad_request("prompt", "'prompt' as a batch takes strings or non-empty arrays of token ids, found " + shown(x));
    }
  }
  return std::nullopt;
}

// /v1/chat/completions' messages: content flattened to text, tool call arguments parsed.
std::optional<ApiError> read_messages(FieldReader& p, CompletionParams& c) {
  if (const json* ps = p.get("parse_special"); ps != nullptr && *ps == true)
    return bad_request("parse_special",
                       "'parse_special' applies to /v1/completions; chat messages are always text (only the chat "
                       "template makes control tokens)");
  const json* ms = p.get("messages");
  if (ms == nullptr || !ms->is_array() || ms->empty()) return bad_request("messages", "'messages' must be a non-empty array");
  c.messages = json::array();
  for (size_t i = 0; i < ms->size(); ++i) {
    const json& m = (*ms)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad_request("messages", where + " must be an object");
    if (!m.contains("role") || !m["role"].is_string()) return bad_request("messages", where + ".role must be a string");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer")
      return bad_request("messages",
                         where + ".role " + shown(m["role"]) + " is not one of system, user, assistant, tool, developer");
    json out = m;
    std::string text, why;
    if (!flatten_text_parts(m.contains("content") ? m["content"] : json(nullptr), "content part", &text, &why, "\n\n"))
      return bad_request("messages", where + ".content " + why);
    out["content"] = text;
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      if (!m["tool_calls"].is_array()) return bad_request("messages", where + ".tool_calls must be an array");
      for (json& tc : out["tool_calls"]) {
        if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object() ||
            !tc["function"].contains("name") || !tc["function"]["name"].is_string())
          return bad_request("messages", where + ".tool_calls entries need function.name");
        json& args = tc["function"]["arguments"];
        if (args.is_string()) {  // OpenAI sends JSON text; templates print an object
          json parsed = json::parse(args.get<std::string>(), nullptr, false);
          if (!parsed.is_discarded()) args = std::move(parsed);
        }
      }
    }
    c.messages.push_back(std::move(out));
  }
  return std::nullopt;
}

// Chat's tools, tool_choice and parallel_tool_calls.
std::optional<ApiError> read_tools(FieldReader& p, CompletionParams& c) {
  if (const json* t = p.get("tools")) {
    if (!t->is_array()) return bad_request("tools", "'tools' must be an array");
    for (const json& tool : *t) {
      const bool ok = string_field(tool, "type") == "function" && tool.contains("function") &&
                      tool["function"].is_object() && tool["function"].contains("name") &&
                      tool["function"]["name"].is_string() &&
                      (!tool["function"].contains("parameters") || tool["function"]["parameters"].is_object());
      if (!ok)
        return bad_request("tools", "'tools' entries must be {\"type\": \"function\", \"function\": {\"name\", \"parameters\"}}");
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
      return bad_request("tool_choice", "'tool_choice' " + shown(*tc) +
                                            " must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                                            "\"function\": {\"name\": ...}}");
    }
  }
  p.boolean("parallel_tool_calls", &c.parallel_tool_calls);
  if (c.forced_tool.empty()) return std::nullopt;
  if (c.tools.is_null()) return bad_request("tool_choice", "'tool_choice' forces a tool call but 'tools' is empty");
  if (c.forced_tool != "*") {
    bool found = false;
    for (const json& t : c.tools) found |= t["function"]["name"] == c.forced_tool;
    if (!found) return bad_request("tool_choice", "'tool_choice' names '" + c.forced_tool + "', which is not in 'tools'");
  }
  if (c.constraint)
    return bad_request("tool_choice",
                       "'tool_choice' forces a tool call and '" + c.constraint_field + "' constrains the text: give one");
  return std::nullopt;
}

// reasoning_format, thinking_budget_tokens, reasoning_effort (chat).
std::optional<ApiError> read_reasoning(FieldReader& p, CompletionParams& c) {
  if (const json* f = p.get("reasoning_format")) {
    if (!f->is_string() || (*f != "none" && *f != "auto" && *f != "deepseek"))
      return bad_request("reasoning_format", "'reasoning_format' " + shown(*f) + " must be \"auto\", \"deepseek\" or \"none\"");
    c.reasoning_format = f->get<std::string>();
  }
  if (const json* e = p.get("reasoning_effort")) {
    auto b = reasoning_effort_budget(*e);
    if (!b) return bad_request("reasoning_effort", "'reasoning_effort' " + shown(*e) + " must be one of " + kReasoningEfforts);
    c.thinking_budget = *b;
    c.thinking_budget_field = "reasoning_effort";
  }
  std::optional<int64_t> budget;
  if (!p.integer("thinking_budget_tokens", -1, std::numeric_limits<int32_t>::max(), &budget)) return p.error;
  if (budget) {
    c.thinking_budget = *budget;
    c.thinking_budget_field = "thinking_budget_tokens";
  }
  return std::nullopt;
}

// max_tokens (llama-server's n_predict, OpenAI's newer max_completion_tokens) and n. On
// completions 0 asks for no generation (a prompt scored with echo + logprobs, as
// lm-evaluation-harness does, or only prefilled into the prompt cache).
std::optional<ApiError> read_limits(FieldReader& p, CompletionParams& c) {
  std::optional<int64_t> max_tokens, max_completion, n;
  p.integer("max_tokens", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), &max_tokens);
  if (!max_tokens) {  // llama-server's name; -1 means "until the context is full"
    std::optional<int64_t> n_predict;
    p.integer("n_predict", -1, std::numeric_limits<int32_t>::max(), &n_predict);
    if (n_predict && *n_predict >= 0) {
      max_tokens = n_predict;
      c.max_tokens_field = "n_predict";
    }
  }
  p.integer("max_completion_tokens", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(),
            &max_completion);
  p.integer("n", 1, 16, &n);
  if (p.error) return p.error;
  if (n) c.n = static_cast<int32_t>(*n);
  if (max_completion) c.max_tokens_field = "max_completion_tokens";
  const std::optional<int64_t>& mt = max_completion ? max_completion : max_tokens;
  if (mt) {
    const std::string& field = c.max_tokens_field;
    const int64_t lowest = c.endpoint == Endpoint::kCompletions ? 0 : 1;
    if (*mt < lowest)
      return bad_request(field, "'" + field + "' must be " + (lowest == 0 ? "a non-negative" : "a positive") +
                                    " integer, got " + std::to_string(*mt));
    c.max_tokens = static_cast<int32_t>(*mt);
  }
  if (c.prompts.size() > 1 && c.n > 1)
    return bad_request("n", "'n' > 1 with several prompts is not supported; send one request per prompt");
  return std::nullopt;
}

// stop: a string or up to 4 strings (empty ones ignored).
std::optional<ApiError> read_stop(FieldReader& p, CompletionParams& c) {
  const json* st = p.get("stop");
  if (st == nullptr) return std::nullopt;
  if (st->is_string()) {
    if (!st->get<std::string>().empty()) c.stop.push_back(st->get<std::string>());
    return std::nullopt;
  }
  if (!st->is_array()) return bad_request("stop", "'stop' must be a string or an array of strings, got " + shown(*st));
  if (st->size() > 4) return bad_request("stop", "'stop' takes at most 4 sequences, got " + std::to_string(st->size()));
  for (const json& s : *st) {
    if (!s.is_string()) return bad_request("stop", "'stop' must be a string or an array of strings, found " + shown(s));
    if (!s.get<std::string>().empty()) c.stop.push_back(s.get<std::string>());
  }
  return std::nullopt;
}

// logprobs: completions take an integer (alternatives per token) or a boolean; chat a
// boolean plus top_logprobs.
std::optional<ApiError> read_logprobs(FieldReader& p, CompletionParams& c) {
  if (const json* lp = p.get("logprobs")) {
    if (c.endpoint == Endpoint::kCompletions) {
      if (lp->is_boolean()) {
        if (lp->get<bool>()) c.logprobs = 0;
      } else {
        std::optional<int64_t> k;
        if (!p.integer("logprobs", 0, 20, &k)) return p.error;
        c.logprobs = static_cast<int32_t>(*k);
      }
    } else {
      if (!lp->is_boolean()) return bad_request("logprobs", "'logprobs' must be a boolean, got " + shown(*lp));
      if (lp->get<bool>()) c.logprobs = 0;
    }
  }
  std::optional<int64_t> top;
  if (!p.integer("top_logprobs", 0, 20, &top)) return p.error;
  if (top) {
    if (c.endpoint == Endpoint::kChat && c.logprobs < 0)
      return bad_request("top_logprobs", "'top_logprobs' requires 'logprobs': true");
    c.logprobs = std::max<int32_t>(c.logprobs, static_cast<int32_t>(*top));
  }
  return std::nullopt;
}

// llama-server's "lora": [{"id": integer, "scale": number}] (scale defaults to 0, as
// llama-server's parse_lora_request).
std::optional<ApiError> read_lora(FieldReader& p, CompletionParams& c) {
  const json* l = p.get("lora");
  if (l == nullptr || l->is_null()) return std::nullopt;
  if (!l->is_array()) return bad_request("lora", "'lora' must be a list of {\"id\": integer, \"scale\": number}, got " + shown(*l));
  std::vector<std::pair<int64_t, float>> out;
  for (size_t i = 0; i < l->size(); ++i) {
    const json& e = (*l)[i];
    const std::string at = "'lora[" + std::to_string(i) + "]'";
    if (!e.is_object() || !e.contains("id") || !e["id"].is_number_integer() || e["id"].get<int64_t>() < 0)
      return bad_request("lora", at + " must be {\"id\": integer >= 0, \"scale\": number}, got " + shown(e));
    double scale = 0.0;
    if (e.contains("scale") && !e["scale"].is_null()) {
      if (!e["scale"].is_number() || !std::isfinite(e["scale"].get<double>()) || std::fabs(e["scale"].get<double>()) > 1e4)
        return bad_request("lora", at + ".scale must be a finite number (|scale| <= 10000), got " + shown(e["scale"]));
      scale = e["scale"].get<double>();
    }
    for (const auto& key : e.items())
      if (key.key() != "id" && key.key() != "scale")
        return bad_request("lora", at + " has an unknown field '" + key.key() + "' (fields: id, scale)");
    out.push_back({e["id"].get<int64_t>(), static_cast<float>(scale)});
  }
  c.lora = std::move(out);
  return std::nullopt;
}

// stream, stream_options.include_usage, and the flags.
std::optional<ApiError> read_output_options(FieldReader& p, CompletionParams& c) {
  if (auto e = read_lora(p, c)) return e;
  p.boolean("stream", &c.stream);
  p.boolean("ignore_eos", &c.ignore_eos);
  p.boolean("parse_special", &c.parse_special);
  if (c.endpoint == Endpoint::kCompletions) p.boolean("echo", &c.echo);
  p.boolean("speculative", &c.speculative);
  if (p.error) return p.error;
  if (c.echo && c.n > 1) return bad_request("echo", "'echo' with 'n' > 1 is not supported");
  if (const json* so = p.get("stream_options")) {
    if (!so->is_object()) return bad_request("stream_options", "'stream_options' must be an object");
    if (so->contains("include_usage") && !(*so)["include_usage"].is_null()) {
      if (!(*so)["include_usage"].is_boolean())
        return bad_request("stream_options", "'stream_options.include_usage' must be a boolean");
      c.include_usage = (*so)["include_usage"].get<bool>();
    }
  }
  return std::nullopt;
}

}  // namespace

const char* const kReasoningEfforts = "\"none\", \"minimal\", \"low\", \"medium\", \"high\", \"xhigh\"";

std::optional<int64_t> reasoning_effort_budget(const nlohmann::ordered_json& effort) {
  static const std::pair<const char*, int64_t> kBudgets[] = {
      {"none", 0}, {"minimal", 128}, {"low", 512}, {"medium", 2048}, {"high", 8192}, {"xhigh", -1}};
  if (!effort.is_string()) return std::nullopt;
  for (const auto& [name, budget] : kBudgets)
    if (effort == name) return budget;
  return std::nullopt;
}

std::optional<ApiError> parse_constraint_fields(const json& body, CompletionParams& c) {
  auto bad = [](const std::string& field, const std::string& msg) { return bad_request(field, msg); };
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

namespace {

// chat_template_kwargs, add_generation_prompt, continue_final_message (chat).
std::optional<ApiError> read_template_options(FieldReader& p, CompletionParams& c) {
  if (const json* kw = p.get("chat_template_kwargs")) {
    if (!kw->is_object()) return bad_request("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    for (auto it = kw->begin(); it != kw->end(); ++it)
      if (it.key() == "messages" || it.key() == "tools" || it.key() == "add_generation_prompt")
        return bad_request("chat_template_kwargs", "'chat_template_kwargs' may not set '" + it.key() +
                                                       "' (it is the request's own field)");
    c.template_kwargs = *kw;
  }
  p.boolean("add_generation_prompt", &c.add_generation_prompt);
  p.boolean("continue_final_message", &c.continue_final_message);
  if (p.error) return p.error;
  // llama-server's prefill: a last assistant message with text (and no tool calls) is
  // continued, unless the request says how the prompt ends.
  if (p.get("add_generation_prompt") == nullptr && p.get("continue_final_message") == nullptr &&
      !c.messages.empty() && c.messages.back().value("role", "") == "assistant" &&
      !c.messages.back().value("content", "").empty() &&
      (!c.messages.back().contains("tool_calls") || c.messages.back()["tool_calls"].is_null()))
    c.continue_final_message = true;
  if (c.continue_final_message) {
    if (c.add_generation_prompt && p.get("add_generation_prompt") != nullptr)
      return bad_request("continue_final_message",
                         "'continue_final_message' and 'add_generation_prompt' both true: the prompt either ends "
                         "inside the last message or opens a new one");
    c.add_generation_prompt = false;
    if (c.messages.empty() || c.messages.back().value("role", "") != "assistant")
      return bad_request("continue_final_message", "'continue_final_message' needs the last message to be the assistant's");
    if (c.messages.size() >= 2 && c.messages[c.messages.size() - 2].value("role", "") == "assistant")
      return bad_request("messages", "two assistant messages end the conversation: the last one is continued (a prefill), "
                                     "so the one before it must not be the assistant's");
  }
  return std::nullopt;
}

// n_probs (llama-server: top alternatives per token), return_tokens, response_fields.
std::optional<ApiError> read_native_outputs(FieldReader& p, CompletionParams& c, bool native) {
  std::optional<int64_t> n_probs;
  if (!p.integer("n_probs", 0, 20, &n_probs)) return p.error;
  if (n_probs && *n_probs > 0) c.logprobs = std::max<int32_t>(c.logprobs, static_cast<int32_t>(*n_probs));
  p.boolean("return_tokens", &c.return_tokens);
  p.boolean("verbose", &c.verbose);
  p.boolean("return_progress", &c.return_progress);
  p.boolean("timings_per_token", &c.timings_per_token);
  p.boolean("post_sampling_probs", &c.post_sampling_probs);
  if (p.error) return p.error;
  if (const json* rf = p.get("response_fields"); rf != nullptr && native) {
    if (!rf->is_array()) return bad_request("response_fields", "'response_fields' must be an array of strings");
    for (const json& f : *rf) {
      if (!f.is_string() || f.get<std::string>().empty())
        return bad_request("response_fields", "'response_fields' must be an array of non-empty strings");
      c.response_fields.push_back(f.get<std::string>());
    }
  }
  return std::nullopt;
}

std::variant<CompletionParams, ApiError> parse_request(const std::string& body, Endpoint endpoint,
                                                       const SamplingDefaults& defaults, bool native) {
  auto parsed = parse_body_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
  if (auto e = check_fields(j, endpoint, native)) return *e;
  FieldReader p{j, std::nullopt};
  CompletionParams c;
  c.endpoint = endpoint;
  if (auto e = parse_constraint_fields(j, c)) return *e;
  c.sampling = api_default_sampling(SamplingApi::kOpenAi);  // llama-server's defaults
  defaults.apply(c.sampling);                                // the model's own, where it has them
  if (const json* m = p.get("model")) {
    if (!m->is_string()) return bad_request("model", "'model' must be a string, got " + shown(*m));
    c.model = m->get<std::string>();
  }
  if (endpoint == Endpoint::kCompletions) {
    if (auto e = read_prompt(p, c)) return *e;
  } else {
    if (auto e = read_messages(p, c)) return *e;
    if (auto e = read_tools(p, c)) return *e;
    if (auto e = read_template_options(p, c)) return *e;
    if (auto e = read_reasoning(p, c)) return *e;
  }
  if (auto e = read_limits(p, c)) return *e;
  if (auto e = read_sampling_fields(j, SamplingApi::kOpenAi, &c.sampling, &c.seed_given, &c.text_bias)) return *e;
  normalize_request_sampling(c.sampling);
  if (auto e = read_output_options(p, c)) return *e;
  if (auto e = read_stop(p, c)) return *e;
  if (auto e = read_logprobs(p, c)) return *e;
  if (auto e = read_native_outputs(p, c, native)) return *e;
  if (p.error) return *p.error;
  return c;
}

}  // namespace

std::variant<CompletionParams, ApiError> parse_completion_request(const std::string& body, Endpoint endpoint,
                                                                  const SamplingDefaults& defaults) {
  return parse_request(body, endpoint, defaults, false);
}

std::variant<CompletionParams, ApiError> parse_native_completion_request(const std::string& body,
                                                                         const SamplingDefaults& defaults) {
  return parse_request(body, Endpoint::kCompletions, defaults, true);
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

#ifndef SPECULA_VERSION
#define SPECULA_VERSION "0.0.0"
#endif
// OpenAI's system_fingerprint: the build that answered.
const char* const kFingerprint = "specula-" SPECULA_VERSION;
}  // namespace

nlohmann::ordered_json usage_json(const Usage& u) {
  json j = json{{"prompt_tokens", u.prompt_tokens},
                {"completion_tokens", u.completion_tokens},
                {"total_tokens", u.prompt_tokens + u.completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  if (u.reasoning_tokens >= 0) j["completion_tokens_details"] = {{"reasoning_tokens", u.reasoning_tokens}};
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
  return json{{"id", id},           {"object", "text_completion"}, {"created", created}, {"model", model}, {"system_fingerprint", kFingerprint},
              {"choices", {choice}}, {"usage", usage_json(usage)}};
}

nlohmann::ordered_json completion_chunk(const std::string& id, int64_t created, const std::string& model,
                                        const std::string& text, const std::vector<TokenLogprob>* logprobs,
                                        int64_t text_offset, const std::string& finish_reason, int index) {
  json choice = {{"index", index}, {"text", text}, {"finish_reason", reason(finish_reason)}};
  choice["logprobs"] = logprobs ? logprobs_completion(*logprobs, text_offset) : json(nullptr);
  return json{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model}, {"system_fingerprint", kFingerprint}, {"choices", {choice}}};
}

nlohmann::ordered_json chat_response(const std::string& id, int64_t created, const std::string& model,
                             const std::string& content, const std::vector<TokenLogprob>* logprobs,
                             const std::string& finish_reason, const Usage& usage) {
  json choice = {{"index", 0},
                 {"message", {{"role", "assistant"}, {"content", content}}},
                 {"finish_reason", reason(finish_reason)}};
  choice["logprobs"] = logprobs ? logprobs_chat(*logprobs) : json(nullptr);
  return json{{"id", id},           {"object", "chat.completion"}, {"created", created}, {"model", model}, {"system_fingerprint", kFingerprint},
              {"choices", {choice}}, {"usage", usage_json(usage)}};
}

nlohmann::ordered_json chat_chunk(const std::string& id, int64_t created, const std::string& model,
                                  const std::string* content, bool delta_role, const std::vector<TokenLogprob>* logprobs,
                                  const std::string& finish_reason, int index) {
  json delta = json::object();
  if (delta_role) delta["role"] = "assistant";
  if (content) delta["content"] = *content;
  json choice = {{"index", index}, {"delta", delta}, {"finish_reason", reason(finish_reason)}};
  choice["logprobs"] = logprobs ? logprobs_chat(*logprobs) : json(nullptr);
  return json{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model}, {"system_fingerprint", kFingerprint}, {"choices", {choice}}};
}

nlohmann::ordered_json usage_chunk(const std::string& id, int64_t created, const std::string& model, Endpoint endpoint,
                           const Usage& usage) {
  return json{{"id", id},
              {"object", endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"system_fingerprint", kFingerprint},
              {"choices", json::array()},
              {"usage", usage_json(usage)}};
}


// ---------------------------------------------------------------- OpenAiFormat

json OpenAiFormat::whole(const std::string& text, const std::vector<TokenLogprob>& lps,
                         const CompletionStream::Update& u) {
  Usage usage = usage_of(u.summary);
  usage.reasoning_tokens = reasoning_tokens();
  const auto* lp = g_.params->logprobs >= 0 ? &lps : nullptr;
  // A reasoning model's thinking goes to reasoning_content; the rest is the content.
  const chat::SplitAnswer split = split_whole(text);
  json body = endpoint_ == Endpoint::kChat
                  ? chat_response(g_.id, g_.created, g_.model, split.content, lp, u.finish_reason, usage)
                  : completion_response(g_.id, g_.created, g_.model, text, lp, u.finish_reason, usage);
  body["choices"][0]["index"] = g_.index;
  body["seed"] = g_.seed;  // the seed this request sampled with (random when not given)
  // (an empty thinking block is no reasoning: a stream sends none either)
  if (!split.reasoning.empty()) body["choices"][0]["message"]["reasoning_content"] = split.reasoning;
  const chat::ParsedAnswer a = calls_.parse_whole(split.content, u.summary.outcome == Outcome::kLength);
  if (!a.calls.empty()) {
    json& msg = body["choices"][0]["message"];
    msg["content"] = a.content.empty() ? json(nullptr) : json(a.content);
    msg["tool_calls"] = tool_calls_json(a.calls, false);
    body["choices"][0]["finish_reason"] = "tool_calls";
  }
  // llama-server's "timings" extension (same field names), for benchmarks and clients
  // that read it: prefill and decode time of this request.
  body["timings"] = timings_json(u.summary);
  if (g_.params->verbose) body["__verbose"] = native_object(g_, text, u.token_ids, nullptr, u, false);
  return body;
}

json OpenAiFormat::combine(std::vector<json> choices, const Usage& total) const {
  json body = std::move(choices.front());
  for (size_t i = 1; i < choices.size(); ++i) body["choices"].push_back(std::move(choices[i]["choices"][0]));
  body["usage"] = usage_json(total);
  return body;
}

std::string OpenAiFormat::stream_piece(const CompletionStream::Update& u) {
  std::string out;
  if (g_.params->return_progress)
    for (const CompletionStream::Update::Progress& p : u.progress) {
      // llama-server's prompt_progress events: on chat, a role delta each (the first is
      // the stream's role chunk); on completions, an empty text.
      json o = endpoint_ == Endpoint::kChat
                   ? chat_chunk(g_.id, g_.created, g_.model, nullptr, true, nullptr, "", g_.index)
                   : completion_chunk(g_.id, g_.created, g_.model, "", nullptr, text_offset_, "", g_.index);
      if (endpoint_ == Endpoint::kChat) {
        o["choices"][0]["delta"]["content"] = nullptr;
        sent_role_ = true;
      }
      o["prompt_progress"] = progress_json(p);
      if (g_.params->timings_per_token) o["timings"] = progress_timings_json(p);
      out += chunk(std::move(o));
    }
  // Thinking goes out as reasoning_content deltas; the rest as content until a call's
  // opening; from there on it is held for parsing.
  const chat::SplitAnswer split = reasoning_.feed(u.text);
  out += reasoning_piece(split.reasoning);
  return out + text_piece(calls_.feed(split.content), u.logprobs);  // (logprobs with tools are refused)
}

std::string OpenAiFormat::reasoning_piece(const std::string& reasoning) {
  if (reasoning.empty()) return "";
  std::string out = role_piece();
  json ch = chat_chunk(g_.id, g_.created, g_.model, nullptr, false, nullptr, "", g_.index);
  ch["choices"][0]["delta"]["reasoning_content"] = reasoning;
  return out + chunk(std::move(ch));
}

std::string OpenAiFormat::role_piece() {
  if (endpoint_ != Endpoint::kChat || sent_role_) return "";
  // The first chunk names the role only, content null (OpenAI's and llama-server's first
  // delta); no delta ever carries empty content.
  sent_role_ = true;
  json first = chat_chunk(g_.id, g_.created, g_.model, nullptr, true, nullptr, "", g_.index);
  first["choices"][0]["delta"]["content"] = nullptr;
  return chunk(std::move(first));
}

std::string OpenAiFormat::text_piece(const std::string& text, const std::vector<TokenLogprob>& logprobs) {
  const bool want_lp = g_.params->logprobs >= 0;
  if (text.empty() && logprobs.empty() && !(endpoint_ == Endpoint::kChat && !sent_role_)) return "";
  std::string out;
  if (endpoint_ == Endpoint::kChat) {
    out = role_piece();
    if (!text.empty() || !logprobs.empty())
      out += chunk(chat_chunk(g_.id, g_.created, g_.model, text.empty() ? nullptr : &text, false,
                              want_lp ? &logprobs : nullptr, "", g_.index));
  } else {
    out = chunk(completion_chunk(g_.id, g_.created, g_.model, text, want_lp ? &logprobs : nullptr, text_offset_, "",
                                 g_.index));
  }
  text_offset_ += static_cast<int64_t>(text.size());
  return out;
}

std::string OpenAiFormat::stream_end(const CompletionStream::Update& u) {
  // Not a finish the client asked for: say so, not "stop".
  if (u.summary.outcome == Outcome::kFailed || u.summary.outcome == Outcome::kCancelled)
    return sse(openai_error_body(generation_error(u, g_.params)));
  std::string reason = u.summary.outcome == Outcome::kLength ? "length" : "stop";
  const chat::SplitAnswer split = reasoning_.finish();
  std::string out = reasoning_piece(split.reasoning);
  out += text_piece(calls_.feed(split.content), {});
  const chat::ParsedAnswer a = calls_.finish(reason == "length");
  out += text_piece(a.content, {});
  if (!a.calls.empty()) {
    json delta = {{"tool_calls", tool_calls_json(a.calls, true)}};
    json ch = {{"id", g_.id}, {"object", "chat.completion.chunk"}, {"created", g_.created}, {"model", g_.model},
               {"choices", {{{"index", g_.index}, {"delta", delta}, {"finish_reason", nullptr}, {"logprobs", nullptr}}}}};
    out += chunk(std::move(ch));
    reason = "tool_calls";
  }
  json last = endpoint_ == Endpoint::kChat
                  ? chat_chunk(g_.id, g_.created, g_.model, nullptr, false, nullptr, reason, g_.index)
                  : completion_chunk(g_.id, g_.created, g_.model, "", nullptr, text_offset_, reason, g_.index);
  last["seed"] = g_.seed;
  last["timings"] = timings_json(u.summary);  // llama-server's, on the last chunk
  timings_ = last["timings"];
  return out + chunk(std::move(last));
}

std::string OpenAiFormat::stream_close(const Usage* usage) {
  std::string out;
  if (usage != nullptr && g_.params->include_usage) {
    json u = usage_chunk(g_.id, g_.created, g_.model, endpoint_, *usage);
    if (!timings_.is_null()) u["timings"] = timings_;
    out += sse(u);
  }
  return out + "data: [DONE]\n\n";
}

std::string OpenAiFormat::chunk(json j) const {
  if (g_.params->include_usage) j["usage"] = nullptr;
  return sse(j);
}

json OpenAiFormat::tool_calls_json(const std::vector<chat::ToolCall>& calls, bool with_index) const {
  json arr = json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    json c = {{"id", "call_" + g_.id + "_" + std::to_string(k)},
              {"type", "function"},
              {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}};
    if (with_index) c["index"] = k;
    arr.push_back(std::move(c));
  }
  return arr;
}

}  // namespace specula::server

namespace specula::server {

void handle_completion(ServedModel& served, const http::Request& req, http::Exchange& ex, Endpoint endpoint,
                       GenerationLog* log) {
  auto parsed = parse_completion_request(req.body, endpoint, served.sampling_defaults());
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  if (served.options().verbose) std::get<CompletionParams>(parsed).verbose = true;
  OpenAiFormat fmt(endpoint);
  run_generation(served, std::get<CompletionParams>(parsed), ex, fmt, log);
}

}  // namespace specula::server
