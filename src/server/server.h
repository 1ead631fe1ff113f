// server/server.h — `specula serve`: an OpenAI-compatible HTTP server over the
// continuous-batching engine (engine/scheduler.h).
//
// Routes: POST /v1/completions, POST /v1/chat/completions (JSON, or SSE with
// `"stream": true`, ending with `data: [DONE]`), GET /v1/models, GET /health,
// GET /metrics (Prometheus text exposition format 0.0.4). With an API key every route
// except /health needs `Authorization: Bearer KEY` (401 otherwise).
// Every error answer is a 4xx/5xx with an OpenAI error body: 400 for invalid requests,
// 401 auth, 404 unknown route, 413 body over the size limit, 429 queue full, 500/503.
// A client that disconnects (streaming or not) is cancelled: its row is freed at the next
// step. Connections: deadlines, limits, pipelining and half-close as server/http.h says.
// Owns: the model, tokenizer, chat template and engine of one served model; the HTTP
// connection layer (server/http.h) and its threads.
// Does not: serve several models, speculate (yet), cache prompts, or do TLS.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "engine/scheduler.h"
#include "model/model.h"
#include "specula/status.h"
#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace specula::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (see port())
  std::string api_key;              // empty: no auth
  std::string model_id;             // the id clients send as "model"; empty: the file's stem
  std::optional<std::string> chat_template;  // source overriding the model's own (--chat-template-file)
  size_t max_body_bytes = 1 << 20;  // larger bodies get 413
  int max_connections = 1024;       // more get 503 (--max-connections)
  double header_timeout_s = 10;     // request line + headers deadline (--timeout-header)
  double body_timeout_s = 10;       // body deadline beyond its size at 64 KiB/s (--timeout-body)
  double write_timeout_s = 30;      // per response write: a client that stops reading is dropped
  EngineOptions engine;             // rows (--parallel), context, KV budget and cache types, queue
  bool log_requests = true;         // one line per finished request on stderr
  std::string pooling;              // embeddings: "mean" | "last"; empty: the model's, else mean
};

class Server {
 public:
  // Takes the model; builds tokenizer, chat template and engine. Errors: tokenizer or
  // template errors, engine options.
  static Result<std::unique_ptr<Server>> create(std::unique_ptr<Model> model, ServerOptions options);
  ~Server();

  // Binds and serves until stop(). Errors: the address cannot be bound.
  Status listen();
  // Binds only (port 0 picks one); then serve() runs the loop. For tests and `--port 0`.
  Status bind();
  void serve();
  int port() const { return port_; }
  // The engine (options, layouts, stats).
  const Engine& engine() const;
  // Thread-safe; makes listen()/serve() return.
  void stop();

  struct Impl;

 private:
  Server() = default;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace specula::server
