// server/routes.h — the handlers of every route the server answers, each taking what it
// uses explicitly (the served model, the request, the exchange). server.cpp's route table
// maps method + path to them. Each runs on an HTTP worker thread and answers exactly once
// (or not at all when its client has gone).
//
//   POST /v1/completions                       handle_completion   (openai_api.cpp)
//   POST /v1/chat/completions, /chat/completions handle_completion  (openai_api.cpp)
//   POST /completion, /completions, /infill    handle_native_completion, handle_infill (llama_api.cpp)
//   GET  /props, /slots                        handle_props, handle_slots (llama_api.cpp)
//   POST /rerank, /v1/rerank                   handle_not_supported (llama_api.cpp: 501)
//   GET/POST /lora-adapters                    handle_lora_list, handle_lora_scales (side_routes.cpp)
//   POST /v1/load_lora_adapter, /v1/unload_lora_adapter  handle_lora_load (side_routes.cpp)
//   POST /v1/messages, /v1/messages/count_tokens handle_messages    (anthropic_api.cpp)
//   POST /v1/responses                         handle_responses    (responses_api.cpp)
//   GET/DELETE /v1/responses/{id}, .../cancel, .../input_items  handle_response_item (responses_api.cpp)
//   POST /v1/embeddings, /embeddings, /embedding handle_embeddings (embeddings.cpp)
//   GET  /v1/models, /models                   handle_models       (side_routes.cpp)
//   POST /tokenize, /detokenize, /apply-template  handle_tokenize, ... (side_routes.cpp)
//   POST /admin/cache/flush                    handle_cache_flush  (side_routes.cpp)
//   GET  /server_info, /model_info, /get_load  handle_server_info, ... (router_api.h: SGLang's and
//   POST /generate, /v1/.../render             handle_generate, handle_render   vLLM's worker routes)
//   GET  /metrics                              metrics_text        (metrics.h)
//   GET  /health, /v1/health                   server.cpp
//   GET  /                                     serve_webui         (webui.cpp: the chat page)
//   OPTIONS any path                           server.cpp          (CORS preflight)
#pragma once

#include "server/generation.h"
#include "server/http.h"
#include "server/request.h"
#include "server/served_model.h"

namespace specula::server {

// The API routes, the table above but /health and /metrics (the HTTP server's own): runs
// the handler of req.method + req.path and returns true (a known path with another method:
// a 405 answer); false, answering nothing, when no API route has that path. The server's
// route table and the library's calls (capi/) both come here.
bool route_api(ServedModel& served, const http::Request& req, http::Exchange& ex, GenerationLog* log);
// Whether some API route (any method) has this path.
bool is_api_path(const std::string& path);

// The generation routes fill `log` for the request log line.
void handle_completion(ServedModel& served, const http::Request& req, http::Exchange& ex, Endpoint endpoint,
                       GenerationLog* log);
void handle_messages(ServedModel& served, const http::Request& req, http::Exchange& ex, bool count_tokens,
                     GenerationLog* log);
void handle_embeddings(ServedModel& served, const http::Request& req, http::Exchange& ex);
void handle_models(const ServedModel& served, http::Exchange& ex);
void handle_tokenize(const ServedModel& served, const http::Request& req, http::Exchange& ex);
void handle_detokenize(const ServedModel& served, const http::Request& req, http::Exchange& ex);
void handle_apply_template(const ServedModel& served, const http::Request& req, http::Exchange& ex);
void handle_cache_flush(const ServedModel& served, const http::Request& req, http::Exchange& ex);
// LoRA adapters (server/lora_adapters.h): llama-server's list and global scales, vLLM's
// run-time load (load true) and unload.
void handle_lora_list(const ServedModel& served, http::Exchange& ex);
void handle_lora_scales(const ServedModel& served, const http::Request& req, http::Exchange& ex);
void handle_lora_load(ServedModel& served, const http::Request& req, http::Exchange& ex, bool load);
// Vertex AI's predict route (ServerOptions::predict_route): each instance on its route.
void handle_predict(ServedModel& served, const http::Request& req, http::Exchange& ex);

}  // namespace specula::server
