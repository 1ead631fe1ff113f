// server/json_util.h — the JSON toolkit every API family's parser uses: a request body as
// an object (bounded nesting), typed and range-checked fields (FieldReader), short
// renderings of values for messages (shown), text of content parts, and serialising with
// invalid UTF-8 replaced (dump_json).
// Does not: know any API's fields (openai_api.h, anthropic_api.h do) or talk HTTP.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "core/json_text.h"
#include "server/errors.h"

namespace specula::server {

// A value for an error message: scalars as JSON (cut to 60 bytes), arrays and objects by
// size only — dumping them whole would recurse once per nesting level and copy them.
std::string shown(const nlohmann::ordered_json& v);

// Text of a message's content: a string, null (""), or an array of {"type": "text",
// "text"} parts (OpenAI "content part", Anthropic "content block": `noun` in messages)
// joined with `separator` (the chat routes: "\n\n", as llama-server joins a message's text
// parts for a template that takes string content); false with why for anything else.
// `text_types`: the part types whose "text" is text (the Responses API's input_text and
// output_text besides text).
bool flatten_text_parts(const nlohmann::ordered_json& content, const char* noun, std::string* out, std::string* why,
                        const char* separator = "",
                        std::initializer_list<std::string_view> text_types = {"text"});

// o[key] when o is an object holding a string there, else `fallback` (never throws:
// nlohmann's value() does on a null or a wrong type).
std::string string_field(const nlohmann::ordered_json& o, const char* key, const std::string& fallback = "");

// A request body as a JSON object, or the 400 saying why not (not JSON, not an object,
// nested deeper than 64 levels).
std::variant<nlohmann::ordered_json, ApiError> parse_body_object(const std::string& body);

// A 400 naming the first field of `j` not in `known` ("unknown field 'x' for /tokenize").
std::optional<ApiError> only_fields(const nlohmann::ordered_json& j, std::initializer_list<const char*> known,
                                    const char* route);

// Serialises with invalid UTF-8 replaced by U+FFFD (never throws).
std::string dump_json(const nlohmann::ordered_json& j);

// Reads typed, range-checked fields of a request body; the first wrong one becomes
// `error` (a 400 naming the field). A null field counts as absent.
struct FieldReader {
  const nlohmann::ordered_json& body;
  std::optional<ApiError> error;

  bool fail(const std::string& param, const std::string& msg) {
    if (!error) error = bad_request(param, msg);
    return false;
  }
  const nlohmann::ordered_json* get(const char* key) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return nullptr;
    return &*it;
  }
  // A number in [lo, hi] (lo excluded when lo_open).
  bool number(const char* key, double lo, double hi, float* out, bool lo_open = false);
  bool integer(const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out);
  bool boolean(const char* key, bool* out);
};

}  // namespace specula::server
