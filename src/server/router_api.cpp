// server/router_api.cpp — see router_api.h: the routes routers ask of a worker (SGLang's
// server/model info, load and /generate; vLLM's render).
#include "server/router_api.h"

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/answer_format.h"
#include "server/engine_request.h"
#include "server/json_util.h"
#include "server/openai_api.h"

#ifndef SPECULA_VERSION
#define SPECULA_VERSION "0.0.0"
#endif

namespace specula::server {

using json = nlohmann::ordered_json;

namespace {

// SGLang's max_new_tokens when a request gives none (SamplingParams' default).
constexpr int64_t kSglangDefaultMaxNewTokens = 128;

// ---------------------------------------------------------------- /generate's answer

// [[logprob, token_id, text or null], ...] — SGLang's logprob entries (text only with
// return_text_in_logprobs).
json logprob_entry(float lp, int32_t id, const std::string& text, bool with_text) {
  return json::array({static_cast<double>(lp), id, with_text ? json(text) : json(nullptr)});
}

class SglangFormat : public AnswerFormat {
 public:
  explicit SglangFormat(bool text_in_logprobs) : text_in_logprobs_(text_in_logprobs) {}
  std::unique_ptr<AnswerFormat> another() const override { return std::make_unique<SglangFormat>(text_in_logprobs_); }
  json error_body(const ApiError& e) const override { return openai_error_body(e); }
  std::string id_prefix() const override { return "gen-"; }
  bool wants_prompt_text(const CompletionParams&) const override { return true; }  // (and the token ids)

  json whole(const std::string& text, const std::vector<TokenLogprob>& lps, const CompletionStream::Update& u) override {
    return object(text, u.token_ids, lps, &u);
  }
  // Several prompts (or n > 1): a list of objects, as SGLang answers a batch.
  json combine(std::vector<json> choices, const Usage&) const override {
    if (choices.size() == 1) return std::move(choices.front());
    json arr = json::array();
    for (json& c : choices) arr.push_back(std::move(c));
    return arr;
  }
  std::string stream_piece(const CompletionStream::Update& u) override {
    ids_.insert(ids_.end(), u.token_ids.begin(), u.token_ids.end());
    text_ += u.text;
    lps_.insert(lps_.end(), u.logprobs.begin(), u.logprobs.end());
    if (u.text.empty() && u.logprobs.empty()) return "";
    return sse(object(text_, ids_, lps_, nullptr));
  }
  std::string stream_end(const CompletionStream::Update& u) override {
    if (u.summary.outcome == Outcome::kFailed || u.summary.outcome == Outcome::kCancelled)
      return sse(openai_error_body(generation_error(u, g_.params)));
    // (stream_piece already took this update's tokens.)
    return sse(object(text_, ids_, lps_, &u));
  }
  std::string stream_close(const Usage*) override { return "data: [DONE]\n\n"; }

 private:
  // One prompt's answer so far (`end`: its final update, or null while it streams).
  json object(const std::string& text, const std::vector<int32_t>& ids, const std::vector<TokenLogprob>& lps,
              const CompletionStream::Update* end) const {
    const CompletionParams& c = *g_.params;
    json meta = {{"id", g_.id + (g_.index > 0 ? "-" + std::to_string(g_.index) : "")},
                 {"finish_reason", end ? finish_reason(*end) : json(nullptr)},
                 {"prompt_tokens", g_.n_prompt},
                 {"completion_tokens", end ? end->summary.n_generated : static_cast<int64_t>(ids.size())},
                 {"cached_tokens", end ? end->summary.cached_tokens : 0},
                 {"weight_version", "default"}};
    if (end) {
      const RequestSummary& s = end->summary;
      meta["e2e_latency"] = s.queue_seconds + s.prefill_seconds + s.decode_seconds;
    }
    if (c.logprobs >= 0) {
      json out = json::array(), top = json::array();
      for (const TokenLogprob& t : lps) {
        out.push_back(logprob_entry(t.logprob, t.id, t.token, text_in_logprobs_));
        json alts = json::array();
        for (size_t k = 0; k < t.top.size(); ++k)
          alts.push_back(logprob_entry(t.top[k].second, k < t.top_ids.size() ? t.top_ids[k] : -1, t.top[k].first,
                                       text_in_logprobs_));
        top.push_back(c.logprobs > 0 ? alts : json(nullptr));
      }
      meta["input_token_logprobs"] = json::array();
      meta["output_token_logprobs"] = out;
      meta["input_top_logprobs"] = json::array();
      meta["output_top_logprobs"] = top;
    }
    json ids_json = json::array();
    for (int32_t id : ids) ids_json.push_back(id);
    return json{{"text", text}, {"output_ids", ids_json}, {"meta_info", meta}};
  }
  json finish_reason(const CompletionStream::Update& u) const {
    if (u.finish_reason == "length")
      return json{{"type", "length"}, {"length", g_.params->max_tokens ? *g_.params->max_tokens : u.summary.n_generated}};
    if (u.finish_reason == "stop")
      return json{{"type", "stop"}, {"matched", u.stop_sequence.empty() ? json(nullptr) : json(u.stop_sequence)}};
    return json{{"type", "abort"}, {"message", u.finish_reason}};
  }

  bool text_in_logprobs_;
  std::vector<int32_t> ids_;
  std::string text_;
  std::vector<TokenLogprob> lps_;
};

// ---------------------------------------------------------------- /generate's request

// SGLang's sampling_params -> the fields of llama-server's native /completion body (whose
// parser then checks ranges and types). Fields SGLang has and specula would ignore are
// refused unless at their defaults.
std::optional<ApiError> translate_sampling(const json& sp, json* body) {
  if (!sp.is_object()) return bad_request("sampling_params", "'sampling_params' must be an object");
  for (auto it = sp.begin(); it != sp.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    const std::string param = "sampling_params." + k;
    if (v.is_null()) continue;
    if (k == "max_new_tokens") {
      (*body)["n_predict"] = v;
    } else if (k == "temperature" || k == "top_p" || k == "min_p" || k == "frequency_penalty" ||
               k == "presence_penalty" || k == "stop" || k == "ignore_eos" || k == "regex" || k == "n") {
      (*body)[k] = v;
    } else if (k == "top_k") {
      // SGLang's -1 (and llama.cpp's 0) is "no top-k".
      (*body)["top_k"] = v.is_number_integer() && v.get<int64_t>() < 0 ? json(0) : v;
    } else if (k == "repetition_penalty") {
      (*body)["repeat_penalty"] = v;
    } else if (k == "sampling_seed") {
      (*body)["seed"] = v;
    } else if (k == "json_schema") {
      // A JSON text in SGLang.
      if (!v.is_string()) return bad_request(param, "'" + param + "' must be a string (a JSON schema)");
      // (Parsed as a body is: its nesting bounded, so nothing below recurses deeply.)
      auto schema = parse_body_object(v.get<std::string>());
      if (std::holds_alternative<ApiError>(schema))
        return bad_request(param, "'" + param + "' is not a JSON object of bounded nesting: " +
                                      std::get<ApiError>(schema).message);
      (*body)["json_schema"] = std::get<json>(std::move(schema));
    } else if (k == "skip_special_tokens" || k == "spaces_between_special_tokens") {
      if (v != json(true)) return bad_request(param, "'" + param + "' is only supported as true");
    } else if (k == "no_stop_trim") {
      if (v != json(false)) return bad_request(param, "'" + param + "' is only supported as false");
    } else if (k == "min_new_tokens") {
      if (v != json(0)) return bad_request(param, "'" + param + "' is not supported (only 0)");
    } else if (k == "stop_token_ids") {
      if (!v.is_array() || !v.empty()) return bad_request(param, "'" + param + "' is not supported (send stop strings)");
    } else {
      return bad_request(param, "'" + param + "' is not supported");
    }
  }
  return std::nullopt;
}

// SGLang's /generate body -> CompletionParams (through the native /completion parser).
std::variant<CompletionParams, ApiError> parse_generate(const std::string& text, const ServedModel& served,
                                                        bool* text_in_logprobs) {
  auto parsed = parse_body_object(text);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
  json body = json::object();
  bool return_logprob = false;
  int64_t top_logprobs = 0;
  bool have_prompt = false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (v.is_null()) continue;  // null: the field's default
    if (k == "text" || k == "input_ids") {
      if (v.is_null()) continue;
      if (have_prompt) return bad_request(k, "send either 'text' or 'input_ids', not both");
      have_prompt = true;
      body["prompt"] = v;
    } else if (k == "sampling_params") {
      if (v.is_null()) continue;
      if (auto e = translate_sampling(v, &body)) return *e;
    } else if (k == "stream") {
      body["stream"] = v;
    } else if (k == "rid" || k == "model") {
      // The request id (SGLang's own, for /abort_request) and a model the router echoes.
    } else if (k == "return_logprob") {
      if (!v.is_null() && !v.is_boolean()) return bad_request(k, "'return_logprob' must be a boolean");
      return_logprob = v.is_boolean() && v.get<bool>();
    } else if (k == "top_logprobs_num") {
      if (!v.is_null() && (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 20))
        return bad_request(k, "'top_logprobs_num' must be an integer in [0, 20]");
      top_logprobs = v.is_null() ? 0 : v.get<int64_t>();
    } else if (k == "return_text_in_logprobs") {
      if (!v.is_boolean()) return bad_request(k, "'return_text_in_logprobs' must be a boolean");
      *text_in_logprobs = v.get<bool>();
    } else if (k == "logprob_start_len") {
      if (!v.is_null() && v != json(-1)) return bad_request(k, "'logprob_start_len' is only supported as -1 (no prompt logprobs)");
    } else if (k == "log_metrics" || k == "no_logs" || k == "background") {
      // Logging and SGLang's background mode flags: no effect on the answer.
    } else if (k == "return_hidden_states" || k == "return_bytes" || k == "return_entropy") {
      if (!v.is_null() && v != json(false)) return bad_request(k, "'" + k + "' is not supported");
    } else {
      return bad_request(k, "'" + k + "' is not supported by /generate");
    }
  }
  if (!have_prompt) return bad_request("text", "'text' or 'input_ids' is required");
  if (!body.contains("n_predict")) body["n_predict"] = kSglangDefaultMaxNewTokens;
  auto params = parse_native_completion_request(dump_json(body), served.sampling_defaults());
  if (auto* e = std::get_if<ApiError>(&params)) {
    // The native parser names its own fields; give them SGLang's names back.
    if (e->param == "n_predict") e->param = "sampling_params.max_new_tokens";
    if (e->param == "prompt") e->param = body["prompt"].is_string() ? "text" : "input_ids";
    return *e;
  }
  CompletionParams c = std::get<CompletionParams>(std::move(params));
  c.logprobs = return_logprob ? static_cast<int32_t>(top_logprobs) : -1;
  c.max_tokens_field = "max_new_tokens";
  return c;
}

}  // namespace

// ---------------------------------------------------------------- routes

void handle_server_info(const ServedModel& served, http::Exchange& ex) {
  const ServerOptions& o = served.options();
  const EngineOptions& eo = o.engine;
  const int64_t total = eo.total_ctx > 0 ? eo.total_ctx : eo.n_ctx * eo.n_rows;
  send_json(ex, json{{"model_path", o.model_path},
                     {"tokenizer_path", o.model_path},
                     {"served_model_name", served.id()},
                     {"tp_size", 1},
                     {"dp_size", 1},
                     {"disaggregation_mode", "null"},
                     {"version", SPECULA_VERSION},
                     {"max_running_requests", eo.n_rows},
                     {"max_batch_size", eo.n_rows},
                     {"max_total_tokens", total},
                     {"max_prefill_tokens", eo.step_tokens},
                     {"context_length", eo.n_ctx},
                     {"max_queued_requests", eo.max_queue},
                     {"is_generation", true},
                     {"engine", "specula"}});
}

void handle_model_info(const ServedModel& served, http::Exchange& ex) {
  const ServerOptions& o = served.options();
  send_json(ex, json{{"model_path", o.model_path},
                     {"tokenizer_path", o.model_path},
                     {"is_generation", true},
                     {"preferred_sampling_params", nullptr},
                     {"weight_version", "default"},
                     {"has_image_understanding", false},
                     {"has_audio_understanding", false},
                     {"model_type", served.model().info().architecture},
                     {"architectures", nullptr}});
}

void handle_get_load(const ServedModel& served, http::Exchange& ex) {
  const EngineStats s = served.engine().stats();
  send_json(ex, json::array({json{{"dp_rank", 0},
                                  {"num_reqs", s.running_rows + s.queue_depth},
                                  {"num_waiting_reqs", s.queue_depth},
                                  {"num_tokens", s.kv_tokens}}}));
}

void handle_generate(ServedModel& served, const http::Request& req, http::Exchange& ex, GenerationLog* log) {
  bool text_in_logprobs = false;
  auto parsed = parse_generate(req.body, served, &text_in_logprobs);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  SglangFormat fmt(text_in_logprobs);
  run_generation(served, std::get<CompletionParams>(parsed), ex, fmt, log);
}

void handle_render(ServedModel& served, const http::Request& req, http::Exchange& ex, Endpoint endpoint) {
  auto parsed = parse_completion_request(req.body, endpoint, served.sampling_defaults());
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  const CompletionParams& c = std::get<CompletionParams>(parsed);
  if (auto e = check_request(served, c, StatusCode::kInvalidArgument)) return send_error(ex, *e);
  const size_t n = endpoint == Endpoint::kChat ? 1 : c.prompts.size();
  json out = json::array();
  for (size_t i = 0; i < n; ++i) {
    std::vector<int32_t> ids;
    if (auto e = build_prompt(served, c, &ids, i)) return send_error(ex, *e);
    out.push_back(json{{"request_id", std::string(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") +
                                          std::to_string(served.random_seed())},
                       {"token_ids", ids},
                       {"model", served.id()}});
  }
  // vLLM: one object for a chat request, a list (one per prompt) for completions.
  send_json(ex, endpoint == Endpoint::kChat ? out[0] : out);
}

void handle_health_generate(ServedModel& served, http::Exchange& ex) {
  // One token from a one-token prompt: the engine admits, prefills and samples.
  CompletionParams c;
  c.endpoint = Endpoint::kCompletions;
  CompletionParams::Prompt p;
  p.is_ids = true;
  p.ids = {0};
  c.prompts.push_back(p);
  c.max_tokens = 1;
  c.seed_given = true;
  SglangFormat fmt(false);
  BufferExchange bx;
  run_generation(served, c, bx, fmt);
  if (bx.status() == 200) {
    ex.respond(200, "application/json", R"({"status":"ok"})");
    return;
  }
  ApiError e = api_error(StatusCode::kUnavailable, "the engine did not generate: " + bx.body());
  send_error(ex, e);
}

}  // namespace specula::server
