// server/options.h — what `specula serve` is told at start (its flags): where to listen,
// limits and deadlines of the connection layer, the served model's id and chat template,
// the engine's options, and logging.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <memory>

#include "engine/engine.h"
#include "server/response_store.h"

namespace specula::server {

// A LoRA adapter to load at start (server/lora_adapters.h): `serve --lora NAME=PATH` (scale 0:
// on request only) or `--lora PATH` / `--lora-scaled PATH S` (on for every request).
struct LoraSpec {
  std::string name, path;
  float scale = 0.0f;
  bool named = false;  // NAME=PATH
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (see Server::port())
  std::string api_key;              // empty: no auth
  std::string model_id;             // the id clients send as "model"; empty: the model's name
  std::vector<std::string> model_aliases;  // every name of the model (--alias a,b,c), model_id among them
  std::vector<std::string> model_tags;     // free labels listed by /models (--tags)
  std::string model_path;           // the file or folder it was loaded from (/props)
  std::optional<std::string> chat_template;  // source overriding the model's own (--chat-template-file)
  size_t max_body_bytes = 1 << 20;  // larger bodies get 413
  int max_connections = 1024;       // more get 503 (--max-connections)
  double header_timeout_s = 10;     // request line + headers deadline (--timeout-header)
  double body_timeout_s = 10;       // body deadline beyond its size at 64 KiB/s (--timeout-body)
  double write_timeout_s = 30;      // per response write: a client that stops reading is dropped
  EngineOptions engine;             // rows (--parallel), context, KV budget and cache types, queue
  // Server::drain() (SIGTERM in the CLI): seconds requests in flight may take to finish
  // before what still runs is cancelled (--drain-timeout); 0: cancel at once.
  double drain_timeout_s = 30;
  // Seconds after drain() during which new requests are still admitted while /health already
  // answers 503 (--drain-grace): a router or load balancer that polls /health takes the
  // replica out within its interval, and what it sends meanwhile is served, not refused.
  // Counted within drain_timeout_s (the grace ends at the timeout at the latest); 0: refuse at once.
  double drain_grace_s = 0;
  bool log_requests = true;         // one line per request on stderr (--log-requests; server.h)
  std::string pooling;              // embeddings: "mean" | "last"; empty: the model's, else mean
  std::vector<LoraSpec> lora;       // adapters loaded at start (--lora, --lora-scaled)
  // POST /v1/load_lora_adapter and /v1/unload_lora_adapter answer (--lora-runtime-updates;
  // vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING): they read files the server can reach, so off by
  // default (403).
  bool lora_runtime_updates = false;

  // Request defaults, as llama-server's --temp, --seed and --n-predict: what a request
  // that leaves the field out gets (unset: llama-server's per-request defaults, the
  // model's generation_config where it has one, a random seed, no token limit).
  std::optional<float> default_temperature;
  std::optional<uint64_t> default_seed;
  std::optional<int32_t> default_n_predict;

  // CORS (--cors-origin; the Fetch standard's CORS protocol): "*" (llama-server's default:
  // the request's Origin is echoed with credentials allowed, so any web page may call the
  // server — set an API key), "localhost" (only http(s)://localhost / 127.0.0.1 / [::1]
  // origins are echoed), "" (no CORS headers: browsers on other origins are refused), or a
  // comma-separated list of origins, each echoed when it is the request's.
  std::string cors_origins = "*";
  bool webui = true;   // the chat page at / (--no-webui: off)
  bool slots = true;   // GET /slots (--no-slots: 501, as llama-server)
  bool metrics = true; // GET /metrics (--no-metrics: 501, as llama-server without --metrics)
  bool verbose = false;  // every OpenAI answer carries "__verbose" (--verbose, as llama-server's)
  // Reasoning models (--reasoning): "auto" and "on" give templates enable_thinking true;
  // "off" asks them not to think (enable_thinking false, and an empty thinking block after
  // a generation prompt that opens one, as llama-server does).
  std::string reasoning = "auto";
  // --reasoning-format: "auto" splits a reasoning model's thinking out of the content
  // (chat/reasoning.h), "none" leaves it in the content; --reasoning-budget: the thinking
  // tokens a request may spend unless it says otherwise (-1: unlimited).
  std::string reasoning_format = "auto";
  int64_t reasoning_budget = -1;
  // The Responses API's stored responses (server/response_store.h), shared by every model
  // of a server (one is made per ServedModel when none is given).
  std::shared_ptr<ResponseStore> responses;
  // Vertex AI's custom-container protocol (the CLI sets it from AIP_MODE=PREDICTION, with
  // AIP_PREDICT_ROUTE, AIP_HEALTH_ROUTE): POST predict_route {"instances": [...]} runs each
  // instance on the route its "@requestFormat" names (chatCompletions, completions,
  // embeddings, ... or a path) and answers {"predictions": [...]}; empty: off.
  std::string predict_route;
  std::string health_route;  // another path answering as /health (AIP_HEALTH_ROUTE)
};

}  // namespace specula::server
