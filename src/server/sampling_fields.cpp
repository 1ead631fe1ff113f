// server/sampling_fields.cpp — see sampling_fields.h.
#include "server/sampling_fields.h"

#include <cmath>
#include <limits>
#include <string>

#include "server/json_util.h"

namespace specula::server {

using json = nlohmann::ordered_json;

namespace {

// logit_bias: {"id": bias} (OpenAI) or [[id, bias], ...] (llama-server); a bias of false
// bans the token (llama-server).
std::optional<ApiError> read_token_bias(const std::string& key, const json& v, double lo, double hi,
                                        std::vector<std::pair<int32_t, float>>* out,
                                        std::vector<std::pair<std::string, float>>* text_out) {
  auto add = [&](const json& id_value, const json& val) -> std::optional<ApiError> {
    int64_t id = -1;
    bool text_key = false;
    if (id_value.is_string()) {
      const std::string k = id_value.get<std::string>();
      size_t used = 0;
      try {
        id = std::stoll(k, &used);
      } catch (...) {
        used = 0;
      }
      if (used == 0 || used != k.size()) {
        id = -1;
        text_key = text_out != nullptr && !k.empty();
      }
    } else if (id_value.is_number_integer()) {
      id = id_value.get<int64_t>();
    }
    if (!text_key && (id < 0 || id > std::numeric_limits<int32_t>::max()))
      return bad_request(key, "'" + key + "' keys must be token ids" + (text_out ? " or text" : "") + ", got " +
                                  shown(id_value));
    float bias = 0.0f;
    if (val.is_number() && std::isfinite(val.get<double>()) && val.get<double>() >= lo && val.get<double>() <= hi) {
      bias = static_cast<float>(val.get<double>());
    } else if (val.is_boolean() && !val.get<bool>()) {
      bias = -std::numeric_limits<float>::infinity();
    } else {
      return bad_request(key, "'" + key + "' values must be numbers in [" + shown(json(static_cast<int64_t>(lo))) + ", " +
                                  shown(json(static_cast<int64_t>(hi))) + "], got " +
                                  shown(val));
    }
    if (text_key) {
      text_out->push_back({id_value.get<std::string>(), bias});
    } else {
      out->push_back({static_cast<int32_t>(id), bias});
    }
    return std::nullopt;
  };
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it)
      if (auto e = add(json(it.key()), it.value())) return e;
    return std::nullopt;
  }
  if (v.is_array()) {
    for (const json& pair : v) {
      if (!pair.is_array() || pair.size() != 2)
        return bad_request(key, "'" + key + "' as an array takes [token_id, bias] pairs");
      if (auto e = add(pair[0], pair[1])) return e;
    }
    return std::nullopt;
  }
  return bad_request(key, "'" + key + "' must be an object of token id -> bias");
}

std::optional<ApiError> read_strings(const std::string& key, const json& v, std::vector<std::string>* out) {
  bool ok = v.is_array() && !v.empty() && v.size() <= 64;
  std::vector<std::string> strings;
  for (const json& x : ok ? v : json::array()) {
    if (!x.is_string() || x.get<std::string>().empty()) {
      ok = false;
      break;
    }
    strings.push_back(x.get<std::string>());
  }
  if (!ok) return bad_request(key, "'" + key + "' must be a non-empty array (at most 64) of non-empty strings");
  *out = std::move(strings);
  return std::nullopt;
}

}  // namespace

bool is_sampling_key(const std::string& key, SamplingApi api) {
  for (const SamplingField& f : sampling_fields())
    if (const SamplingSpelling* s = f.spelling(api); s != nullptr && s->key != nullptr && key == s->key) return true;
  return false;
}

std::optional<ApiError> read_sampling_fields(const json& body, SamplingApi api, SamplingParams* out, bool* seed_given,
                                             std::vector<std::pair<std::string, float>>* text_bias) {
  FieldReader p{body, std::nullopt};
  for (const SamplingField& f : sampling_fields()) {
    const SamplingSpelling* s = f.spelling(api);
    if (s == nullptr || s->key == nullptr) continue;
    const json* v = p.get(s->key);
    if (v == nullptr) continue;
    const double lo = std::isnan(s->lo) ? f.lo : s->lo;
    const double hi = std::isnan(s->hi) ? f.hi : s->hi;
    switch (f.kind) {
      case SamplingKind::kFloat: {
        float x = 0;
        if (!p.number(s->key, lo, hi, &x, f.lo_open)) return p.error;
        f.set_number(*out, x);
        break;
      }
      case SamplingKind::kInt: {
        std::optional<int64_t> x;
        if (!p.integer(s->key, static_cast<int64_t>(lo), static_cast<int64_t>(hi), &x)) return p.error;
        f.set_number(*out, static_cast<double>(*x));
        break;
      }
      case SamplingKind::kSeed: {
        std::optional<int64_t> x;
        if (!p.integer(s->key, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &x))
          return p.error;
        out->*std::get<uint64_t SamplingParams::*>(f.member) = static_cast<uint64_t>(*x);
        *seed_given = true;
        break;
      }
      case SamplingKind::kStrings:
        if (auto e = read_strings(s->key, *v, &(out->*std::get<std::vector<std::string> SamplingParams::*>(f.member))))
          return e;
        break;
      case SamplingKind::kTokenBias:
        if (auto e = read_token_bias(s->key, *v, lo, hi,
                                     &(out->*std::get<std::vector<std::pair<int32_t, float>> SamplingParams::*>(f.member)),
                                     text_bias))
          return e;
        break;
    }
  }
  return std::nullopt;
}

}  // namespace specula::server
