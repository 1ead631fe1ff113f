// server/side_routes.cpp — the routes around generation: GET /v1/models, llama-server's
// POST /tokenize, /detokenize and /apply-template, and POST /admin/cache/flush (see
// routes.h). Errors in OpenAI's shape.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "server/engine_request.h"
#include "server/generation.h"
#include "server/json_util.h"
#include "server/openai_api.h"
#include "server/routes.h"

namespace specula::server {

using json = nlohmann::ordered_json;

void handle_models(const ServedModel& served, http::Exchange& ex) {
  const ModelInfo& info = served.model().info();
  const EngineOptions& eo = served.options().engine;
  json m = {{"id", served.id()},
            {"object", "model"},
            {"created", unix_now()},
            {"owned_by", "specula"},
            {"aliases", served.options().model_aliases.empty() ? std::vector<std::string>{served.id()}
                                                                : served.options().model_aliases},
            {"tags", served.options().model_tags},
            {"meta",
             {{"architecture", info.architecture},
              {"n_vocab", info.n_vocab},
              {"n_embd", info.n_embd},
              {"n_ctx_train", info.n_ctx_train},
              {"n_ctx", eo.n_ctx},
              {"parallel", eo.n_rows},
              {"chat_template", served.chat_template() ? served.chat_template_origin() : "none"}}}};
  json data = json::array({m});
  // LoRA adapters, as vLLM lists them: their own ids, "parent" the base model.
  for (const LoraEntry& e : served.lora().list())
    data.push_back(json{{"id", e.name},
                        {"object", "model"},
                        {"created", unix_now()},
                        {"owned_by", "specula"},
                        {"root", e.path},
                        {"parent", served.id()},
                        {"meta", {{"lora_id", e.id}, {"scale", e.scale}, {"format", e.adapter->format()},
                                  {"rank", e.adapter->max_rank()}, {"alpha", e.adapter->alpha()}}}});
  send_json(ex, json{{"object", "list"}, {"data", data}});
}

// GET /lora-adapters: llama-server's list [{"id", "path", "scale"}] (plus "name").
void handle_lora_list(const ServedModel& served, http::Exchange& ex) {
  json out = json::array();
  for (const LoraEntry& e : served.lora().list())
    out.push_back(json{{"id", e.id}, {"name", e.name}, {"path", e.path}, {"scale", e.scale}});
  send_json(ex, out);
}

// POST /lora-adapters [{"id", "scale"}]: llama-server's global scales (ids left out, and a
// scale left out: 0; an id listed twice: its last scale).
void handle_lora_scales(const ServedModel& served, const http::Request& req, http::Exchange& ex) {
  json j = json::parse(req.body, nullptr, false);
  if (j.is_discarded() || !j.is_array())
    return send_error(ex, bad_request("", "the body must be a JSON list of {\"id\": integer, \"scale\": number}"));
  std::vector<std::pair<int64_t, float>> scales;
  for (size_t i = 0; i < j.size(); ++i) {
    const json& e = j[i];
    std::string at = "[";  // (not "[" + ...: GCC 12's -Wrestrict false positive)
    at += std::to_string(i);
    at += ']';
    if (!e.is_object() || !e.contains("id") || !e["id"].is_number_integer())
      return send_error(ex, bad_request("id", at + " must be {\"id\": integer, \"scale\": number}"));
    double scale = 0.0;
    if (e.contains("scale")) {
      if (!e["scale"].is_number() || !std::isfinite(e["scale"].get<double>()) || std::fabs(e["scale"].get<double>()) > 1e4)
        return send_error(ex, bad_request("scale", at + ".scale must be a finite number (|scale| <= 10000)"));
      scale = e["scale"].get<double>();
    }
    scales.push_back({e["id"].get<int64_t>(), static_cast<float>(scale)});
  }
  const Status st = served.lora().set_scales(scales);
  if (!st.is_ok()) return send_error(ex, from_status(st, "id"));
  send_json(ex, json{{"success", true}});
}

// POST /v1/load_lora_adapter {"lora_name", "lora_path"} and /v1/unload_lora_adapter
// {"lora_name"}: vLLM's run-time routes (--lora-runtime-updates), answered in its words.
void handle_lora_load(ServedModel& served, const http::Request& req, http::Exchange& ex, bool load) {
  if (!served.options().lora_runtime_updates)
    return send_error(ex, api_error(StatusCode::kPermissionDenied,
                                    "loading and unloading LoRA adapters at run time is off (serve --lora-runtime-updates)"));
  auto parsed = parse_body_object(req.body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  const json& j = std::get<json>(parsed);
  auto unknown = load ? only_fields(j, {"lora_name", "lora_path", "load_inplace"}, "/v1/load_lora_adapter")
                      : only_fields(j, {"lora_name", "lora_int_id"}, "/v1/unload_lora_adapter");
  if (unknown) return send_error(ex, *unknown);
  if (!j.contains("lora_name") || !j["lora_name"].is_string() || j["lora_name"].get<std::string>().empty())
    return send_error(ex, bad_request("lora_name", "'lora_name' must be a non-empty string"));
  const std::string name = j["lora_name"].get<std::string>();
  if (!load) {
    const Status st = served.lora().remove(name);
    if (!st.is_ok()) return send_error(ex, from_status(st, "lora_name"));
    ex.respond(200, "text/plain; charset=utf-8", "Success: LoRA adapter '" + name + "' removed successfully.", {});
    return;
  }
  if (!j.contains("lora_path") || !j["lora_path"].is_string() || j["lora_path"].get<std::string>().empty())
    return send_error(ex, bad_request("lora_path", "'lora_path' must be a non-empty string"));
  if (served.is_own_name(name))
    return send_error(ex, bad_request("lora_name", "'" + name + "' is the base model's name"));
  // vLLM's load_inplace: a name already loaded is replaced (requests running keep the old one).
  const bool inplace = j.contains("load_inplace") && j["load_inplace"] == true;
  if (served.lora().by_name(name) && !inplace)
    return send_error(ex, bad_request("lora_name", "The lora adapter '" + name + "' has already been loaded."));
  const std::string path = j["lora_path"].get<std::string>();
  auto adapter = served.model().load_lora(path);
  if (!adapter) return send_error(ex, bad_request("lora_path", adapter.status().user_message()));
  if (inplace) (void)served.lora().remove(name);
  auto added = served.lora().add(name, path, std::move(adapter).value(), 0.0f, true);
  if (!added) return send_error(ex, from_status(added.status(), "lora_name"));
  ex.respond(200, "text/plain; charset=utf-8", "Success: LoRA adapter '" + name + "' added successfully.", {});
}

// POST /tokenize {"content": TEXT, "add_special": false, "parse_special": true,
// "with_pieces": false} -> {"tokens": [ids]} (with_pieces: [{"id", "piece"}], the piece
// as text when it is valid UTF-8, else as a byte array), as llama-server.
void handle_tokenize(const ServedModel& served, const http::Request& req, http::Exchange& ex) {
  auto parsed = parse_body_object(req.body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  const json& j = std::get<json>(parsed);
  if (auto e = only_fields(j, {"content", "add_special", "parse_special", "with_pieces"}, "/tokenize"))
    return send_error(ex, *e);
  if (!j.contains("content") || !j["content"].is_string())
    return send_error(ex, bad_request("content", "'content' must be a string"));
  bool add_special = false, parse_special = true, with_pieces = false;
  FieldReader p{j, std::nullopt};
  p.boolean("add_special", &add_special);
  p.boolean("parse_special", &parse_special);
  p.boolean("with_pieces", &with_pieces);
  if (p.error) return send_error(ex, *p.error);
  const tokenizer::Tokenizer& tok = served.tokenizer();
  const std::vector<int32_t> ids = tok.encode(j["content"].get<std::string>(), add_special, parse_special);
  json tokens = json::array();
  for (int32_t id : ids) {
    if (!with_pieces) {
      tokens.push_back(id);
      continue;
    }
    const std::string piece = tok.token_to_piece(id, /*render_special=*/true);
    json jp = piece;
    try {
      (void)jp.dump();  // strict: throws on invalid UTF-8 (a piece of a multi-byte character)
    } catch (const json::exception&) {
      jp = json::array();
      for (unsigned char b : piece) jp.push_back(b);
    }
    tokens.push_back({{"id", id}, {"piece", jp}});
  }
  send_json(ex, json{{"tokens", tokens}});
}

// POST /detokenize {"tokens": [ids]} -> {"content": TEXT} (control tokens rendered).
void handle_detokenize(const ServedModel& served, const http::Request& req, http::Exchange& ex) {
  auto parsed = parse_body_object(req.body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  const json& j = std::get<json>(parsed);
  if (auto e = only_fields(j, {"tokens"}, "/detokenize")) return send_error(ex, *e);
  if (!j.contains("tokens") || !j["tokens"].is_array())
    return send_error(ex, bad_request("tokens", "'tokens' must be an array of token ids"));
  const tokenizer::Tokenizer& tok = served.tokenizer();
  std::vector<int32_t> ids;
  for (const json& t : j["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.vocab().size())
      return send_error(ex, bad_request("tokens", "token " + t.dump().substr(0, 40) + " is not an id in [0, " +
                                                      std::to_string(tok.vocab().size()) + ")"));
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  auto text = tok.decode(ids, /*remove_special=*/false, /*render_special=*/true);
  if (!text) return send_error(ex, bad_request("tokens", text.status().user_message()));
  send_json(ex, json{{"content", *text}});  // invalid UTF-8 (a cut character) becomes U+FFFD
}

// POST /apply-template {a chat request} -> {"prompt": the rendered chat prompt} (llama-
// server's route): the text the model would see, before tokenization.
void handle_apply_template(const ServedModel& served, const http::Request& req, http::Exchange& ex) {
  auto parsed = parse_completion_request(req.body, Endpoint::kChat, served.sampling_defaults());
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  auto prompt = render_chat_prompt(served, std::get<CompletionParams>(parsed));
  if (auto* e = std::get_if<ApiError>(&prompt)) return send_error(ex, *e);
  send_json(ex, json{{"prompt", std::get<std::string>(prompt)}});
}

// The prompt cache's durability point: returns once every entry stored so far is on disk.
// Loopback clients only, or any client with the API key.
void handle_cache_flush(const ServedModel& served, const http::Request& req, http::Exchange& ex) {
  const bool loopback = req.remote_addr == "127.0.0.1" || req.remote_addr == "::1" ||
                        req.remote_addr.rfind("::ffff:127.", 0) == 0;
  if (served.options().api_key.empty() && !loopback)
    return send_error(ex, api_error(StatusCode::kPermissionDenied, "cache flush is allowed from loopback or with an API key"));
  const auto& cache = served.options().engine.prompt_cache;
  if (!cache) return send_error(ex, bad_request("", "this server runs without a prompt cache"));
  const Status st = cache->flush();
  if (!st.is_ok()) return send_error(ex, api_error(StatusCode::kInternal, st.user_message()));
  const PromptCacheStats cs = cache->stats();
  send_json(ex, json{{"flushed", true}, {"disk_entries", cs.disk_entries}, {"disk_bytes", cs.disk_bytes}});
}

}  // namespace specula::server
