// server/embeddings.cpp — POST /v1/embeddings (and llama-server's /embeddings):
// {"input": text | [texts] | [ids] | [[ids]], "encoding_format": "float" | "base64",
// "dimensions": N, "pooling": "mean" | "last" (specula extension; default: the GGUF's
// {arch}.pooling_type when it says mean or last, else mean), "normalize": true | false
// (specula extension; false: the pooled vector without L2 normalisation)} -> OpenAI's list of
// embeddings, computed by engine/embeddings.h (BOS added; control text not parsed). One
// input per turn of the engine loop: decoding rows step between them. `dimensions` keeps
// the first N values and L2-normalises them again, as OpenAI documents for its models that
// allow shortening (text-embedding-3-*); it is meaningful for Matryoshka-trained models.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "engine/embeddings.h"
#include "server/generation.h"
#include "server/json_util.h"
#include "server/routes.h"

namespace specula::server {

using json = nlohmann::ordered_json;

namespace {

std::string base64(const uint8_t* p, size_t n) {
  static const char* const kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (i + 1 < n ? uint32_t{p[i + 1]} << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[v & 63] : '=';
  }
  return out;
}

// The first n values of an L2-normalised vector, normalised again.
void shorten(std::vector<float>& v, size_t n) {
  v.resize(std::min(n, v.size()));
  double norm = 0;
  for (float x : v) norm += static_cast<double>(x) * x;
  const double scale = norm > 0 ? 1.0 / std::sqrt(norm) : 0.0;
  for (float& x : v) x = static_cast<float>(x * scale);
}

// The inputs as token ids, or the 400.
std::optional<ApiError> read_inputs(const ServedModel& served, const json* in, std::vector<std::vector<int32_t>>* inputs) {
  const tokenizer::Tokenizer& tok = served.tokenizer();
  auto bad_input = [](const std::string& why) { return bad_request("input", "'input' " + why); };
  auto ids_of = [&](const json& arr, std::vector<int32_t>* out) {
    for (const json& t : arr) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.vocab().size()) return false;
      out->push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return true;
  };
  if (in == nullptr) return bad_input("is required");
  if (in->is_string()) {
    inputs->push_back(tok.encode(in->get<std::string>(), true, false));
  } else if (in->is_array() && !in->empty() && (*in)[0].is_number_integer()) {
    inputs->emplace_back();
    if (!ids_of(*in, &inputs->back())) return bad_input("token ids must be integers in the vocabulary");
  } else if (in->is_array() && !in->empty() && in->size() <= 256) {
    for (const json& x : *in) {
      inputs->emplace_back();
      if (x.is_string()) {
        inputs->back() = tok.encode(x.get<std::string>(), true, false);
      } else if (!x.is_array() || !ids_of(x, &inputs->back())) {
        return bad_input("must be a string, an array of strings, or token ids (arrays of integers)");
      }
    }
  } else {
    return bad_input("must be a non-empty string or array (at most 256 inputs)");
  }
  const int64_t n_ctx = served.options().engine.n_ctx;
  for (size_t k = 0; k < inputs->size(); ++k) {
    if ((*inputs)[k].empty()) return bad_input("item " + std::to_string(k) + " has no tokens");
    if (static_cast<int64_t>((*inputs)[k].size()) > n_ctx)
      return api_error(StatusCode::kContextOverflow,
                       "input " + std::to_string(k) + " has " + std::to_string((*inputs)[k].size()) +
                           " tokens; the context holds " + std::to_string(n_ctx),
                       "input");
  }
  return std::nullopt;
}

}  // namespace

void handle_embeddings(ServedModel& served, const http::Request& req, http::Exchange& ex) {
  auto parsed = parse_body_object(req.body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  const json& j = std::get<json>(parsed);
  if (auto e = only_fields(j, {"input", "model", "encoding_format", "pooling", "user", "dimensions", "normalize"}, "/v1/embeddings"))
    return send_error(ex, *e);
  std::optional<int64_t> dimensions;
  FieldReader p{j, std::nullopt};
  if (!p.integer("dimensions", 1, served.model().info().n_embd, &dimensions)) return send_error(ex, *p.error);
  bool normalize = true;
  p.boolean("normalize", &normalize);
  if (p.error) return send_error(ex, *p.error);
  if (dimensions && !normalize)
    return send_error(ex, bad_request("normalize", "'dimensions' shortens a normalised embedding; it needs 'normalize': true"));
  if (j.contains("model") && !j["model"].is_null() && !j["model"].is_string())
    return send_error(ex, bad_request("model", "'model' must be a string"));  // any name: one model is served
  const std::string format = j.contains("encoding_format") && j["encoding_format"].is_null()
                                 ? "float"
                             : j.contains("encoding_format") ? string_field(j, "encoding_format", "?")
                                                             : "float";
  if (format != "float" && format != "base64")
    return send_error(ex, bad_request("encoding_format", "'encoding_format' must be \"float\" or \"base64\""));
  std::string pooling = served.default_pooling();
  if (j.contains("pooling") && !j["pooling"].is_null()) {
    if (!(j["pooling"] == "mean" || j["pooling"] == "last"))
      return send_error(ex, bad_request("pooling", "'pooling' must be \"mean\" or \"last\""));
    pooling = j["pooling"].get<std::string>();
  }
  std::vector<std::vector<int32_t>> inputs;
  if (auto e = read_inputs(served, j.contains("input") ? &j["input"] : nullptr, &inputs)) return send_error(ex, *e);
  int64_t n_tokens = 0;
  for (const auto& ids : inputs) n_tokens += static_cast<int64_t>(ids.size());
  json data = json::array();
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (ex.client_gone()) return;  // nobody to answer
    if (served.stop_requested())
      return send_error(ex, api_error(StatusCode::kUnavailable, "the server is shutting down"));
    auto v = embed(served.engine(), inputs[k], pooling == "last" ? Pooling::kLast : Pooling::kMean, normalize);
    if (!v) {
      if (v.status().code() == StatusCode::kUnavailable)
        return send_error(ex, api_error(StatusCode::kUnavailable, "the server is shutting down"));
      return send_error(ex, from_status(v.status()));
    }
    if (dimensions) shorten(*v, static_cast<size_t>(*dimensions));
    json emb = format == "base64" ? json(base64(reinterpret_cast<const uint8_t*>(v->data()), v->size() * sizeof(float)))
                                  : json(*v);
    data.push_back({{"object", "embedding"}, {"index", k}, {"embedding", std::move(emb)}});
  }
  send_json(ex, json{{"object", "list"}, {"data", std::move(data)}, {"model", served.id()},
                     {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}});
}

}  // namespace specula::server
