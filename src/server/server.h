// server/server.h — `specula serve`: the HTTP front door of one engine. It owns the served
// model (server/served_model.h: model, tokenizer, chat template, the continuously
// batched engine with its speculation and prompt cache) and the HTTP connection layer
// (server/http.h), and routes each request to its handler (server/routes.h):
//
// (server/routes.h lists every route and its handler; docs/API.md describes them.)
//
// With an API key every route except /health needs `Authorization: Bearer KEY` or
// `x-api-key: KEY` (401 otherwise). Every error answer is a 4xx/5xx in the shape of the
// route's API family, from one table (server/errors.h); an unknown route is 404, a known
// route with another method 405. A client that disconnects (streaming or not) is
// cancelled: its row is freed at the next step. Connections: deadlines, limits, pipelining
// and half-close as server/http.h says. With ServerOptions::log_requests (--log-requests,
// on by default) every request but /health and /metrics gets one line on stderr:
//   [request] n=7 method=POST path=/v1/chat/completions client=127.0.0.1 status=200
//   seconds=0.512 id=chatcmpl-7 prompt_tokens=12 cached_tokens=0 generated_tokens=24
//   ttft_seconds=0.081 finish=stop
// (one line; the generation keys only for generation routes).
// Shutting down: stop() (SIGINT in the CLI) cancels what runs — each admitted request
// finishes its answer as cancelled (503, or an error event) — and closes. drain() (SIGTERM,
// what routers and Kubernetes send) first stops admitting: /health answers 503
// {"status":"draining"} so that health checks take the replica out, and — once
// ServerOptions::drain_grace_s has passed (0 by default: at once) — every new request but
// /health and /metrics gets 503; requests already in flight run to their end, then the
// server stops — after ServerOptions::drain_timeout_s at the latest, when stop() cancels
// what is left.
// Several models (server/model_registry.h): a request's "model" field (a GET route's
// ?model= query) chooses; an unknown name is 404 naming the served ones; GET /v1/models
// lists every model with its state; POST /models/load and /models/unload {"model": NAME}.
// Does not: TLS.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "model/model.h"
#include "server/model_registry.h"
#include "server/options.h"
#include "specula/status.h"

namespace specula {
class Engine;
}

namespace specula::server {

class ServedModel;
class ModelRegistry;
struct GenerationLog;
namespace http {
class HttpServer;
struct Request;
class Exchange;
}  // namespace http

class Server {
 public:
  // Takes the model; builds tokenizer, chat template and engine. Errors: tokenizer or
  // template errors, engine options.
  static Result<std::unique_ptr<Server>> create(std::unique_ptr<Model> model, ServerOptions options);
  // Serves a model already set up (server/model_config.h: open_served_model); its
  // options' connection fields (host, port, limits, API key) apply.
  static Result<std::unique_ptr<Server>> create(std::unique_ptr<ServedModel> served);
  // Serves the models of `models` with the connection fields of `options`.
  static Result<std::unique_ptr<Server>> create(std::unique_ptr<ModelRegistry> models, ServerOptions options);
  ~Server();

  // Binds and serves until stop(). Errors: the address cannot be bound.
  Status listen();
  // Binds only (port 0 picks one); then serve() runs the loop. For tests and `--port 0`.
  Status bind();
  void serve();
  int port() const { return port_; }
  ModelRegistry& models() { return *models_; }
  // Thread-safe and async-signal-safe (sets flags); makes listen()/serve() return.
  void stop();
  // Thread-safe and async-signal-safe (sets a flag): the graceful stop above; serve()
  // returns once the requests in flight have ended (or drain_timeout_s has passed).
  void drain();
  bool draining() const { return draining_.load(); }

 private:
  Server() = default;
  // Answers one request (worker thread) and writes its request log line.
  void dispatch(const http::Request& req, http::Exchange& ex);
  // The API key, then the route table.
  void route(const http::Request& req, http::Exchange& ex, GenerationLog* gen);
  // Several models: the routes of the registry (/v1/models, /models/load, /models/unload),
  // or the model the request names (true: answered here, by a route or an error).
  bool route_models(const http::Request& req, http::Exchange& ex, GenerationLog* gen);
  bool authorized(const http::Request& req, http::Exchange& ex);
  void count(int status);

  ServerOptions options_;                   // the connection fields (and, one model, its options)
  std::unique_ptr<ModelRegistry> models_;
  std::unique_ptr<http::HttpServer> http_;  // declared after the models: goes first
  std::atomic<bool> stopping_{false};       // stop(): every model's also_stopping
  int64_t start_time_unix_ = 0;
  std::mutex counters_mu_;
  std::map<int, uint64_t> responses_by_status_;  // for /metrics
  std::atomic<uint64_t> requests_logged_{0};
  std::atomic<bool> draining_{false};  // drain() was asked: /health answers 503
  std::atomic<bool> refusing_{false};  // the drain grace has passed: new requests get 503
  std::atomic<int64_t> in_flight_{0};  // requests being answered but /health, /metrics and preflights
  int port_ = 0;
};

}  // namespace specula::server
