// server/json_util.cpp — see json_util.h.
#include "server/json_util.h"

#include <algorithm>

namespace specula::server {

using json = nlohmann::ordered_json;

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

}  // namespace

std::string shown(const json& v) {
  if (v.is_array()) return v.empty() ? "[]" : "an array of " + std::to_string(v.size()) + " items";
  if (v.is_object()) return v.empty() ? "{}" : "an object";
  std::string s = dump_json(v);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

bool flatten_text_parts(const json& content, const char* noun, std::string* out, std::string* why,
                        const char* separator, std::initializer_list<std::string_view> text_types) {
  if (content.is_null()) return true;
  if (content.is_string()) {
    *out = content.get<std::string>();
    return true;
  }
  if (!content.is_array()) {
    *why = std::string("must be a string or an array of ") + noun + "s";
    return false;
  }
  std::string joined;
  for (const json& part : content) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      *why = std::string(noun) + "s must be objects with a 'type'";
      return false;
    }
    const std::string& type = part["type"].get_ref<const std::string&>();
    if (std::find(text_types.begin(), text_types.end(), type) == text_types.end()) {
      std::string kinds;
      for (std::string_view t : text_types) kinds += (kinds.empty() ? "" : ", ") + std::string(t);
      *why = std::string(noun) + " type " + shown(part["type"]) + " is not supported (" + kinds + " only)";
      return false;
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      *why = std::string(noun) + " of type \"" + type + "\" needs a string 'text'";
      return false;
    }
    const std::string& text = part["text"].get_ref<const std::string&>();
    if (text.empty()) continue;  // (no separator around an empty part, as llama-server)
    if (!joined.empty()) joined += separator;
    joined += text;
  }
  *out += joined;
  return true;
}

std::string string_field(const json& o, const char* key, const std::string& fallback) {
  if (!o.is_object()) return fallback;
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : fallback;
}

std::string dump_json(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::variant<json, ApiError> parse_body_object(const std::string& body) {
  if (nesting_depth(body, kMaxDepth) > kMaxDepth)
    return bad_request("", "the request body nests arrays/objects deeper than " + std::to_string(kMaxDepth) + " levels");
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad_request("", "the request body is not valid JSON");
  if (!j.is_object()) return bad_request("", "the request body must be a JSON object");
  return j;
}

std::optional<ApiError> only_fields(const json& j, std::initializer_list<const char*> known, const char* route) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) return bad_request(it.key(), "unknown field '" + it.key() + "' for " + route);
  }
  return std::nullopt;
}

bool FieldReader::number(const char* key, double lo, double hi, float* out, bool lo_open) {
  const json* v = get(key);
  if (v == nullptr) return true;
  if (!v->is_number()) return fail(key, std::string("'") + key + "' must be a number, got " + shown(*v));
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi || (lo_open && d == lo))
    return fail(key, std::string("'") + key + "' must be in " + (lo_open ? "(" : "[") + shown(lo) + ", " + shown(hi) +
                         "], got " + shown(*v));
  *out = static_cast<float>(d);
  return true;
}

bool FieldReader::integer(const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out) {
  const json* v = get(key);
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

bool FieldReader::boolean(const char* key, bool* out) {
  const json* v = get(key);
  if (v == nullptr) return true;
  if (!v->is_boolean()) return fail(key, std::string("'") + key + "' must be a boolean, got " + shown(*v));
  *out = v->get<bool>();
  return true;
}

}  // namespace specula::server
