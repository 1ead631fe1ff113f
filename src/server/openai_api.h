// server/openai_api.h — the OpenAI-compatible request and response shapes: parsing and
// checking a /v1/completions or /v1/chat/completions JSON body into CompletionParams, and
// building the response objects (whole and streamed chunks) and error bodies.
//
// Follows the OpenAI API reference (platform.openai.com/docs/api-reference: completions,
// chat, "Error codes") for field names, types and the error body
// {"error": {"message", "type", "param", "code"}}; sampling defaults for omitted fields are
// llama-server's (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05), since specula is a
// drop-in for it, unless the model states its own (a Hugging Face folder's
// generation_config.json; as vLLM). Nothing requested is silently dropped: a field is read, or on a stated
// list of fields that change nothing, or refused with a 400 naming it (see
// parse_completion_request).
// Does not tokenize, render chat templates or talk HTTP (server.cpp does).
#pragma once

#include <cstdint>
#include <cmath>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/constraint.h"
#include "method/sampler.h"

namespace specula::server {

// An error answer: HTTP status and the OpenAI error body fields.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty -> null
  std::string code;   // empty -> null
};
nlohmann::ordered_json error_body(const ApiError& e);

// A value for an error message: scalars as JSON (cut to 60 bytes), arrays and objects by
// size only — dumping them whole would recurse once per nesting level and copy them.
std::string shown(const nlohmann::ordered_json& v);

// Text of a message's content: a string, null (""), or an array of {"type": "text",
// "text"} parts (OpenAI "content part", Anthropic "content block": `noun` in messages);
// false with why for anything else.
bool flatten_text_parts(const nlohmann::ordered_json& content, const char* noun, std::string* out, std::string* why);

// Walks JSON text one byte at a time: step() is +1 at an opening bracket outside strings,
// -1 at a closing one, 0 otherwise.
struct JsonBrackets {
  bool in_string = false, escaped = false;
  int step(char ch);
};

// o[key] when o is an object holding a string there, else `fallback` (never throws:
// nlohmann's value() does on a null or a wrong type).
std::string string_field(const nlohmann::ordered_json& o, const char* key, const std::string& fallback = "");

// A request body as a JSON object, or the 400 saying why not (not JSON, not an object,
// nested deeper than 64 levels).
std::variant<nlohmann::ordered_json, ApiError> parse_body_object(const std::string& body);

// Reads typed, range-checked fields of a request body; the first wrong one becomes
// `error` (a 400 naming the field). A null field counts as absent.
struct FieldReader {
  const nlohmann::ordered_json& body;
  std::optional<ApiError> error;

  bool fail(const std::string& param, const std::string& msg) {
    if (!error) error = ApiError{400, msg, "invalid_request_error", param, ""};
    return false;
  }
  const nlohmann::ordered_json* get(const char* key) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool number(const char* key, double lo, double hi, float* out) {
    const nlohmann::ordered_json* v = get(key);
    if (v == nullptr) return true;
    if (!v->is_number())
      return fail(key, std::string("'") + key + "' must be a number, got " + shown(*v));
    const double d = v->get<double>();
    if (!std::isfinite(d) || d < lo || d > hi)
      return fail(key, std::string("'") + key + "' must be in [" + shown(lo) + ", " + shown(hi) + "], got " + shown(*v));
    *out = static_cast<float>(d);
    return true;
  }
  bool integer(const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out) {
    const nlohmann::ordered_json* v = get(key);
    if (v == nullptr) return true;
    bool integral = v->is_number_integer();
    if (v->is_number_float()) {
      const double d = v->get<double>();
      integral = std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15;
    }
    if (!integral) return fail(key, std::string("'") + key + "' must be an integer, got " + shown(*v));
    // An unsigned value above hi is out of range as it is (hi + 1 would overflow when hi
    // is INT64_MAX, e.g. "seed": 18446744073709551615).
    const bool above = v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi);
    const int64_t i = above                     ? hi
                      : v->is_number_unsigned() ? static_cast<int64_t>(v->get<uint64_t>())
                      : v->is_number_integer()  ? v->get<int64_t>()
                                                : static_cast<int64_t>(v->get<double>());
    if (above || i < lo || i > hi)
      return fail(key, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                           "], got " + shown(*v));
    *out = i;
    return true;
  }
  bool boolean(const char* key, bool* out) {
    const nlohmann::ordered_json* v = get(key);
    if (v == nullptr) return true;
    if (!v->is_boolean()) return fail(key, std::string("'") + key + "' must be a boolean, got " + shown(*v));
    *out = v->get<bool>();
    return true;
  }
};


enum class Endpoint { kCompletions, kChat };

struct CompletionParams {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;  // as sent (may be empty when omitted)
  // completions: the prompt as text, or as token ids
  bool prompt_is_ids = false;
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  // chat: messages with content flattened to strings ({role, content} + other fields kept;
  // an assistant turn's tool_calls[].function.arguments parsed from its JSON string into
  // an object, as chat templates expect)
  nlohmann::ordered_json messages;
  // chat: the tool definitions given to the template (null: none, or tool_choice "none")
  nlohmann::ordered_json tools;
  bool parallel_tool_calls = true;  // false: an answer carries at most its first call
  std::optional<int32_t> max_tokens;  // absent: until the context is full
  SamplingParams sampling;            // seed filled by the caller when !seed_given
  bool seed_given = false;
  std::vector<std::string> stop;      // up to 4 non-empty strings
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  int32_t logprobs = -1;              // -1 none; else top alternatives per token (0..20)
  bool ignore_eos = false;            // llama-server extension
  // /v1/completions with a text prompt: whether control-token texts in it ("<|im_end|>")
  // become control tokens (true, llama-server's behaviour) or stay text (false). Chat
  // messages are always text (only the template makes control tokens).
  bool parse_special = true;
  bool speculative = true;            // specula extension: false opts this request out of speculation
  int32_t n = 1;                      // choices (1..16); choice i samples with seed + i
  bool echo = false;                  // completions: the answer starts with the prompt (with logprobs: its logprobs too)
  // Structured output (response_format json_object / json_schema, grammar, json_schema,
  // regex, choice, or vLLM's guided_* names), and the request field it came from.
  std::optional<ConstraintSpec> constraint;
  std::string constraint_field;
  // chat: tool_choice "required" ("*") or a named function: the answer must be a call.
  std::string forced_tool;
};

// The structured-output fields of a body (OpenAI's response_format; llama-server's
// grammar / json_schema; vLLM's regex / choice / guided_json / guided_regex /
// guided_choice / guided_grammar), at most one of them. Errors name the field.
std::optional<ApiError> parse_constraint_fields(const nlohmann::ordered_json& body, CompletionParams& c);

// Parses a body for `endpoint`. Every wrong type or value is an ApiError naming the field
// ("'temperature' must be a number in [0, 2], got \"hot\"").
// `defaults`: the model's sampling defaults (generation_config.json), which replace
// llama-server's for the fields the body leaves out.
std::variant<CompletionParams, ApiError> parse_completion_request(const std::string& body, Endpoint endpoint,
                                                                  const SamplingDefaults& defaults = {});

// One generated token's logprob entry as the API reports it.
struct TokenLogprob {
  std::string token;  // the token's bytes (may be a partial UTF-8 sequence)
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;  // alternatives (bytes, logprob)
};

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served by the prompt cache (usage.prompt_tokens_details)
  // Speculative decoding telemetry (specula extension, reported as usage.speculative
  // when spec_rounds > 0): verify rounds with drafts, drafted and accepted tokens.
  int64_t spec_rounds = 0, drafted = 0, accepted = 0;
};

// Builders. `finish_reason` empty -> null. Strings are emitted as valid UTF-8 (invalid
// bytes replaced by U+FFFD when serialised with dump_json).
nlohmann::ordered_json completion_response(const std::string& id, int64_t created, const std::string& model,
                                   const std::string& text, const std::vector<TokenLogprob>* logprobs,
                                   const std::string& finish_reason, const Usage& usage);
nlohmann::ordered_json completion_chunk(const std::string& id, int64_t created, const std::string& model,
                                const std::string& text, const std::vector<TokenLogprob>* logprobs,
                                int64_t text_offset, const std::string& finish_reason);
nlohmann::ordered_json chat_response(const std::string& id, int64_t created, const std::string& model,
                             const std::string& content, const std::vector<TokenLogprob>* logprobs,
                             const std::string& finish_reason, const Usage& usage);
// delta_role: include "role":"assistant" (first chunk).
nlohmann::ordered_json chat_chunk(const std::string& id, int64_t created, const std::string& model,
                          const std::string* content, bool delta_role,
                          const std::vector<TokenLogprob>* logprobs, const std::string& finish_reason);
nlohmann::ordered_json usage_chunk(const std::string& id, int64_t created, const std::string& model, Endpoint endpoint,
                           const Usage& usage);
nlohmann::ordered_json usage_json(const Usage& usage);

// Serialises with invalid UTF-8 replaced by U+FFFD (never throws).
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace specula::server
