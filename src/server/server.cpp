// server/server.cpp — see server.h: the route table, the API key, and the connection
// layer's set-up.
#include "server/server.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <thread>

#include "core/strings.h"
#include "server/anthropic_api.h"
#include "server/generation.h"
#include "server/http.h"
#include "server/json_util.h"
#include "server/llama_api.h"
#include "server/metrics.h"
#include "server/responses_api.h"
#include "server/router_api.h"
#include "server/routes.h"
#include "server/served_model.h"
#include "server/webui.h"

namespace specula::server {

namespace {

bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned diff = static_cast<unsigned>(a.size() ^ b.size());
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

bool is_anthropic_path(const std::string& path) { return path.rfind("/v1/messages", 0) == 0; }

// Routes open without the API key: the health checks, and the chat page's files (the page
// asks for the key itself before it calls the API).
bool is_public_path(const std::string& path, bool webui) {
  return path == "/health" || path == "/v1/health" || (webui && is_webui_path(path));
}

// An error in the shape of the API the path belongs to (Anthropic's under /v1/messages).
std::string error_text(const std::string& path, const ApiError& e) {
  return dump_json(is_anthropic_path(path) ? anthropic_error_body(e) : openai_error_body(e));
}

void send_error_for(const http::Request& req, http::Exchange& ex, const ApiError& e) {
  ex.respond(http_status(e), "application/json", error_text(req.path, e));
}

// Whether a CORS Origin ("http://localhost:5173") names this machine's loopback.
bool origin_is_localhost(const std::string& origin) {
  std::string rest;
  for (const char* scheme : {"http://", "https://"})
    if (origin.rfind(scheme, 0) == 0) rest = origin.substr(std::string(scheme).size());
  if (rest.empty()) return false;
  std::string host = rest;
  if (host.front() == '[') {
    host = host.substr(0, host.find(']') + 1);
  } else {
    host = host.substr(0, host.find(':'));
  }
  return host == "localhost" || host == "127.0.0.1" || host == "[::1]";
}

// The CORS headers of the answer to `req` (the Fetch standard's CORS protocol; the
// policy: ServerOptions::cors_origins). A request without Origin gets none.
http::Headers cors_headers(const ServerOptions& o, const http::Request& req) {
  const std::string origin = req.header("Origin");
  if (origin.empty() || o.cors_origins.empty()) return {};
  bool allowed = o.cors_origins == "*" || (o.cors_origins == "localhost" && origin_is_localhost(origin));
  for (const std::string& item : split_list(o.cors_origins)) allowed = allowed || item == origin;
  if (!allowed) return {{"Vary", "Origin"}};
  http::Headers h = {{"Access-Control-Allow-Origin", origin}, {"Vary", "Origin"}};
  if (req.method == "OPTIONS") {
    // A preflight: credentials (cookies, Authorization) allowed, and the methods and
    // headers the page asks for. The requested headers are echoed: "*" covers neither
    // Authorization nor any header of a request with credentials.
    const std::string asked = req.header("Access-Control-Request-Headers");
    h.push_back({"Access-Control-Allow-Credentials", "true"});
    h.push_back({"Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS"});
    h.push_back({"Access-Control-Allow-Headers", asked.empty() ? "*" : asked});
    h.push_back({"Access-Control-Max-Age", "600"});
  } else {
    h.push_back({"Access-Control-Allow-Credentials", "true"});
  }
  return h;
}

// An Exchange that remembers the status its handler answered with (the request log) and
// adds the CORS headers to the answer.
class RecordingExchange : public http::Exchange {
 public:
  RecordingExchange(http::Exchange& ex, http::Headers cors) : ex_(ex), cors_(std::move(cors)) {}
  bool respond(int status, std::string_view content_type, std::string body, const http::Headers& extra) override {
    status_ = status;
    if (cors_.empty()) return ex_.respond(status, content_type, std::move(body), extra);
    http::Headers h = extra;
    h.insert(h.end(), cors_.begin(), cors_.end());
    return ex_.respond(status, content_type, std::move(body), h);
  }
  bool begin_stream(int status, std::string_view content_type, const http::Headers& extra, std::string probe) override {
    status_ = status;
    http::Headers h = extra;
    h.insert(h.end(), cors_.begin(), cors_.end());
    return ex_.begin_stream(status, content_type, h, std::move(probe));
  }
  bool write(std::string_view data) override {
    const bool ok = ex_.write(data);
    gone_ = gone_ || !ok;
    return ok;
  }
  void end_stream() override { ex_.end_stream(); }
  bool client_gone() override {
    gone_ = gone_ || ex_.client_gone();
    return gone_;
  }
  int status() const { return status_; }
  bool gone() const { return gone_; }

 private:
  http::Exchange& ex_;
  http::Headers cors_;
  int status_ = 0;
  bool gone_ = false;
};

// The value of `key` in the target's query string ("/props?model=a%2Fb" -> "a/b"), or "".
std::string query_param(const std::string& target, const std::string& key) {
  const size_t q = target.find('?');
  if (q == std::string::npos) return "";
  for (const std::string& pair : split_list(target.substr(q + 1), '&')) {
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != key || eq == std::string::npos) continue;
    std::string out;
    const std::string v = pair.substr(eq + 1);
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] == '+') {
        out += ' ';
      } else if (v[i] == '%' && i + 2 < v.size() && std::isxdigit(static_cast<unsigned char>(v[i + 1])) &&
                 std::isxdigit(static_cast<unsigned char>(v[i + 2]))) {
        out += static_cast<char>(std::stoi(v.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        out += v[i];
      }
    }
    return out;
  }
  return "";
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Result<std::unique_ptr<Server>> Server::create(std::unique_ptr<Model> model, ServerOptions options) {
  auto served = ServedModel::create(std::move(model), std::move(options));
  if (!served) return served.status();
  return create(std::move(served).value());
}

Result<std::unique_ptr<Server>> Server::create(std::unique_ptr<ServedModel> served) {
  if (served == nullptr) return Status::invalid_argument("[server] no model");
  ServerOptions options = served->options();
  return create(std::make_unique<ModelRegistry>(std::move(served)), std::move(options));
}

Result<std::unique_ptr<Server>> Server::create(std::unique_ptr<ModelRegistry> models, ServerOptions options) {
  if (models == nullptr) return Status::invalid_argument("[server] no model");
  std::unique_ptr<Server> s(new Server());
  s->options_ = std::move(options);
  s->models_ = std::move(models);
  s->models_->set_stop_flag(&s->stopping_);
  s->start_time_unix_ = unix_now();
  const ServerOptions& opt = s->options_;
  http::Options ho;
  ho.host = opt.host;
  ho.port = opt.port;
  ho.max_body_bytes = opt.max_body_bytes;
  ho.max_connections = opt.max_connections;
  ho.header_timeout_s = opt.header_timeout_s;
  ho.body_timeout_s = opt.body_timeout_s;
  ho.write_timeout_s = opt.write_timeout_s;
  // Every request that may hold a row or wait in the queue has a worker, and a few more
  // answer /health and /metrics while they all wait (several models: each one's rows).
  ho.workers = std::min((opt.engine.n_rows + opt.engine.max_queue) * static_cast<int>(s->models_->names().size()),
                        1024) + 8;
  ho.error_body = [](int status, const std::string& message, const std::string& path) {
    return error_text(path, connection_error(status, message));
  };
  Server* raw = s.get();
  ho.on_status = [raw](int status) { raw->count(status); };
  s->http_ = http::HttpServer::create(std::move(ho), [raw](const http::Request& req, http::Exchange& ex) {
    raw->dispatch(req, ex);
  });
  return s;
}

Server::~Server() {
  http_.reset();    // no handler runs after this
  models_.reset();  // each engine finishes what still runs before its model goes
}

Status Server::bind() {
  SPECULA_RETURN_IF_ERROR(http_->bind());
  port_ = http_->port();
  return Status::ok();
}

void Server::serve() {
  if (stopping_.load()) return;
  // The drain watcher: once drain() is asked, waits for the requests in flight to end (or
  // the drain timeout), then stops the server.
  std::atomic<bool> done{false};
  std::thread watcher([this, &done] {
    using clock = std::chrono::steady_clock;
    auto next_tick = clock::now();
    while (!done.load() && !draining_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (clock::now() >= next_tick) {  // idle models unload
        models_->tick();
        next_tick = clock::now() + std::chrono::seconds(1);
      }
    }
    if (done.load()) return;
    const double timeout_s = std::max(0.0, options_.drain_timeout_s);
    const auto drain_start = clock::now();
    const auto deadline = drain_start + std::chrono::duration_cast<clock::duration>(
                                            std::chrono::duration<double>(timeout_s));
    const double grace_s = std::min(std::max(0.0, options_.drain_grace_s), timeout_s);
    if (grace_s > 0) {
      // The grace: health checks already see 503, new requests are still served.
      std::fprintf(stderr, "specula: draining: /health answers 503; admitting for %g s more\n", grace_s);
      const auto grace_end = drain_start + std::chrono::duration_cast<clock::duration>(
                                               std::chrono::duration<double>(grace_s));
      while (!done.load() && clock::now() < grace_end) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    refusing_.store(true);
    if (done.load()) return;
    std::fprintf(stderr, "specula: draining: admitting nothing new, waiting for %lld request(s) (at most %.1f s)\n",
                 static_cast<long long>(in_flight_.load()),
                 std::max(0.0, std::chrono::duration<double>(deadline - clock::now()).count()));
    while (!done.load() && in_flight_.load() > 0 && clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (in_flight_.load() > 0)
      std::fprintf(stderr, "specula: drain timeout: cancelling %lld request(s) still running\n",
                   static_cast<long long>(in_flight_.load()));
    stop();
  });
  http_->run();
  done.store(true);
  watcher.join();
}

Status Server::listen() {
  SPECULA_RETURN_IF_ERROR(bind());
  serve();
  return Status::ok();
}

// Async-signal-safe: both only set flags.
void Server::stop() {
  stopping_.store(true);
  http_->stop();
}

void Server::drain() { draining_.store(true); }

void Server::count(int status) {
  std::lock_guard<std::mutex> lock(counters_mu_);
  ++responses_by_status_[status];
}

bool Server::authorized(const http::Request& req, http::Exchange& ex) {
  const std::string& key = options_.api_key;
  if (key.empty()) return true;
  if (constant_time_equal(req.header("Authorization"), "Bearer " + key)) return true;
  // Anthropic's clients send the key as x-api-key.
  if (req.has_header("x-api-key") && constant_time_equal(req.header("x-api-key"), key)) return true;
  send_error_for(req, ex,
                 api_error(StatusCode::kUnauthenticated,
                           "invalid or missing API key (send 'Authorization: Bearer <key>' or 'x-api-key: <key>')", "",
                           "invalid_api_key"));
  return false;
}

void Server::dispatch(const http::Request& req, http::Exchange& raw) {
  // The request log (--log-requests): one line per request but the health and metrics
  // polls, in logfmt (key=value) so that it greps and parses.
  const bool log = options_.log_requests && req.path != "/health" && req.path != "/metrics";
  const auto t0 = std::chrono::steady_clock::now();
  RecordingExchange ex(raw, cors_headers(options_, req));
  GenerationLog gen;
  const bool counted = req.path != "/health" && req.path != "/v1/health" && req.path != "/metrics" && req.method != "OPTIONS";
  struct InFlight {  // counted while it is answered, even if its handler throws
    std::atomic<int64_t>* n;
    ~InFlight() {
      if (n != nullptr) --*n;
    }
  } in_flight{counted ? &in_flight_ : nullptr};
  if (counted) ++in_flight_;
  if (counted && refusing_.load()) {
    // Draining past its grace: nothing new is admitted (a router retries it on another replica).
    send_error_for(req, ex, api_error(StatusCode::kUnavailable, "the server is shutting down (draining)"));
  } else {
    route(req, ex, &gen);
  }
  if (!log) return;
  const uint64_t n = ++requests_logged_;
  std::string line = "[request] n=" + std::to_string(n) + " method=" + req.method + " path=" + req.path +
                     " client=" + req.remote_addr + " status=" + (ex.status() ? std::to_string(ex.status()) : "none") +
                     " seconds=" + std::to_string(seconds_since(t0));
  if (!gen.id.empty()) {
    line += " id=" + gen.id + " prompt_tokens=" + std::to_string(gen.prompt_tokens) +
            " cached_tokens=" + std::to_string(gen.cached_tokens) +
            " generated_tokens=" + std::to_string(gen.generated_tokens) +
            (gen.ttft_seconds >= 0 ? " ttft_seconds=" + std::to_string(gen.ttft_seconds) : "") +
            " finish=" + (gen.finish.find(' ') == std::string::npos ? gen.finish : "\"" + gen.finish + "\"");
  }
  if (ex.gone()) line += " client_gone=1";
  line += "\n";
  std::fputs(line.c_str(), stderr);
}

namespace {

// The camelCase name of a route, as Vertex AI's "@requestFormat" gives it (llama-server's
// rule): "/v1/chat/completions" -> "chatCompletions", "/apply-template" -> "applyTemplate".
std::string request_format_of(std::string path) {
  if (path.rfind("/v1/", 0) == 0) path = path.substr(3);
  std::string out;
  bool cap = false;
  for (char c : path.substr(path.empty() || path[0] != '/' ? 0 : 1)) {
    if (c == '/' || c == '-' || c == '_') {
      cap = true;
    } else {
      out += cap ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
      cap = false;
    }
  }
  return out;
}

}  // namespace

void handle_predict(ServedModel& m, const http::Request& req, http::Exchange& ex) {
  using json = nlohmann::ordered_json;
  auto parsed = parse_body_object(req.body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  const json& body = std::get<json>(parsed);
  if (!body.contains("instances") || !body["instances"].is_array())
    return send_error(ex, bad_request("instances", "the body needs an array 'instances'"));
  constexpr size_t kMaxInstances = 128;
  const json& instances = body["instances"];
  if (instances.size() > kMaxInstances)
    return send_error(ex, bad_request("instances", "at most " + std::to_string(kMaxInstances) + " instances"));
  // The POST routes an instance may name, by path or camelCase name (the first path of a
  // name wins: /completions is llama-server's native route, /v1/completions OpenAI's).
  static const char* const kRoutes[] = {"/completion",       "/completions",     "/v1/completions",
                                        "/v1/chat/completions", "/chat/completions", "/infill",
                                        "/v1/messages",      "/v1/embeddings",   "/embeddings",
                                        "/tokenize",         "/detokenize",      "/apply-template"};
  auto error_prediction = [](const ApiError& e) { return openai_error_body(e); };
  std::vector<std::future<json>> futures;
  for (const json& instance : instances) {
    futures.push_back(std::async(std::launch::async, [&m, &req, instance, &error_prediction]() -> json {
      if (!instance.is_object() || !instance.contains("@requestFormat") || !instance["@requestFormat"].is_string())
        return error_prediction(bad_request("instances", "each instance must be an object with a string '@requestFormat'"));
      const std::string format = instance["@requestFormat"].get<std::string>();
      std::string path;
      for (const char* r : kRoutes)
        if (path.empty() && (format == r || format == request_format_of(r))) path = r;
      if (path.empty()) return error_prediction(bad_request("@requestFormat", "no route for @requestFormat '" + format + "'"));
      json payload = instance;
      payload.erase("@requestFormat");
      if (payload.contains("stream")) payload["stream"] = false;  // one answer per instance
      http::Request sub;
      sub.method = "POST";
      sub.path = sub.target = path;
      sub.headers = req.headers;
      sub.remote_addr = req.remote_addr;
      sub.body = dump_json(payload);
      BufferExchange bx;
      route_api(m, sub, bx, nullptr);
      json answer = json::parse(bx.body(), nullptr, false);
      return answer.is_discarded() ? json(bx.body()) : answer;
    }));
  }
  json predictions = json::array();
  for (auto& f : futures) predictions.push_back(f.get());
  send_json(ex, json{{"predictions", std::move(predictions)}});
}

namespace {
// What a route's handler gets.
struct RouteCtx {
  ServedModel* m;
  const http::Request* req;
  http::Exchange* ex;
  GenerationLog* gen;
};
struct Route {
  const char* method;
  const char* path;
  void (*run)(const RouteCtx&);
};

// The API route table (server/routes.h lists it).
const std::vector<Route>& api_routes() {
  static const std::string kNoRerank =
      "reranking needs a reranking model (a classifier head, e.g. bge-reranker); this server serves a generative model";
  static const std::vector<Route> routes = {
      {"GET", "/v1/models", [](const RouteCtx& c) { handle_models(*c.m, *c.ex); }},
      {"GET", "/models", [](const RouteCtx& c) { handle_models(*c.m, *c.ex); }},
      {"POST", "/v1/completions", [](const RouteCtx& c) { handle_completion(*c.m, *c.req, *c.ex, Endpoint::kCompletions, c.gen); }},
      {"POST", "/v1/chat/completions", [](const RouteCtx& c) { handle_completion(*c.m, *c.req, *c.ex, Endpoint::kChat, c.gen); }},
      // llama-server's native routes (server/llama_api.h)
      {"POST", "/completion", [](const RouteCtx& c) { handle_native_completion(*c.m, *c.req, *c.ex, c.gen); }},
      {"POST", "/completions", [](const RouteCtx& c) { handle_native_completion(*c.m, *c.req, *c.ex, c.gen); }},
      {"POST", "/infill", [](const RouteCtx& c) { handle_infill(*c.m, *c.req, *c.ex, c.gen); }},
      {"GET", "/props", [](const RouteCtx& c) { handle_props(*c.m, *c.ex); }},
      {"POST", "/props", [](const RouteCtx& c) { handle_not_supported(*c.ex, "changing the server's properties is not supported"); }},
      {"GET", "/slots", [](const RouteCtx& c) { handle_slots(*c.m, *c.ex); }},
      {"POST", "/chat/completions", [](const RouteCtx& c) { handle_completion(*c.m, *c.req, *c.ex, Endpoint::kChat, c.gen); }},
      {"POST", "/chat/completions/input_tokens", [](const RouteCtx& c) { handle_chat_input_tokens(*c.m, *c.req, *c.ex); }},
      {"POST", "/v1/chat/completions/input_tokens", [](const RouteCtx& c) { handle_chat_input_tokens(*c.m, *c.req, *c.ex); }},
      {"POST", "/v1/messages", [](const RouteCtx& c) { handle_messages(*c.m, *c.req, *c.ex, false, c.gen); }},
      {"POST", "/v1/responses", [](const RouteCtx& c) { handle_responses(*c.m, *c.req, *c.ex, c.gen); }},
      {"POST", "/v1/messages/count_tokens", [](const RouteCtx& c) { handle_messages(*c.m, *c.req, *c.ex, true, c.gen); }},
      {"POST", "/admin/cache/flush", [](const RouteCtx& c) { handle_cache_flush(*c.m, *c.req, *c.ex); }},
      {"POST", "/tokenize", [](const RouteCtx& c) { handle_tokenize(*c.m, *c.req, *c.ex); }},  // llama-server's tokenizer routes
      {"POST", "/detokenize", [](const RouteCtx& c) { handle_detokenize(*c.m, *c.req, *c.ex); }},
      {"POST", "/apply-template", [](const RouteCtx& c) { handle_apply_template(*c.m, *c.req, *c.ex); }},
      {"POST", "/v1/embeddings", [](const RouteCtx& c) { handle_embeddings(*c.m, *c.req, *c.ex); }},
      {"POST", "/embeddings", [](const RouteCtx& c) { handle_embeddings(*c.m, *c.req, *c.ex); }},
      {"POST", "/embedding", [](const RouteCtx& c) { handle_embeddings(*c.m, *c.req, *c.ex); }},
      {"POST", "/rerank", [](const RouteCtx& c) { handle_not_supported(*c.ex, kNoRerank); }},
      {"POST", "/reranking", [](const RouteCtx& c) { handle_not_supported(*c.ex, kNoRerank); }},
      {"POST", "/v1/rerank", [](const RouteCtx& c) { handle_not_supported(*c.ex, kNoRerank); }},
      {"POST", "/v1/reranking", [](const RouteCtx& c) { handle_not_supported(*c.ex, kNoRerank); }},
      {"GET", "/lora-adapters", [](const RouteCtx& c) { handle_lora_list(*c.m, *c.ex); }},
      {"POST", "/lora-adapters", [](const RouteCtx& c) { handle_lora_scales(*c.m, *c.req, *c.ex); }},
      {"POST", "/v1/load_lora_adapter", [](const RouteCtx& c) { handle_lora_load(*c.m, *c.req, *c.ex, true); }},
      {"POST", "/v1/unload_lora_adapter", [](const RouteCtx& c) { handle_lora_load(*c.m, *c.req, *c.ex, false); }},
      // llama-server's web UI proxy for MCP servers: not served (403, as llama-server without --ui-mcp-proxy).
      {"GET", "/cors-proxy", [](const RouteCtx& c) { send_error(*c.ex, api_error(StatusCode::kPermissionDenied, "the CORS proxy is not served")); }},
      {"POST", "/cors-proxy", [](const RouteCtx& c) { send_error(*c.ex, api_error(StatusCode::kPermissionDenied, "the CORS proxy is not served")); }},
      // What routers ask of a worker (server/router_api.h): SGLang's and vLLM's routes.
      {"GET", "/server_info", [](const RouteCtx& c) { handle_server_info(*c.m, *c.ex); }},
      {"GET", "/get_server_info", [](const RouteCtx& c) { handle_server_info(*c.m, *c.ex); }},
      {"GET", "/model_info", [](const RouteCtx& c) { handle_model_info(*c.m, *c.ex); }},
      {"GET", "/get_model_info", [](const RouteCtx& c) { handle_model_info(*c.m, *c.ex); }},
      {"GET", "/get_load", [](const RouteCtx& c) { handle_get_load(*c.m, *c.ex); }},
      {"GET", "/health_generate", [](const RouteCtx& c) { handle_health_generate(*c.m, *c.ex); }},
      {"POST", "/generate", [](const RouteCtx& c) { handle_generate(*c.m, *c.req, *c.ex, c.gen); }},
      {"POST", "/v1/completions/render", [](const RouteCtx& c) { handle_render(*c.m, *c.req, *c.ex, Endpoint::kCompletions); }},
      {"POST", "/v1/chat/completions/render", [](const RouteCtx& c) { handle_render(*c.m, *c.req, *c.ex, Endpoint::kChat); }},
  };
  return routes;
}
}  // namespace

bool is_api_path(const std::string& path) {
  if (is_response_item_path(path)) return true;
  for (const Route& r : api_routes())
    if (path == r.path) return true;
  return false;
}

bool route_api(ServedModel& m, const http::Request& req, http::Exchange& ex, GenerationLog* gen) {
  const std::vector<Route>& routes = api_routes();
  const RouteCtx ctx{&m, &req, &ex, gen};
  if (is_response_item_path(req.path)) {
    handle_response_item(m.responses(), req, ex);
    return true;
  }
  bool path_known = false;
  for (const Route& r : routes) {
    if (req.path != r.path) continue;
    path_known = true;
    if (req.method == r.method) {
      r.run(ctx);
      return true;
    }
  }
  if (!path_known) return false;
  ApiError e = bad_request("", "method " + req.method + " not allowed on " + req.path);
  e.http_override = 405;
  send_error_for(req, ex, e);
  return true;
}

void Server::route(const http::Request& req, http::Exchange& ex, GenerationLog* gen) {
  // A CORS preflight, on any path: browsers send it without credentials (the API key), so
  // it is answered before the key is checked; it runs nothing.
  if (req.method == "OPTIONS") {
    ex.respond(200, "text/plain", "", {{"Allow", "GET, POST, DELETE, OPTIONS"}});
    return;
  }
  const ServerOptions& so = options_;
  if (!is_public_path(req.path, so.webui) && !authorized(req, ex)) return;
  if (req.path == "/health" || req.path == "/v1/health" || req.path == "/metrics") {
    if (req.method != "GET") {
      ApiError e = bad_request("", "method " + req.method + " not allowed on " + req.path);
      e.http_override = 405;
      return send_error_for(req, ex, e);
    }
    if (req.path != "/metrics") {
      if (draining_.load()) {
        ex.respond(503, "application/json", R"({"status":"draining"})");
        return;
      }
      ex.respond(200, "application/json", R"({"status":"ok"})");
      return;
    }
    if (!so.metrics) return handle_not_supported(ex, "metrics are off (--no-metrics)");
    std::map<int, uint64_t> by_status;
    {
      std::lock_guard<std::mutex> lock(counters_mu_);
      by_status = responses_by_status_;
    }
    // Several models: the one ?model= names (loaded), else the most recently used loaded
    // one, and every model's state.
    std::shared_ptr<ServedModel> m;
    if (models_->multi()) {
      const std::string name = query_param(req.target, "model");
      if (!name.empty()) {
        bool known = false;
        for (const auto& info : models_->list()) known = known || info.name == name;
        if (!known) return send_error_for(req, ex, api_error(StatusCode::kNotFound, "model '" + name + "' is not served here"));
      }
      // (A scrape never loads a model: one not loaded reports its state only.)
      m = name.empty() ? models_->any_loaded() : models_->loaded(name);
    } else {
      auto l = models_->acquire("");
      if (l) m = models_->any_loaded();
    }
    std::string text = metrics_text(m.get(), http_->stats(), by_status);
    if (models_->multi()) text += models_metrics_text(models_->list());
    ex.respond(200, "text/plain; version=0.0.4", std::move(text),
               {{"Process-Start-Time-Unix", std::to_string(start_time_unix_)}});  // llama-server's header
    return;
  }
  if (!so.health_route.empty() && req.path == so.health_route && req.method == "GET") {
    ex.respond(draining_.load() ? 503 : 200, "application/json",
               draining_.load() ? R"({"status":"draining"})" : R"({"status":"ok"})");
    return;
  }
  if (models_->multi()) {
    if (so.webui && serve_webui(req, ex)) return;
    if (route_models(req, ex, gen)) return;
  } else {
    auto lease = models_->acquire("");
    if (!lease) return send_error_for(req, ex, api_error(lease.status().code(), lease.status().user_message()));
    ServedModel& m = **lease;
    if (!so.predict_route.empty() && req.path == so.predict_route && req.method == "POST") return handle_predict(m, req, ex);
    if (route_api(m, req, ex, gen)) return;
    if (so.webui && serve_webui(req, ex)) return;
  }
  send_error_for(req, ex, api_error(StatusCode::kNotFound, "no route for " + req.method + " " + req.path));
}

bool Server::route_models(const http::Request& req, http::Exchange& ex, GenerationLog* gen) {
  using json = nlohmann::ordered_json;
  const ServerOptions& so = options_;
  if ((req.path == "/v1/models" || req.path == "/models") && req.method == "GET") {
    json data = json::array();
    for (const ModelRegistry::Info& i : models_->list())
      data.push_back(json{{"id", i.name},
                          {"object", "model"},
                          {"created", start_time_unix_},
                          {"owned_by", "specula"},
                          {"path", i.path},
                          {"status", {{"value", i.state}, {"bytes", i.bytes}, {"requests", i.in_use}}}});
    send_json(ex, json{{"object", "list"}, {"data", data}});
    return true;
  }
  if (req.path == "/models/load" || req.path == "/models/unload") {
    if (req.method != "POST") {
      ApiError e = bad_request("", "method " + req.method + " not allowed on " + req.path);
      e.http_override = 405;
      send_error_for(req, ex, e);
      return true;
    }
    auto parsed = parse_body_object(req.body);
    if (auto* e = std::get_if<ApiError>(&parsed)) {
      send_error_for(req, ex, *e);
      return true;
    }
    const json& j = std::get<json>(parsed);
    if (!j.contains("model") || !j["model"].is_string()) {
      send_error_for(req, ex, bad_request("model", "'model' is required (a string)"));
      return true;
    }
    const std::string name = j["model"].get<std::string>();
    const Status st = req.path == "/models/load" ? models_->load(name) : models_->unload(name);
    if (!st.is_ok()) {
      send_error_for(req, ex, api_error(st.code(), st.user_message(), "model",
                                        st.code() == StatusCode::kNotFound ? "model_not_found"
                                        : st.code() == StatusCode::kBusy   ? "model_busy"
                                                                           : ""));
      return true;
    }
    send_json(ex, json{{"success", true}, {"model", name}});
    return true;
  }
  // Any other route: the model the request names ("model" in a JSON body, ?model= on a GET).
  // A path no route has loads nothing (a 404 from the caller).
  const bool predict = !so.predict_route.empty() && req.path == so.predict_route && req.method == "POST";
  if (!predict && !is_api_path(req.path)) return false;
  if (is_response_item_path(req.path) && so.responses) {  // the server's store: no model loads
    handle_response_item(*so.responses, req, ex);
    return true;
  }
  std::string name = query_param(req.target, "model");
  if (name.empty() && !req.body.empty()) {
    const json j = json::parse(req.body, nullptr, false);
    if (j.is_object() && j.contains("model") && j["model"].is_string()) name = j["model"].get<std::string>();
  }
  auto lease = models_->acquire(name);
  if (!lease) {
    send_error_for(req, ex, api_error(lease.status().code(), lease.status().user_message(), "model",
                                      lease.status().code() == StatusCode::kNotFound ? "model_not_found" : ""));
    return true;
  }
  ServedModel& m = **lease;
  if (!so.predict_route.empty() && req.path == so.predict_route && req.method == "POST") {
    handle_predict(m, req, ex);
    return true;
  }
  return route_api(m, req, ex, gen);
}

}  // namespace specula::server
