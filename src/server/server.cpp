// server/server.cpp — see server.h.
#include "server/server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "engine/generate.h"
#include "server/completion_stream.h"
#include "server/openai_api.h"
#include "server/peer.h"
#include "tokenizer/bpe.h"

namespace specula::server {

using nlohmann::json;

namespace {
int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned diff = static_cast<unsigned>(a.size() ^ b.size());
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump_json(error_body(e)), "application/json");
}

std::string sse(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

Usage usage_of(const RequestSummary& s) {
  return Usage{s.n_prompt, s.n_generated, s.cached_tokens, s.spec_rounds, s.drafted, s.accepted};
}
}  // namespace

struct Server::Impl {
  ServerOptions opt;
  std::unique_ptr<Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::optional<tokenizer::ChatTemplate> chat_template;
  std::string chat_template_origin;  // "model metadata" / "file"
  std::unique_ptr<Engine> engine;
  httplib::Server http;
  std::atomic<uint64_t> next_id{1};
  std::atomic<bool> stop_requested{false};  // stop() was called (maybe before serve())
  std::mt19937_64 seed_rng{std::random_device{}()};
  std::mutex seed_mu;
  // HTTP outcome counters for /metrics.
  std::mutex counters_mu;
  std::map<int, uint64_t> responses_by_status;

  uint64_t random_seed() {
    std::lock_guard<std::mutex> lock(seed_mu);
    return seed_rng();
  }
  void count(int status) {
    std::lock_guard<std::mutex> lock(counters_mu);
    ++responses_by_status[status];
  }

  void routes();
  // API key check (true: go on); answers 401 itself otherwise.
  bool authorized(const httplib::Request& req, httplib::Response& res);
  void handle_completion(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  // POST routes, also kept by path for requests without a body (see routes()).
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  std::map<std::string, Handler> post_routes;
  void post(const std::string& path, Handler h) {
    post_routes[path] = h;
    http.Post(path, std::move(h));
  }
  std::string metrics_text();
  // Prompt ids for a parsed request, or an error.
  std::optional<ApiError> build_prompt(const CompletionParams& c, std::vector<int32_t>* ids);
};

Result<std::unique_ptr<Server>> Server::create(std::unique_ptr<Model> model, ServerOptions options) {
  if (model == nullptr) return Status::error("[server] no model");
  auto impl = std::make_unique<Impl>();
  auto vocab = tokenizer::Vocab::from_gguf(model->file());
  if (!vocab) return vocab.status();
  auto tok = tokenizer::make_tokenizer(std::move(vocab).value());
  if (!tok) return tok.status();
  impl->tok = std::move(tok).value();
  if (options.chat_template) {
    auto t = tokenizer::ChatTemplate::parse(*options.chat_template);
    if (!t) return Status::error("[server] --chat-template-file: " + t.message());
    impl->chat_template = std::move(t).value();
    impl->chat_template_origin = "file";
  } else if (auto src = tokenizer::chat_template_from_gguf(model->file())) {
    auto t = tokenizer::ChatTemplate::parse(*src);
    if (!t) return Status::error("[server] the model's chat template: " + t.message());
    impl->chat_template = std::move(t).value();
    impl->chat_template_origin = "model metadata";
  }
  if (options.model_id.empty()) options.model_id = model->info().name.empty() ? "model" : model->info().name;
  if (options.engine.eog_ids.empty()) options.engine.eog_ids = end_of_generation_ids(impl->tok->vocab(), model->file());
  auto engine = Engine::create(*model, options.engine);
  if (!engine) return engine.status();
  impl->engine = std::move(engine).value();
  impl->model = std::move(model);
  impl->opt = std::move(options);
  std::unique_ptr<Server> s(new Server());
  s->impl_ = std::move(impl);
  s->impl_->routes();
  return s;
}

Server::~Server() {
  if (impl_) {
    impl_->http.stop();
    impl_->engine.reset();  // finishes what still runs before the model goes
  }
}

Status Server::bind() {
  if (impl_->opt.port == 0) {
    port_ = impl_->http.bind_to_any_port(impl_->opt.host);
    if (port_ <= 0) return Status::error("[server] cannot bind " + impl_->opt.host + " (any port)");
  } else {
    if (!impl_->http.bind_to_port(impl_->opt.host, impl_->opt.port))
      return Status::error("[server] cannot bind " + impl_->opt.host + ":" + std::to_string(impl_->opt.port) +
                           " (in use, or not a local address?)");
    port_ = impl_->opt.port;
  }
  return Status::ok();
}

// stop() may come (from a signal handler) before listen_after_bind() has set httplib's
// running flag, when httplib's own stop() does nothing; a watcher repeats it once the
// loop runs, so a SIGTERM right after start is never lost.
void Server::serve() {
  Impl& im = *impl_;
  if (im.stop_requested.load()) return;
  std::atomic<bool> done{false};
  std::thread watcher([&im, &done] {
    while (!done.load()) {
      if (im.stop_requested.load() && im.http.is_running()) im.http.stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  im.http.listen_after_bind();
  done.store(true);
  watcher.join();
}

Status Server::listen() {
  SPECULA_RETURN_IF_ERROR(bind());
  serve();
  return Status::ok();
}

const Engine& Server::engine() const { return *impl_->engine; }

void Server::stop() {
  impl_->stop_requested.store(true);
  impl_->http.stop();
}

void Server::Impl::routes() {
  const size_t threads = static_cast<size_t>(2 * (opt.engine.n_rows + opt.engine.max_queue) + 8);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(opt.max_body_bytes);
  // Shutdown waits for every worker, and a worker holding an idle keep-alive connection
  // notices only when this timeout ends (cpp-httplib 0.11): keep it short, so SIGTERM
  // stops the server in seconds, not half a minute.
  http.set_keep_alive_timeout(5);
  http.set_read_timeout(30);
  http.set_write_timeout(30);

  // The pre-routing handler runs before cpp-httplib reads the body: answering a request
  // that has one there would leave its body unread on a keep-alive connection, to be
  // parsed as the next request (a bogus 400). Requests with a body are checked in their
  // handler instead, once the body is consumed.
  //
  // A POST without Content-Length or Transfer-Encoding has an empty body (RFC 9112 §6.3),
  // but cpp-httplib 0.11 reads such a body until the client closes or the read timeout
  // (30 s) ends — `curl -X POST .../admin/cache/flush` hung that long, then got a 400.
  // Those requests are routed here, with their empty body, before httplib waits.
  //
  // A Content-Length over --max-body (or not a number) is refused here, before the body is
  // read (cpp-httplib would read up to its 30 s timeout first), and the connection is
  // closed: the unread body must never be parsed as a next request (request smuggling).
  // cpp-httplib 0.11 decides keep-alive from the request alone, so a response header does
  // not close it; a content provider that reports failure after writing the whole error
  // body does.
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.has_header("Content-Length")) {
      const std::string v = req.get_header_value("Content-Length");
      const bool digits = !v.empty() && v.size() <= 19 && v.find_first_not_of("0123456789") == std::string::npos;
      if (!digits || std::stoull(v) > opt.max_body_bytes) {
        ApiError e{digits ? 413 : 400,
                   digits ? "request body of " + v + " bytes is larger than the limit of " +
                                std::to_string(opt.max_body_bytes) + " bytes"
                          : "Content-Length '" + v.substr(0, 40) + "' is not a byte count",
                   "invalid_request_error", "", digits ? "body_too_large" : ""};
        res.status = e.status;
        res.set_header("Connection", "close");
        const auto body = std::make_shared<const std::string>(dump_json(error_body(e)));
        res.set_content_provider(
            body->size(), "application/json",
            [body](size_t offset, size_t length, httplib::DataSink& sink) {
              sink.write(body->data() + offset, std::min(length, body->size() - offset));
              return false;  // all written; "failed" makes httplib drop the connection
            });
        count(e.status);
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (req.has_header("Content-Length") || req.has_header("Transfer-Encoding"))
      return httplib::Server::HandlerResponse::Unhandled;
    if (!authorized(req, res)) return httplib::Server::HandlerResponse::Handled;
    if (req.method == "POST" || req.method == "PUT" || req.method == "PATCH") {
      const auto it = post_routes.find(req.path);
      if (it != post_routes.end() && req.method == "POST") {
        it->second(req, res);
      } else {
        ApiError e{it != post_routes.end() ? 405 : 404,
                   (it != post_routes.end() ? "method " + req.method + " not allowed on "
                                            : "no route for " + req.method + " ") +
                       req.path,
                   it != post_routes.end() ? "invalid_request_error" : "not_found_error", "", ""};
        send_error(res, e);
        count(e.status);
      }
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.content_provider_) return;  // already answered (pre-routing)
    ApiError e;
    e.status = res.status;
    if (res.status == 404) {
      e.message = "no route for " + req.method + " " + req.path;
      e.type = "not_found_error";
    } else if (res.status == 413) {
      e.message = "request body larger than the limit of " + std::to_string(opt.max_body_bytes) + " bytes";
      e.code = "body_too_large";
    } else if (res.status == 405) {
      e.message = "method " + req.method + " not allowed on " + req.path;
    } else {
      e.message = "bad request";
    }
    res.set_content(dump_json(error_body(e)), "application/json");
    count(res.status);
  });
  http.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      what = std::string("internal error: ") + ex.what();
    } catch (...) {
    }
    send_error(res, ApiError{500, what, "server_error", "", ""});
    count(500);
  });

  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
    count(200);
  });
  http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;  // a GET with a body skipped the pre-routing check
    const ModelInfo& info = model->info();
    json m = {{"id", opt.model_id},
              {"object", "model"},
              {"created", unix_now()},
              {"owned_by", "specula"},
              {"meta",
               {{"architecture", info.architecture},
                {"n_vocab", info.n_vocab},
                {"n_embd", info.n_embd},
                {"n_ctx_train", info.n_ctx_train},
                {"n_ctx", opt.engine.n_ctx},
                {"parallel", opt.engine.n_rows},
                {"chat_template", chat_template ? chat_template_origin : "none"}}}};
    res.set_content(dump_json(json{{"object", "list"}, {"data", {m}}}), "application/json");
    count(200);
  });
  http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    res.set_content(metrics_text(), "text/plain; version=0.0.4");
    count(200);
  });
  post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_completion(req, res, Endpoint::kCompletions);
  });
  // The prompt cache's durability point: returns once every entry stored so far is on disk.
  // Loopback clients only, or any client with the API key.
  post("/admin/cache/flush", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    const bool loopback = req.remote_addr == "127.0.0.1" || req.remote_addr == "::1" ||
                          req.remote_addr.rfind("::ffff:127.", 0) == 0;
    if (opt.api_key.empty() && !loopback) {
      send_error(res, ApiError{403, "cache flush is allowed from loopback or with an API key", "permission_error", "", ""});
      count(403);
      return;
    }
    const auto& cache = opt.engine.prompt_cache;
    if (!cache) {
      send_error(res, ApiError{400, "this server runs without a prompt cache", "invalid_request_error", "", ""});
      count(400);
      return;
    }
    const Status st = cache->flush();
    if (!st.is_ok()) {
      send_error(res, ApiError{500, st.message(), "server_error", "", ""});
      count(500);
      return;
    }
    const PromptCacheStats cs = cache->stats();
    res.set_content(dump_json(json{{"flushed", true}, {"disk_entries", cs.disk_entries}, {"disk_bytes", cs.disk_bytes}}),
                    "application/json");
    count(200);
  });
  post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_completion(req, res, Endpoint::kChat);
  });
  // llama-server aliases
  post("/completion", [this](const httplib::Request& req, httplib::Response& res) {
    handle_completion(req, res, Endpoint::kCompletions);
  });
  post("/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_completion(req, res, Endpoint::kChat);
  });
}

std::optional<ApiError> Server::Impl::build_prompt(const CompletionParams& c, std::vector<int32_t>* ids) {
  const tokenizer::Vocab& vocab = tok->vocab();
  if (c.endpoint == Endpoint::kCompletions) {
    if (c.prompt_is_ids) {
      *ids = c.prompt_ids;
      for (int32_t id : *ids)
        if (!vocab.valid_id(id))
          return ApiError{400, "token id " + std::to_string(id) + " in 'prompt' is outside the vocabulary [0, " +
                                   std::to_string(vocab.size()) + ")",
                          "invalid_request_error", "prompt", ""};
    } else {
      *ids = tok->encode(c.prompt_text, /*add_special=*/true, /*parse_special=*/true);
    }
  } else {
    if (!chat_template)
      return ApiError{400,
                      "this model has no chat template (its GGUF metadata holds none); start the server with "
                      "--chat-template-file FILE, or use /v1/completions",
                      "invalid_request_error", "messages", "no_chat_template"};
    const std::string bos = vocab.valid_id(vocab.bos_id()) ? vocab.text(vocab.bos_id()) : "";
    const std::string eos = vocab.valid_id(vocab.eos_id()) ? vocab.text(vocab.eos_id()) : "";
    json ctx = {{"messages", c.messages}, {"add_generation_prompt", true}, {"bos_token", bos}, {"eos_token", eos}};
    auto text = chat_template->render(ctx);
    if (!text) return ApiError{400, "the chat template failed on these messages: " + text.message(),
                               "invalid_request_error", "messages", ""};
    // Templates usually write the BOS text themselves; add it only when they don't.
    const bool has_bos = !bos.empty() && text->rfind(bos, 0) == 0;
    *ids = tok->encode(*text, /*add_special=*/!has_bos, /*parse_special=*/true);
  }
  if (ids->empty())
    return ApiError{400, "the prompt is empty (it tokenizes to no tokens)", "invalid_request_error",
                    c.endpoint == Endpoint::kChat ? "messages" : "prompt", ""};
  return std::nullopt;
}

namespace {
// State shared by a streaming response's content provider calls.
struct StreamState {
  bool close_delimited = false;  // HTTP/1.0: no chunked encoding, the close ends the stream
  std::shared_ptr<CompletionStream> stream;
  std::shared_ptr<RequestHandle> handle;
  CompletionParams params;
  std::string id, model;
  int64_t created = 0;
  int64_t n_prompt = 0;
  int64_t text_offset = 0;
  bool sent_role = false;
  bool done = false;
};
}  // namespace

bool Server::Impl::authorized(const httplib::Request& req, httplib::Response& res) {
  if (opt.api_key.empty() || req.path == "/health") return true;
  const std::string auth = req.get_header_value("Authorization");
  if (constant_time_equal(auth, "Bearer " + opt.api_key)) return true;
  send_error(res, ApiError{401, "invalid or missing API key (send 'Authorization: Bearer <key>')",
                           "authentication_error", "", "invalid_api_key"});
  count(401);
  return false;
}

void Server::Impl::handle_completion(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  if (!authorized(req, res)) return;
  auto parsed = parse_completion_request(req.body, endpoint);
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    send_error(res, *e);
    count(e->status);
    return;
  }
  CompletionParams c = std::move(std::get<CompletionParams>(parsed));
  if (!c.model.empty() && c.model != opt.model_id) {
    send_error(res, ApiError{400, "model '" + c.model + "' is not served here; this server serves '" + opt.model_id + "'",
                             "invalid_request_error", "model", "model_not_found"});
    count(400);
    return;
  }
  std::vector<int32_t> ids;
  if (auto e = build_prompt(c, &ids)) {
    send_error(res, *e);
    count(e->status);
    return;
  }
  EngineRequest er;
  er.prompt = std::move(ids);
  const int64_t n_prompt = static_cast<int64_t>(er.prompt.size());
  if (c.max_tokens) {
    er.max_tokens = *c.max_tokens;
  } else {
    const int64_t room = opt.engine.n_ctx - n_prompt;
    if (room <= 0) {
      send_error(res, ApiError{400, "the prompt has " + std::to_string(n_prompt) + " tokens; the context holds " +
                                        std::to_string(opt.engine.n_ctx),
                               "invalid_request_error", endpoint == Endpoint::kChat ? "messages" : "prompt",
                               "context_length_exceeded"});
      count(400);
      return;
    }
    er.max_tokens = static_cast<int32_t>(room);
  }
  er.sampling = c.sampling;
  if (!c.seed_given) er.sampling.seed = random_seed();
  er.top_logprobs = c.logprobs;
  er.ignore_eos = c.ignore_eos;
  er.speculative = c.speculative;
  if (opt.engine.generation_checkpoint > 0) {
    // What shapes the text besides the engine request: the route and the stop strings.
    er.resume_key = endpoint == Endpoint::kChat ? "chat" : "completion";
    for (const std::string& st : c.stop) er.resume_key += "\x1f" + st;
  }
  auto stream = std::make_shared<CompletionStream>(*tok, c.stop, c.logprobs >= 0);
  Submission sub = engine->submit(std::move(er), stream);
  if (sub.error != SubmitError::kNone) {
    ApiError e;
    e.message = sub.message;
    e.param = sub.param;
    if (sub.error == SubmitError::kBusy) {
      e.status = 429;
      e.type = "rate_limit_error";
      e.code = "queue_full";
    } else if (sub.error == SubmitError::kStopped) {
      e.status = 503;
      e.type = "server_error";
    } else if (e.message.find("exceeds the context") != std::string::npos) {
      e.code = "context_length_exceeded";
    }
    send_error(res, e);
    count(e.status);
    return;
  }
  const std::string id = (endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(sub.handle->id());
  const int64_t created = unix_now();

  if (!c.stream) {
    std::string text;
    std::vector<TokenLogprob> lps;
    CompletionStream::Update u;
    // A client that goes away while its answer is computed frees its row within a step:
    // its socket is probed each time the request makes progress (and every 100 ms).
    const int peer_fd = find_connection_socket(req.local_port, req.remote_addr, req.remote_port);
    for (;;) {
      if (stop_requested.load()) sub.handle->cancel();  // shutting down: don't hold it up
      u = stream->wait(std::chrono::milliseconds(100));
      text += u.text;
      for (auto& l : u.logprobs) lps.push_back(std::move(l));
      if (u.finished) break;
      if (peer_fd >= 0 && !sub.handle->cancelled() && peer_closed(peer_fd)) sub.handle->cancel();
    }
    if (u.summary.outcome == Outcome::kFailed || u.summary.outcome == Outcome::kCancelled) {
      send_error(res, ApiError{u.summary.outcome == Outcome::kFailed ? 500 : 503,
                               "generation " + u.finish_reason + (u.summary.error.empty() ? "" : ": " + u.summary.error),
                               "server_error", "", ""});
      count(res.status);
      return;
    }
    Usage usage = usage_of(u.summary);
    const auto* lp = c.logprobs >= 0 ? &lps : nullptr;
    json body = endpoint == Endpoint::kChat ? chat_response(id, created, opt.model_id, text, lp, u.finish_reason, usage)
                                            : completion_response(id, created, opt.model_id, text, lp, u.finish_reason, usage);
    // llama-server's "timings" extension (same field names), for benchmarks and clients
    // that read it: prefill and decode time of this request.
    const RequestSummary& sm = u.summary;
    const int64_t n_dec = std::max<int64_t>(0, sm.n_generated - 1);
    body["timings"] = {{"prompt_n", sm.n_prompt},
                       {"prompt_ms", sm.prefill_seconds * 1e3},
                       {"predicted_n", sm.n_generated},
                       {"predicted_ms", sm.decode_seconds * 1e3},
                       {"predicted_per_second", sm.decode_seconds > 0 ? n_dec / sm.decode_seconds : 0.0}};
    res.set_content(dump_json(body), "application/json");
    count(200);
    return;
  }

  auto st = std::make_shared<StreamState>();
  st->stream = stream;
  st->handle = sub.handle;
  st->params = std::move(c);
  st->id = id;
  st->model = opt.model_id;
  st->created = created;
  st->n_prompt = n_prompt;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  count(200);
  auto provider = [this, st, endpoint](size_t, httplib::DataSink& sink) {
        if (st->done) {
          sink.done();
          return true;
        }
        if (stop_requested.load()) st->handle->cancel();  // shutting down: end the stream now
        CompletionStream::Update u = st->stream->wait(std::chrono::milliseconds(250));
        std::string out;
        const bool want_lp = st->params.logprobs >= 0;
        if (!u.text.empty() || !u.logprobs.empty() || (endpoint == Endpoint::kChat && !st->sent_role)) {
          if (endpoint == Endpoint::kChat) {
            const bool first = !st->sent_role;
            st->sent_role = true;
            out += sse(chat_chunk(st->id, st->created, st->model, &u.text, first, want_lp ? &u.logprobs : nullptr, ""));
          } else {
            out += sse(completion_chunk(st->id, st->created, st->model, u.text, want_lp ? &u.logprobs : nullptr,
                                        st->text_offset, ""));
          }
          st->text_offset += static_cast<int64_t>(u.text.size());
        }
        if (u.finished) {
          if (u.summary.outcome == Outcome::kFailed) {
            out += sse(error_body(ApiError{500, "generation failed: " + u.summary.error, "server_error", "", ""}));
          } else if (u.summary.outcome == Outcome::kCancelled) {
            // Not a finish the client asked for (the server is stopping): say so, not "stop".
            out += sse(error_body(ApiError{503, "generation cancelled: the server is shutting down", "server_error", "", ""}));
          } else {
            const std::string reason = u.summary.outcome == Outcome::kLength ? "length" : "stop";
            out += endpoint == Endpoint::kChat
                       ? sse(chat_chunk(st->id, st->created, st->model, nullptr, false, nullptr, reason))
                       : sse(completion_chunk(st->id, st->created, st->model, "", nullptr, st->text_offset, reason));
            if (st->params.include_usage)
              out += sse(usage_chunk(st->id, st->created, st->model, endpoint,
                                     usage_of(u.summary)));
          }
          out += "data: [DONE]\n\n";
          st->done = true;
        }
        if (out.empty()) {
          // Nothing new: probe the connection so a vanished client is noticed.
          if (!sink.is_writable()) {
            st->handle->cancel();
            return false;
          }
          return true;
        }
        if (!sink.write(out.data(), out.size())) {
          st->handle->cancel();
          return false;
        }
        if (st->done) {
          // HTTP/1.0: the stream ends with the connection, even if the client asked for
          // keep-alive; "failed" makes httplib close it now.
          if (st->close_delimited) return false;
          sink.done();
        }
        return true;
  };
  auto release = [st](bool) {
    // Called when the response ends; before the end, the client went away.
    if (!st->done) st->handle->cancel();
  };
  st->close_delimited = req.version == "HTTP/1.0";
  if (st->close_delimited) {
    // HTTP/1.0 has no chunked encoding: the stream is delimited by closing the connection.
    res.set_header("Connection", "close");
    res.set_content_provider("text/event-stream", std::move(provider), std::move(release));
  } else {
    res.set_chunked_content_provider("text/event-stream", std::move(provider), std::move(release));
  }
}

std::string Server::Impl::metrics_text() {
  const EngineStats s = engine->stats();
  std::ostringstream o;
  auto counter = [&](const char* name, const char* help) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n";
  };
  auto gauge = [&](const char* name, const char* help, double v) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n" << name << " " << v << "\n";
  };
  auto gauge_header = [&](const char* name, const char* help) {  // labelled samples follow
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n";
  };
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
    uint64_t cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cum += h.counts[i];
      o << name << "_bucket{le=\"" << h.bounds[i] << "\"} " << cum << "\n";
    }
    cum += h.counts.back();
    o << name << "_bucket{le=\"+Inf\"} " << cum << "\n" << name << "_sum " << h.sum << "\n" << name << "_count " << h.count << "\n";
  };
  counter("specula_requests_total", "Generation requests by outcome (rejected: refused before running).");
  for (Outcome oc : {Outcome::kStop, Outcome::kLength, Outcome::kCancelled, Outcome::kFailed})
    o << "specula_requests_total{outcome=\"" << outcome_name(oc) << "\"} " << s.finished[static_cast<int>(oc)] << "\n";
  o << "specula_requests_total{outcome=\"rejected_invalid\"} " << s.rejected_invalid << "\n";
  o << "specula_requests_total{outcome=\"rejected_busy\"} " << s.rejected_busy << "\n";
  counter("specula_http_responses_total", "HTTP responses by status code.");
  {
    std::lock_guard<std::mutex> lock(counters_mu);
    for (const auto& [code, n] : responses_by_status)
      o << "specula_http_responses_total{code=\"" << code << "\"} " << n << "\n";
  }
  counter("specula_prompt_tokens_total", "Prompt tokens admitted.");
  o << "specula_prompt_tokens_total " << s.prompt_tokens << "\n";
  counter("specula_generated_tokens_total", "Tokens sampled.");
  o << "specula_generated_tokens_total " << s.generated_tokens << "\n";
  counter("specula_steps_total", "Engine steps (one batched forward each).");
  o << "specula_steps_total " << s.steps << "\n";
  counter("specula_spec_rounds_total", "Row verify rounds that carried drafted tokens.");
  o << "specula_spec_rounds_total " << s.spec_rounds << "\n";
  counter("specula_spec_draft_tokens_total", "Drafted tokens proposed to the target.");
  o << "specula_spec_draft_tokens_total " << s.drafted << "\n";
  counter("specula_spec_accepted_tokens_total", "Drafted tokens the target accepted.");
  o << "specula_spec_accepted_tokens_total " << s.accepted << "\n";
  gauge("specula_spec_acceptance_rate", "Accepted / drafted tokens since start.",
        s.drafted > 0 ? static_cast<double>(s.accepted) / static_cast<double>(s.drafted) : 0.0);
  gauge("specula_spec_mean_accepted_length", "Accepted drafts per verify round since start.",
        s.spec_rounds > 0 ? static_cast<double>(s.accepted) / static_cast<double>(s.spec_rounds) : 0.0);
  gauge("specula_queue_depth", "Requests waiting for a row.", static_cast<double>(s.queue_depth));
  gauge("specula_running_rows", "Requests holding a row.", static_cast<double>(s.running_rows));
  gauge("specula_rows", "Rows (--parallel).", static_cast<double>(s.n_rows));
  gauge("specula_kv_bytes", "Bytes of KV cache and other model state held by running requests.",
        static_cast<double>(s.kv_bytes));
  gauge("specula_kv_reserved_bytes", "Bytes of model state reserved by running requests (prompt + max_tokens).",
        static_cast<double>(s.kv_reserved));
  gauge("specula_kv_budget_bytes", "The KV budget (--kv-budget, or from --ctx).", static_cast<double>(s.kv_budget));
  if (opt.engine.prompt_cache) {
    const PromptCacheStats c = opt.engine.prompt_cache->stats();
    counter("specula_prompt_cache_lookups_total", "Admitted requests that looked up the prompt cache, by result.");
    o << "specula_prompt_cache_lookups_total{result=\"hit\"} " << c.hits << "\n";
    o << "specula_prompt_cache_lookups_total{result=\"miss\"} " << c.misses << "\n";
    counter("specula_prompt_cache_hit_tokens_total", "Prompt tokens served by the prompt cache (not prefilled).");
    o << "specula_prompt_cache_hit_tokens_total " << c.hit_tokens << "\n";
    counter("specula_prompt_cache_evictions_total", "Entries dropped to keep a tier within its cap.");
    o << "specula_prompt_cache_evictions_total{tier=\"ram\"} " << c.evictions << "\n";
    o << "specula_prompt_cache_evictions_total{tier=\"disk\"} " << c.disk_evictions << "\n";
    counter("specula_prompt_cache_disk_rejected_total", "Cache files skipped: corrupted, truncated, foreign or old version.");
    o << "specula_prompt_cache_disk_rejected_total " << c.disk_rejected << "\n";
    counter("specula_prompt_cache_disk_io_total", "Entries written to / read back from disk.");
    o << "specula_prompt_cache_disk_io_total{op=\"write\"} " << c.disk_writes << "\n";
    o << "specula_prompt_cache_disk_io_total{op=\"read\"} " << c.disk_reads << "\n";
    gauge_header("specula_prompt_cache_bytes", "Bytes held by the prompt cache, by tier.");
    o << "specula_prompt_cache_bytes{tier=\"ram\"} " << c.ram_bytes << "\n";
    o << "specula_prompt_cache_bytes{tier=\"disk\"} " << c.disk_bytes << "\n";
    gauge_header("specula_prompt_cache_entries", "Entries in the prompt cache, by tier.");
    o << "specula_prompt_cache_entries{tier=\"ram\"} " << c.ram_entries << "\n";
    o << "specula_prompt_cache_entries{tier=\"disk\"} " << c.disk_entries << "\n";
    gauge("specula_prompt_cache_disk_pending", "Entries waiting to be written.", static_cast<double>(c.disk_pending));
    gauge("specula_prompt_cache_generation_checkpoints", "In-flight generations with a checkpoint (--generation-checkpoint).",
          static_cast<double>(c.checkpoints));
  }
  // Process memory (Prometheus' standard names), from /proc/self/statm.
  {
    long pages_total = 0, pages_resident = 0;
    if (FILE* fp = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(fp, "%ld %ld", &pages_total, &pages_resident) != 2) pages_total = pages_resident = 0;
      std::fclose(fp);
    }
    const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
    gauge("process_resident_memory_bytes", "Resident set size of the server process.", pages_resident * page);
    gauge("process_virtual_memory_bytes", "Virtual memory size of the server process.", pages_total * page);
  }
  gauge("specula_tokenizer_scratch_bytes", "Bytes held by the BPE tokenizer's per-thread merge scratch.",
        static_cast<double>(tokenizer::bpe_scratch_bytes()));
  histogram("specula_step_seconds", "Wall time of one engine step.", s.step_seconds);
  histogram("specula_batch_rows", "Rows in one step's forward.", s.batch_rows);
  histogram("specula_batch_tokens", "Tokens in one step's forward.", s.batch_tokens);
  return o.str();
}

}  // namespace specula::server
