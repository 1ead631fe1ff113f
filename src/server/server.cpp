// server/server.cpp — see server.h.
#include "server/server.h"

#include "tokenizer/hf_tokenizer.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "chat/prompt.h"
#include "engine/generate.h"
#include "server/anthropic_api.h"
#include "server/completion_stream.h"
#include "server/openai_api.h"
#include "server/tool_calls.h"
#include "grammar/constraint.h"
#include "server/http.h"
#include "tokenizer/bpe.h"

namespace specula::server {

using json = nlohmann::ordered_json;

namespace {
int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned diff = static_cast<unsigned>(a.size() ^ b.size());
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

void send_error(http::Exchange& ex, const ApiError& e) {
  ex.respond(e.status, "application/json", dump_json(error_body(e)));
}

bool is_anthropic_path(const std::string& path) { return path.rfind("/v1/messages", 0) == 0; }

// An error in the shape of the API the path belongs to (Anthropic's under /v1/messages).
void send_error_for(const http::Request& req, http::Exchange& ex, const ApiError& e) {
  if (is_anthropic_path(req.path))
    ex.respond(e.status, "application/json", dump_json(anthropic_error_body(e)));
  else
    send_error(ex, e);
}

void send_json(http::Exchange& ex, const json& body) { ex.respond(200, "application/json", dump_json(body)); }

std::string sse(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

Usage usage_of(const RequestSummary& s) {
  return Usage{s.n_prompt, s.n_generated, s.cached_tokens, s.spec_rounds, s.drafted, s.accepted};
}
}  // namespace

class AnswerFormat;

struct Server::Impl {
  ServerOptions opt;
  std::unique_ptr<Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::optional<chat::ChatTemplate> chat_template;
  SamplingDefaults sampling_defaults;  // the model's generation_config.json, if any
  ToolFormat tool_format = ToolFormat::kNone;  // how the template's model writes tool calls
  std::string default_pooling = "mean";        // embeddings (--pooling, or the GGUF's pooling_type)
  std::string chat_template_origin;  // "model metadata" / "file"
  std::unique_ptr<Engine> engine;
  std::unique_ptr<http::HttpServer> http;  // declared after the engine: goes first
  std::atomic<uint64_t> next_id{1};
  std::atomic<bool> stop_requested{false};  // stop() was called (maybe before serve())
  std::mt19937_64 seed_rng{std::random_device{}()};
  std::mutex seed_mu;
  // Structured outputs: the vocabulary as llguidance sees it, built at the first use.
  std::mutex grammar_mu;
  std::shared_ptr<const GrammarVocab> grammar_vocab;
  // DRY's sequence breakers as token ids, per breaker list (one pass over the vocabulary each).
  std::mutex dry_mu;
  std::map<std::vector<std::string>, std::vector<std::vector<int32_t>>> dry_breakers;
  const std::vector<std::vector<int32_t>>& dry_breaker_ids(const std::vector<std::string>& breakers) {
    std::lock_guard<std::mutex> lock(dry_mu);
    auto it = dry_breakers.find(breakers);
    if (it == dry_breakers.end()) {
      if (dry_breakers.size() >= 64) dry_breakers.clear();  // bounded: clients choose the lists
      auto ids = dry_breaker_ids_from_strings(
          breakers, tok->vocab().size(), [&](int32_t id) { return tok->token_to_piece(id, true); },
          [&](std::string_view s) { return tok->encode(s, false, false); });
      it = dry_breakers.emplace(breakers, std::move(ids)).first;
    }
    return it->second;
  }
  // HTTP outcome counters for /metrics.
  std::mutex counters_mu;
  std::map<int, uint64_t> responses_by_status;

  Result<std::shared_ptr<const GrammarVocab>> vocab_for_grammar() {
    std::lock_guard<std::mutex> lock(grammar_mu);
    if (!grammar_vocab) {
      auto v = GrammarVocab::create(*tok, static_cast<int32_t>(model->info().n_vocab), opt.engine.eog_ids);
      if (!v) return v.status();
      grammar_vocab = std::move(v).value();
    }
    return grammar_vocab;
  }
  // The request's grammar compiled (worker thread), or the 400 that says why not.
  std::optional<ApiError> compile_constraint(const CompletionParams& c, std::shared_ptr<TokenConstraint>* out);

  uint64_t random_seed() {
    std::lock_guard<std::mutex> lock(seed_mu);
    return seed_rng() >> 1;  // in [0, 2^63): a client can send it back as "seed"
  }
  void count(int status) {
    std::lock_guard<std::mutex> lock(counters_mu);
    ++responses_by_status[status];
  }

  // Answers one request (worker thread): API key, then the route.
  void dispatch(const http::Request& req, http::Exchange& ex);
  // API key check (true: go on); answers 401 itself otherwise.
  bool authorized(const http::Request& req, http::Exchange& ex);
  void handle_completion(const http::Request& req, http::Exchange& ex, Endpoint endpoint);
  // Anthropic's POST /v1/messages (count_tokens: /v1/messages/count_tokens).
  void handle_messages(const http::Request& req, http::Exchange& ex, bool count_tokens);
  // Prompt, submission, and the answer in `fmt`'s shape, streamed or whole.
  void run_generation(CompletionParams c, http::Exchange& ex, AnswerFormat& fmt);
  // n > 1 (OpenAI routes): choice 0 prefills; the others start once its first token is out,
  // from the prompt cache's copy of the prompt's state; choice i samples with seed + i.
  void run_choices(CompletionParams& c, EngineRequest er, int64_t n_prompt, http::Exchange& ex, AnswerFormat& fmt);
  // The answer to a refused submission.
  static ApiError submit_error(const Submission& sub);
  void handle_cache_flush(const http::Request& req, http::Exchange& ex);
  void handle_models(http::Exchange& ex);
  void handle_tokenize(const http::Request& req, http::Exchange& ex);
  void handle_embeddings(const http::Request& req, http::Exchange& ex);
  void handle_apply_template(const http::Request& req, http::Exchange& ex);
  void handle_detokenize(const http::Request& req, http::Exchange& ex);
  std::string metrics_text();
  // The chat template's variables for a chat request (messages, tools, BOS/EOS text).
  std::variant<json, ApiError> chat_context(const CompletionParams& c);
  // Prompt ids for a parsed request, or an error.
  std::optional<ApiError> build_prompt(const CompletionParams& c, std::vector<int32_t>* ids);
};

Result<std::unique_ptr<Server>> Server::create(std::unique_ptr<Model> model, ServerOptions options) {
  if (model == nullptr) return Status::error("[server] no model");
  auto impl = std::make_unique<Impl>();
  auto tok = tokenizer::load_tokenizer(model->file());
  if (!tok) return tok.status();
  impl->tok = std::move(tok).value();
  if (options.chat_template) {
    auto t = chat::ChatTemplate::parse(*options.chat_template);
    if (!t) return Status::error("[server] --chat-template-file: " + t.message());
    impl->chat_template = std::move(t).value();
    impl->chat_template_origin = "file";
    impl->tool_format = tool_format_of(*options.chat_template);
  } else if (auto src = chat::chat_template_from_gguf(model->file())) {
    auto t = chat::ChatTemplate::parse(*src);
    if (!t) return Status::error("[server] the model's chat template: " + t.message());
    impl->chat_template = std::move(t).value();
    impl->chat_template_origin = "model metadata";
    impl->tool_format = tool_format_of(*src);
  }
  if (options.model_id.empty()) options.model_id = model->info().name.empty() ? "model" : model->info().name;
  if (options.engine.eog_ids.empty()) options.engine.eog_ids = chat::end_of_generation_ids(impl->tok->vocab(), model->file());
  impl->sampling_defaults = model_sampling_defaults(model->file());
  auto engine = Engine::create(*model, options.engine);
  if (!engine) return engine.status();
  impl->engine = std::move(engine).value();
  // Embedding pooling: --pooling, else the model's {arch}.pooling_type when it is mean (1)
  // or last (3), else mean.
  if (!options.pooling.empty()) {
    impl->default_pooling = options.pooling;
  } else if (const gguf::Value* pt = model->file().find(model->info().architecture + ".pooling_type")) {
    const uint64_t v = pt->u != 0 ? pt->u : static_cast<uint64_t>(pt->i);
    if (v == 3) impl->default_pooling = "last";
  }
  impl->model = std::move(model);
  impl->opt = std::move(options);
  std::unique_ptr<Server> s(new Server());
  s->impl_ = std::move(impl);
  Impl* im = s->impl_.get();
  http::Options ho;
  ho.host = im->opt.host;
  ho.port = im->opt.port;
  ho.max_body_bytes = im->opt.max_body_bytes;
  ho.max_connections = im->opt.max_connections;
  ho.header_timeout_s = im->opt.header_timeout_s;
  ho.body_timeout_s = im->opt.body_timeout_s;
  ho.write_timeout_s = im->opt.write_timeout_s;
  // Every request that may hold a row or wait in the queue has a worker, and a few more
  // answer /health and /metrics while they all wait.
  ho.workers = im->opt.engine.n_rows + im->opt.engine.max_queue + 8;
  ho.error_body = [](int status, const std::string& message, const std::string& path) {
    ApiError e{status, message, status >= 500 ? "server_error" : "invalid_request_error", "", ""};
    if (status == 413) e.code = "body_too_large";
    if (status == 408) e.code = "request_timeout";
    if (status == 431) e.code = "headers_too_large";
    if (status == 503) e.code = "too_many_connections";
    return dump_json(is_anthropic_path(path) ? anthropic_error_body(e) : error_body(e));
  };
  ho.on_status = [im](int status) { im->count(status); };
  im->http = http::HttpServer::create(std::move(ho), [im](const http::Request& req, http::Exchange& ex) {
    im->dispatch(req, ex);
  });
  return s;
}

Server::~Server() {
  if (impl_) {
    impl_->http.reset();    // no handler runs after this
    impl_->engine.reset();  // finishes what still runs before the model goes
  }
}

Status Server::bind() {
  SPECULA_RETURN_IF_ERROR(impl_->http->bind());
  port_ = impl_->http->port();
  return Status::ok();
}

void Server::serve() {
  if (impl_->stop_requested.load()) return;
  impl_->http->run();
}

Status Server::listen() {
  SPECULA_RETURN_IF_ERROR(bind());
  serve();
  return Status::ok();
}

const Engine& Server::engine() const { return *impl_->engine; }

// Async-signal-safe: both only set flags.
void Server::stop() {
  impl_->stop_requested.store(true);
  impl_->http->stop();
}

void Server::Impl::dispatch(const http::Request& req, http::Exchange& ex) {
  if (req.path != "/health" && !authorized(req, ex)) return;
  struct Route {
    const char* method;
    const char* path;
    std::function<void()> run;
  };
  const Route routes[] = {
      {"GET", "/health", [&] { ex.respond(200, "application/json", R"({"status":"ok"})"); }},
      {"GET", "/v1/models", [&] { handle_models(ex); }},
      {"GET", "/metrics", [&] { ex.respond(200, "text/plain; version=0.0.4", metrics_text()); }},
      {"POST", "/v1/completions", [&] { handle_completion(req, ex, Endpoint::kCompletions); }},
      {"POST", "/v1/chat/completions", [&] { handle_completion(req, ex, Endpoint::kChat); }},
      // llama-server aliases
      {"POST", "/completion", [&] { handle_completion(req, ex, Endpoint::kCompletions); }},
      {"POST", "/chat/completions", [&] { handle_completion(req, ex, Endpoint::kChat); }},
      {"POST", "/v1/messages", [&] { handle_messages(req, ex, false); }},
      {"POST", "/v1/messages/count_tokens", [&] { handle_messages(req, ex, true); }},
      {"POST", "/admin/cache/flush", [&] { handle_cache_flush(req, ex); }},
      // llama-server's tokenizer routes
      {"POST", "/tokenize", [&] { handle_tokenize(req, ex); }},
      {"POST", "/apply-template", [&] { handle_apply_template(req, ex); }},
      {"POST", "/v1/embeddings", [&] { handle_embeddings(req, ex); }},
      {"POST", "/embeddings", [&] { handle_embeddings(req, ex); }},
      {"POST", "/detokenize", [&] { handle_detokenize(req, ex); }},
  };
  bool path_known = false;
  for (const Route& r : routes) {
    if (req.path != r.path) continue;
    path_known = true;
    if (req.method == r.method) return r.run();
  }
  if (path_known)
    send_error_for(req, ex, ApiError{405, "method " + req.method + " not allowed on " + req.path, "invalid_request_error", "", ""});
  else
    send_error_for(req, ex, ApiError{404, "no route for " + req.method + " " + req.path, "not_found_error", "", ""});
}

void Server::Impl::handle_models(http::Exchange& ex) {
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
  send_json(ex, json{{"object", "list"}, {"data", {m}}});
}

namespace {
// A 400 naming the first field of `j` not in `known`.
std::optional<ApiError> only_fields(const json& j, std::initializer_list<const char*> known, const char* route) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) return ApiError{400, "unknown field '" + it.key() + "' for " + route, "invalid_request_error", it.key(), ""};
  }
  return std::nullopt;
}

}  // namespace

// POST /tokenize {"content": TEXT, "add_special": false, "parse_special": true,
// "with_pieces": false} -> {"tokens": [ids]} (with_pieces: [{"id", "piece"}], the piece
// as text when it is valid UTF-8, else as a byte array), as llama-server.
void Server::Impl::handle_tokenize(const http::Request& req, http::Exchange& ex) {
  auto parsed = parse_body_object(req.body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  const json& j = std::get<json>(parsed);
  if (auto e = only_fields(j, {"content", "add_special", "parse_special", "with_pieces"}, "/tokenize")) return send_error(ex, *e);
  if (!j.contains("content") || !j["content"].is_string())
    return send_error(ex, ApiError{400, "'content' must be a string", "invalid_request_error", "content", ""});
  bool add_special = false, parse_special = true, with_pieces = false;
  FieldReader p{j, std::nullopt};
  p.boolean("add_special", &add_special);
  p.boolean("parse_special", &parse_special);
  p.boolean("with_pieces", &with_pieces);
  if (p.error) return send_error(ex, *p.error);
  const std::vector<int32_t> ids = tok->encode(j["content"].get<std::string>(), add_special, parse_special);
  json tokens = json::array();
  for (int32_t id : ids) {
    if (!with_pieces) {
      tokens.push_back(id);
      continue;
    }
    const std::string piece = tok->token_to_piece(id, /*render_special=*/true);
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
}  // namespace

// POST /v1/embeddings {"input": text | [texts] | [ids] | [[ids]], "encoding_format":
// "float" | "base64", "pooling": "mean" | "last" (specula extension; default: the GGUF's
// {arch}.pooling_type when it says mean or last, else mean)} -> OpenAI's list of
// embeddings: the final-normed hidden states of the input's tokens (BOS added; control
// text not parsed), pooled, L2-normalised — what llama.cpp's embeddings give for the same
// model and pooling. Each input runs on the engine thread between steps (Engine::
// run_exclusive), in chunks of 512 tokens, in a state of its own.
void Server::Impl::handle_embeddings(const http::Request& req, http::Exchange& ex) {
  auto parsed = parse_body_object(req.body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  const json& j = std::get<json>(parsed);
  if (auto e = only_fields(j, {"input", "model", "encoding_format", "pooling", "user"}, "/v1/embeddings"))
    return send_error(ex, *e);  // `dimensions` (shortened embeddings) among them
  if (j.contains("model") && !j["model"].is_null() && j["model"] != opt.model_id)
    return send_error(ex, ApiError{400, "model " + shown(j["model"]) + " is not served here; this server serves '" +
                                            opt.model_id + "'",
                                   "invalid_request_error", "model", "model_not_found"});
  const std::string format = j.contains("encoding_format") && j["encoding_format"].is_null()
                               ? "float"
                               : j.contains("encoding_format") ? string_field(j, "encoding_format", "?") : "float";
  if (format != "float" && format != "base64")
    return send_error(ex, ApiError{400, "'encoding_format' must be \"float\" or \"base64\"", "invalid_request_error",
                                   "encoding_format", ""});
  std::string pooling = default_pooling;
  if (j.contains("pooling") && !j["pooling"].is_null()) {
    if (!(j["pooling"] == "mean" || j["pooling"] == "last"))
      return send_error(ex, ApiError{400, "'pooling' must be \"mean\" or \"last\"", "invalid_request_error", "pooling", ""});
    pooling = j["pooling"].get<std::string>();
  }
  // Inputs as token ids.
  std::vector<std::vector<int32_t>> inputs;
  const json* in = j.contains("input") ? &j["input"] : nullptr;
  auto bad_input = [&](const std::string& why) {
    send_error(ex, ApiError{400, "'input' " + why, "invalid_request_error", "input", ""});
  };
  auto ids_of = [&](const json& arr, std::vector<int32_t>* out) {
    for (const json& t : arr) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok->vocab().size()) return false;
      out->push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return true;
  };
  if (in == nullptr) return bad_input("is required");
  if (in->is_string()) {
    inputs.push_back(tok->encode(in->get<std::string>(), true, false));
  } else if (in->is_array() && !in->empty() && (*in)[0].is_number_integer()) {
    inputs.emplace_back();
    if (!ids_of(*in, &inputs.back())) return bad_input("token ids must be integers in the vocabulary");
  } else if (in->is_array() && !in->empty() && in->size() <= 256) {
    for (const json& x : *in) {
      inputs.emplace_back();
      if (x.is_string()) {
        inputs.back() = tok->encode(x.get<std::string>(), true, false);
      } else if (!x.is_array() || !ids_of(x, &inputs.back())) {
        return bad_input("must be a string, an array of strings, or token ids (arrays of integers)");
      }
    }
  } else {
    return bad_input("must be a non-empty string or array (at most 256 inputs)");
  }
  int64_t n_tokens = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].empty()) return bad_input("item " + std::to_string(k) + " has no tokens");
    if (static_cast<int64_t>(inputs[k].size()) > opt.engine.n_ctx)
      return send_error(ex, ApiError{400, "input " + std::to_string(k) + " has " + std::to_string(inputs[k].size()) +
                                              " tokens; the context holds " + std::to_string(opt.engine.n_ctx),
                                     "invalid_request_error", "input", "context_length_exceeded"});
    n_tokens += static_cast<int64_t>(inputs[k].size());
  }
  const int64_t E = model->info().n_embd;
  std::vector<std::vector<float>> vectors(inputs.size(), std::vector<float>(static_cast<size_t>(E), 0.0f));
  Status failure = Status::ok();
  // One input per turn of the engine loop: decoding rows step between them.
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (ex.client_gone()) return;  // nobody to answer
    const bool ran = engine->run_exclusive([&](Model& m) {
      const auto& ids = inputs[k];
      const int64_t n = static_cast<int64_t>(ids.size());
      auto st = new_state(m, opt.engine.cache, n + 1);
      if (!st) {
        failure = st.status();
        return;
      }
      auto row = st->new_row();
      if (!row || !st->reserve(1).is_ok()) {
        failure = Status::error("[embeddings] out of memory");
        return;
      }
      st->insert(std::move(row).value());
      std::vector<double> acc(static_cast<size_t>(E), 0.0);
      Tensor hidden;
      const int32_t rows[1] = {0};
      for (int64_t off = 0; off < n; off += 512) {
        Batch b;
        b.B = 1;
        b.T = std::min<int64_t>(512, n - off);
        b.ids = ids.data() + off;
        b.rows = rows;
        failure = m.forward(b, *st, hidden);
        if (!failure.is_ok()) return;
        const float* h = hidden.data();
        if (pooling == "mean") {
          for (int64_t t = 0; t < b.T; ++t)
            for (int64_t e = 0; e < E; ++e) acc[static_cast<size_t>(e)] += h[t * E + e];
        } else if (off + b.T == n) {
          for (int64_t e = 0; e < E; ++e) acc[static_cast<size_t>(e)] = h[(b.T - 1) * E + e];
        }
      }
      double norm = 0;
      for (int64_t e = 0; e < E; ++e) {
        if (pooling == "mean") acc[static_cast<size_t>(e)] /= static_cast<double>(n);
        norm += acc[static_cast<size_t>(e)] * acc[static_cast<size_t>(e)];
      }
      norm = norm > 0 ? 1.0 / std::sqrt(norm) : 0.0;
      for (int64_t e = 0; e < E; ++e) vectors[k][static_cast<size_t>(e)] = static_cast<float>(acc[static_cast<size_t>(e)] * norm);
    });
    if (!ran) return send_error(ex, ApiError{503, "the server is shutting down", "server_error", "", ""});
    if (!failure.is_ok()) return send_error(ex, ApiError{500, failure.message(), "server_error", "", ""});
  }
  json data = json::array();
  for (size_t k = 0; k < vectors.size(); ++k) {
    json emb = format == "base64"
                   ? json(base64(reinterpret_cast<const uint8_t*>(vectors[k].data()), vectors[k].size() * sizeof(float)))
                   : json(vectors[k]);
    data.push_back({{"object", "embedding"}, {"index", k}, {"embedding", std::move(emb)}});
  }
  send_json(ex, json{{"object", "list"}, {"data", std::move(data)}, {"model", opt.model_id},
                     {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}});
}

// POST /apply-template {a chat request} -> {"prompt": the rendered chat prompt} (llama-
// server's route): the text the model would see, before tokenization.
void Server::Impl::handle_apply_template(const http::Request& req, http::Exchange& ex) {
  auto parsed = parse_completion_request(req.body, Endpoint::kChat, sampling_defaults);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  const CompletionParams& c = std::get<CompletionParams>(parsed);
  if (!chat_template)
    return send_error(ex, ApiError{400, "this model has no chat template", "invalid_request_error", "messages", ""});
  auto ctx = chat_context(c);
  if (auto* e = std::get_if<ApiError>(&ctx)) return send_error(ex, *e);
  auto rendered = chat_template->render_marked(std::get<json>(ctx));
  if (!rendered)
    return send_error(ex, ApiError{400, "the chat template failed on these messages: " + rendered.message(),
                                   "invalid_request_error", "messages", ""});
  send_json(ex, json{{"prompt", rendered->text}});
}

// POST /detokenize {"tokens": [ids]} -> {"content": TEXT} (control tokens rendered).
void Server::Impl::handle_detokenize(const http::Request& req, http::Exchange& ex) {
  auto parsed = parse_body_object(req.body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  const json& j = std::get<json>(parsed);
  if (auto e = only_fields(j, {"tokens"}, "/detokenize")) return send_error(ex, *e);
  if (!j.contains("tokens") || !j["tokens"].is_array())
    return send_error(ex, ApiError{400, "'tokens' must be an array of token ids", "invalid_request_error", "tokens", ""});
  std::vector<int32_t> ids;
  for (const json& t : j["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok->vocab().size())
      return send_error(ex, ApiError{400, "token " + t.dump().substr(0, 40) + " is not an id in [0, " +
                                              std::to_string(tok->vocab().size()) + ")",
                                     "invalid_request_error", "tokens", ""});
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  auto text = tok->decode(ids, /*remove_special=*/false, /*render_special=*/true);
  if (!text) return send_error(ex, ApiError{400, text.message(), "invalid_request_error", "tokens", ""});
  send_json(ex, json{{"content", *text}});  // invalid UTF-8 (a cut character) becomes U+FFFD
}

// The prompt cache's durability point: returns once every entry stored so far is on disk.
// Loopback clients only, or any client with the API key.
void Server::Impl::handle_cache_flush(const http::Request& req, http::Exchange& ex) {
  const bool loopback = req.remote_addr == "127.0.0.1" || req.remote_addr == "::1" ||
                        req.remote_addr.rfind("::ffff:127.", 0) == 0;
  if (opt.api_key.empty() && !loopback)
    return send_error(ex, ApiError{403, "cache flush is allowed from loopback or with an API key", "permission_error", "", ""});
  const auto& cache = opt.engine.prompt_cache;
  if (!cache) return send_error(ex, ApiError{400, "this server runs without a prompt cache", "invalid_request_error", "", ""});
  const Status st = cache->flush();
  if (!st.is_ok()) return send_error(ex, ApiError{500, st.message(), "server_error", "", ""});
  const PromptCacheStats cs = cache->stats();
  send_json(ex, json{{"flushed", true}, {"disk_entries", cs.disk_entries}, {"disk_bytes", cs.disk_bytes}});
}

std::variant<json, ApiError> Server::Impl::chat_context(const CompletionParams& c) {
  const tokenizer::Vocab& vocab = tok->vocab();
  const std::string bos = vocab.valid_id(vocab.bos_id()) ? vocab.text(vocab.bos_id()) : "";
  const std::string eos = vocab.valid_id(vocab.eos_id()) ? vocab.text(vocab.eos_id()) : "";
  json ctx = {{"messages", c.messages}, {"add_generation_prompt", true}, {"bos_token", bos}, {"eos_token", eos}};
  if (!c.tools.is_null()) {
    if (tool_format == ToolFormat::kNone)
      return ApiError{400,
                      "this model's chat template has no tool-call format specula can read (supported: Hermes "
                      "<tool_call> as Qwen2.5 writes, Llama 3.x JSON, Mistral [TOOL_CALLS])",
                      "invalid_request_error", "tools", ""};
    if (c.logprobs >= 0)
      return ApiError{400, "logprobs together with tools are not supported yet", "invalid_request_error", "logprobs", ""};
    ctx["tools"] = c.tools;
  }
  return ctx;
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
      *ids = tok->encode(c.prompt_text, /*add_special=*/true, c.parse_special);
    }
  } else {
    if (!chat_template)
      return ApiError{400,
                      "this model has no chat template (its GGUF metadata holds none); start the server with "
                      "--chat-template-file FILE, or use /v1/completions",
                      "invalid_request_error", "messages", "no_chat_template"};
    auto ctx = chat_context(c);
    if (auto* e = std::get_if<ApiError>(&ctx)) return *e;
    auto rendered = chat_template->render_marked(std::get<json>(ctx));
    if (!rendered) return ApiError{400, "the chat template failed on these messages: " + rendered.message(),
                                   "invalid_request_error", "messages", ""};
    // Only the template's own text may yield control tokens; BOS as the template has it.
    *ids = chat::prompt_ids(*tok, *rendered);
  }
  if (ids->empty())
    return ApiError{400, "the prompt is empty (it tokenizes to no tokens)", "invalid_request_error",
                    c.endpoint == Endpoint::kChat ? "messages" : "prompt", ""};
  return std::nullopt;
}

// What every answer format knows of the generation it writes.
struct Generation {
  std::string id;
  std::string model;
  int64_t created = 0;
  int64_t n_prompt = 0;
  uint64_t seed = 0;
  const CompletionParams* params = nullptr;
};

// How one API family writes a generation's answer: OpenAI (completions, chat) or
// Anthropic Messages. run_generation() drives it.
class AnswerFormat {
 public:
  virtual ~AnswerFormat() = default;
  virtual void error(http::Exchange& ex, const ApiError& e) = 0;
  virtual int unknown_model_status() const { return 400; }
  virtual std::string id_prefix() const = 0;
  // tools: the format the model writes tool calls in; kNone when the request has no tools.
  void begin(Generation g, ToolFormat tools) {
    g_ = std::move(g);
    std::vector<std::string> names;
    if (g_.params->tools.is_array())
      for (const json& t : g_.params->tools) names.push_back(t["function"]["name"].get<std::string>());
    calls_ = ToolCallStream(tools, std::move(names), g_.params->parallel_tool_calls);
  }
  // Non-streamed: the whole answer; `u` is the final update, `text`/`lps` everything.
  virtual json whole(const std::string& text, const std::vector<TokenLogprob>& lps, const CompletionStream::Update& u) = 0;
  // Streamed: events before any text, for one update's text, and after the finish
  // (including the error events of a failed or cancelled generation).
  virtual std::string stream_start() { return ""; }
  virtual std::string stream_piece(const CompletionStream::Update& u) = 0;
  virtual std::string stream_end(const CompletionStream::Update& u) = 0;

 protected:
  Generation g_;
  ToolCallStream calls_;
};

namespace {

std::string cut_error_message(const CompletionStream::Update& u) {
  return u.summary.outcome == Outcome::kCancelled ? "generation cancelled: the server is shutting down"
                                                  : "generation failed: " + u.summary.error;
}

// A generation that did not finish: the request's own grammar giving out (llguidance's
// limits, a dead end) is the request's fault (400, naming its field); anything else is the
// server's (500), or the shutdown's (503).
ApiError cut_error(const CompletionStream::Update& u, const CompletionParams* c) {
  if (u.summary.outcome == Outcome::kFailed && u.summary.request_fault && c != nullptr) {
    const std::string field = c->constraint ? c->constraint_field : "tool_choice";
    return ApiError{400, "'" + field + "': the grammar could not continue: " + u.summary.error, "invalid_request_error",
                    field, ""};
  }
  return ApiError{u.summary.outcome == Outcome::kFailed ? 500 : 503, cut_error_message(u), "server_error", "", ""};
}

class OpenAiFormat : public AnswerFormat {
 public:
  explicit OpenAiFormat(Endpoint endpoint) : endpoint_(endpoint) {}
  void error(http::Exchange& ex, const ApiError& e) override { send_error(ex, e); }
  std::string id_prefix() const override { return endpoint_ == Endpoint::kChat ? "chatcmpl-" : "cmpl-"; }

  json whole(const std::string& text, const std::vector<TokenLogprob>& lps, const CompletionStream::Update& u) override {
    const Usage usage = usage_of(u.summary);
    const auto* lp = g_.params->logprobs >= 0 ? &lps : nullptr;
    json body = endpoint_ == Endpoint::kChat
                    ? chat_response(g_.id, g_.created, g_.model, text, lp, u.finish_reason, usage)
                    : completion_response(g_.id, g_.created, g_.model, text, lp, u.finish_reason, usage);
    body["seed"] = g_.seed;  // the seed this request sampled with (random when not given)
    {
      const ParsedAnswer a = calls_.parse_whole(text, u.summary.outcome == Outcome::kLength);
      if (!a.calls.empty()) {
        json& msg = body["choices"][0]["message"];
        msg["content"] = a.content.empty() ? json(nullptr) : json(a.content);
        msg["tool_calls"] = tool_calls_json(a.calls, false);
        body["choices"][0]["finish_reason"] = "tool_calls";
      }
    }
    // llama-server's "timings" extension (same field names), for benchmarks and clients
    // that read it: prefill and decode time of this request.
    const RequestSummary& sm = u.summary;
    const int64_t n_dec = std::max<int64_t>(0, sm.n_generated - 1);
    body["timings"] = {{"prompt_n", sm.n_prompt},
                       {"prompt_ms", sm.prefill_seconds * 1e3},
                       {"predicted_n", sm.n_generated},
                       {"predicted_ms", sm.decode_seconds * 1e3},
                       {"predicted_per_second", sm.decode_seconds > 0 ? n_dec / sm.decode_seconds : 0.0}};
    return body;
  }

  std::string stream_piece(const CompletionStream::Update& u) override {
    // Text goes out until a call's opening; from there on it is held for parsing.
    CompletionStream::Update v;
    v.text = calls_.feed(u.text);
    v.logprobs = u.logprobs;  // (logprobs with tools are refused)
    return text_piece(v);
  }

  std::string text_piece(const CompletionStream::Update& u) {
    const bool want_lp = g_.params->logprobs >= 0;
    if (u.text.empty() && u.logprobs.empty() && !(endpoint_ == Endpoint::kChat && !sent_role_)) return "";
    std::string out;
    if (endpoint_ == Endpoint::kChat) {
      const bool first = !sent_role_;
      sent_role_ = true;
      out = chunk(chat_chunk(g_.id, g_.created, g_.model, &u.text, first, want_lp ? &u.logprobs : nullptr, ""));
    } else {
      out = chunk(completion_chunk(g_.id, g_.created, g_.model, u.text, want_lp ? &u.logprobs : nullptr, text_offset_, ""));
    }
    text_offset_ += static_cast<int64_t>(u.text.size());
    return out;
  }

  std::string stream_end(const CompletionStream::Update& u) override {
    std::string out;
    if (u.summary.outcome == Outcome::kFailed || u.summary.outcome == Outcome::kCancelled) {
      // Not a finish the client asked for: say so, not "stop".
      out += sse(error_body(cut_error(u, g_.params)));
    } else {
      std::string reason = u.summary.outcome == Outcome::kLength ? "length" : "stop";
      {
        const ParsedAnswer a = calls_.finish(reason == "length");
        CompletionStream::Update v;
        v.text = a.content;
        out += text_piece(v);
        if (!a.calls.empty()) {
          json delta = {{"tool_calls", tool_calls_json(a.calls, true)}};
          json ch = {{"id", g_.id}, {"object", "chat.completion.chunk"}, {"created", g_.created}, {"model", g_.model},
                     {"choices", {{{"index", 0}, {"delta", delta}, {"finish_reason", nullptr}, {"logprobs", nullptr}}}}};
          out += chunk(std::move(ch));
          reason = "tool_calls";
        }
      }
      json last = endpoint_ == Endpoint::kChat ? chat_chunk(g_.id, g_.created, g_.model, nullptr, false, nullptr, reason)
                                               : completion_chunk(g_.id, g_.created, g_.model, "", nullptr, text_offset_, reason);
      last["seed"] = g_.seed;
      out += chunk(std::move(last));
      if (g_.params->include_usage) out += sse(usage_chunk(g_.id, g_.created, g_.model, endpoint_, usage_of(u.summary)));
    }
    return out + "data: [DONE]\n\n";
  }

 private:
  // With include_usage every chunk but the last carries "usage": null (OpenAI's shape).
  std::string chunk(json j) const {
    if (g_.params->include_usage) j["usage"] = nullptr;
    return sse(j);
  }
  // OpenAI's tool_calls array (streamed: with each call's index).
  json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) const {
    json arr = json::array();
    for (size_t k = 0; k < calls.size(); ++k) {
      json c = {{"id", "call_" + g_.id + "_" + std::to_string(k)},
                {"type", "function"},
                {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}};
      if (with_index) c["index"] = k;
      arr.push_back(std::move(c));
    }
    return arr;
  }
  Endpoint endpoint_;
  bool sent_role_ = false;
  int64_t text_offset_ = 0;
};

class AnthropicFormat : public AnswerFormat {
 public:
  void error(http::Exchange& ex, const ApiError& e) override {
    ex.respond(e.status, "application/json", dump_json(anthropic_error_body(e)));
  }
  int unknown_model_status() const override { return 404; }
  std::string id_prefix() const override { return "msg_"; }

  json whole(const std::string& text, const std::vector<TokenLogprob>&, const CompletionStream::Update& u) override {
    const ParsedAnswer a = calls_.parse_whole(text, u.summary.outcome == Outcome::kLength);
    return anthropic_message(g_.id, g_.model, a.content, a.calls, stop_reason(u, a), u.stop_sequence, usage(u.summary));
  }
  // The text block starts with the first text; tool_use blocks follow it at the end.
  std::string stream_start() override {
    json msg = anthropic_message(g_.id, g_.model, "", {}, "", "", AnthropicUsage{g_.n_prompt, 0, 0});
    msg["content"] = json::array();
    return anthropic_event({{"type", "message_start"}, {"message", msg}}) + anthropic_event({{"type", "ping"}});
  }
  std::string stream_piece(const CompletionStream::Update& u) override { return text_delta(calls_.feed(u.text)); }
  std::string stream_end(const CompletionStream::Update& u) override {
    if (u.summary.outcome == Outcome::kFailed || u.summary.outcome == Outcome::kCancelled)
      return anthropic_event(anthropic_error_body(cut_error(u, g_.params)));
    std::string out;
    const ParsedAnswer a = calls_.finish(u.summary.outcome == Outcome::kLength);
    out += text_delta(a.content);
    if (!text_open_ && a.calls.empty()) out += text_delta("", true);  // an empty answer is an empty text block
    if (text_open_) out += anthropic_event({{"type", "content_block_stop"}, {"index", index_++}});
    for (size_t k = 0; k < a.calls.size(); ++k) {
      out += anthropic_event({{"type", "content_block_start"}, {"index", index_},
                              {"content_block", anthropic_tool_use(g_.id, k, a.calls[k], false)}});
      out += anthropic_event({{"type", "content_block_delta"}, {"index", index_},
                              {"delta", {{"type", "input_json_delta"}, {"partial_json", a.calls[k].arguments}}}});
      out += anthropic_event({{"type", "content_block_stop"}, {"index", index_++}});
    }
    const AnthropicUsage us = usage(u.summary);
    return out + anthropic_event({{"type", "message_delta"},
                                  {"delta",
                                   {{"stop_reason", stop_reason(u, a)},
                                    {"stop_sequence", u.stop_sequence.empty() ? json(nullptr) : json(u.stop_sequence)}}},
                                  {"usage",
                                   {{"output_tokens", us.output_tokens},
                                    {"input_tokens", us.input_tokens},
                                    {"cache_read_input_tokens", us.cache_read_input_tokens}}}}) +
           anthropic_event({{"type", "message_stop"}});
  }

 private:
  // Opens the text block when needed; a delta for non-empty text.
  std::string text_delta(const std::string& text, bool open_even_if_empty = false) {
    if (text.empty() && !open_even_if_empty) return "";
    std::string out;
    if (!text_open_) {
      text_open_ = true;
      out += anthropic_event(
          {{"type", "content_block_start"}, {"index", index_}, {"content_block", {{"type", "text"}, {"text", ""}}}});
    }
    if (!text.empty())
      out += anthropic_event(
          {{"type", "content_block_delta"}, {"index", index_}, {"delta", {{"type", "text_delta"}, {"text", text}}}});
    return out;
  }
  static std::string stop_reason(const CompletionStream::Update& u, const ParsedAnswer& a) {
    return a.calls.empty() ? anthropic_stop_reason(u.finish_reason, u.stop_sequence) : "tool_use";
  }
  static AnthropicUsage usage(const RequestSummary& s) {
    return AnthropicUsage{s.n_prompt - s.cached_tokens, s.n_generated, s.cached_tokens};
  }
  bool text_open_ = false;
  int index_ = 0;
};

}  // namespace

bool Server::Impl::authorized(const http::Request& req, http::Exchange& ex) {
  if (opt.api_key.empty()) return true;
  const std::string auth = req.header("Authorization");
  if (constant_time_equal(auth, "Bearer " + opt.api_key)) return true;
  // Anthropic's clients send the key as x-api-key.
  if (req.has_header("x-api-key") && constant_time_equal(req.header("x-api-key"), opt.api_key)) return true;
  send_error_for(req, ex,
                 ApiError{401, "invalid or missing API key (send 'Authorization: Bearer <key>' or 'x-api-key: <key>')",
                          "authentication_error", "", "invalid_api_key"});
  return false;
}

void Server::Impl::handle_completion(const http::Request& req, http::Exchange& ex, Endpoint endpoint) {
  auto parsed = parse_completion_request(req.body, endpoint, sampling_defaults);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  CompletionParams& c = std::get<CompletionParams>(parsed);
  OpenAiFormat fmt(endpoint);
  run_generation(std::move(c), ex, fmt);
}

void Server::Impl::handle_messages(const http::Request& req, http::Exchange& ex, bool count_tokens) {
  auto parsed = parse_messages_request(req.body, count_tokens);
  if (auto* e = std::get_if<ApiError>(&parsed)) return AnthropicFormat().error(ex, *e);
  CompletionParams& c = std::get<CompletionParams>(parsed);
  AnthropicFormat fmt;
  if (!count_tokens) return run_generation(std::move(c), ex, fmt);
  std::vector<int32_t> ids;
  if (auto e = build_prompt(c, &ids)) return fmt.error(ex, *e);
  send_json(ex, json{{"input_tokens", ids.size()}});
}

std::optional<ApiError> Server::Impl::compile_constraint(const CompletionParams& c,
                                                        std::shared_ptr<TokenConstraint>* out) {
  ConstraintSpec spec;
  std::string field = c.constraint_field;
  if (c.constraint) {
    spec = *c.constraint;
  } else if (!c.forced_tool.empty()) {
    field = "tool_choice";
    std::string marker = "\"[TOOL_CALLS]\"";
    if (const int32_t id = tok->vocab().find("[TOOL_CALLS]"); id >= 0 && tok->vocab().is_control(id))
      marker = "<[" + std::to_string(id) + "]>";  // llguidance's Lark names a special token by id
    auto lark = forced_tool_grammar(tool_format, c.tools, c.forced_tool, c.parallel_tool_calls, marker);
    if (!lark) return ApiError{400, "'tool_choice': " + lark.status().message(), "invalid_request_error", field, ""};
    spec.kind = ConstraintKind::kLark;
    spec.text = std::move(lark).value();
  } else {
    return std::nullopt;
  }
  auto vocab = vocab_for_grammar();
  if (!vocab) return ApiError{500, vocab.status().message(), "server_error", field, ""};
  auto m = TokenConstraint::create(std::move(vocab).value(), spec);
  if (!m) return ApiError{400, "'" + field + "': " + m.status().message(), "invalid_request_error", field, ""};
  *out = std::move(m).value();
  return std::nullopt;
}

ApiError Server::Impl::submit_error(const Submission& sub) {
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
  return e;
}

namespace {
// One streamed choice's SSE events as choice `index` of an n > 1 stream: its chunks get
// that index, its [DONE] and usage chunk are left out (the stream ends with one of each).
std::string as_choice(const std::string& events, int index) {
  std::string out;
  size_t pos = 0;
  while (pos < events.size()) {
    size_t end = events.find("\n\n", pos);
    if (end == std::string::npos) end = events.size();
    const std::string ev = events.substr(pos, end - pos);
    pos = end + 2;
    if (ev.rfind("data: ", 0) != 0) {
      if (!ev.empty()) out += ev + "\n\n";
      continue;
    }
    if (ev == "data: [DONE]") continue;
    json j = json::parse(ev.substr(6), nullptr, false);
    if (j.is_discarded()) continue;
    if (j.contains("choices") && j["choices"].is_array()) {
      if (j["choices"].empty()) continue;  // the usage chunk
      for (auto& ch : j["choices"]) ch["index"] = index;
    }
    out += sse(j);
  }
  return out;
}
}  // namespace

void Server::Impl::run_choices(CompletionParams& c, EngineRequest er, int64_t n_prompt, http::Exchange& ex,
                               AnswerFormat& fmt) {
  const int n = c.n;
  const uint64_t seed = er.sampling.seed;
  struct Choice {
    std::shared_ptr<CompletionStream> stream;
    std::shared_ptr<RequestHandle> handle;
    std::unique_ptr<OpenAiFormat> fmt;
    std::string text;
    std::vector<TokenLogprob> lps;
    CompletionStream::Update last;
    bool done = false;
  };
  std::vector<Choice> ch(static_cast<size_t>(n));
  struct CancelAll {
    std::vector<Choice>& ch;
    ~CancelAll() {
      for (Choice& x : ch)
        if (x.handle && !x.done) x.handle->cancel();
    }
  } guard{ch};
  std::string id;
  const int64_t created = unix_now();
  // Every choice's grammar from the untouched one, before any of them runs (a clone made
  // after choice 0 started would start where choice 0 is).
  std::vector<std::shared_ptr<TokenConstraint>> grammars(static_cast<size_t>(n));
  for (int i = 0; i < n && er.constraint; ++i) {
    if (i == 0) {
      grammars[0] = er.constraint;
      continue;
    }
    auto cl = er.constraint->clone();
    if (!cl) return fmt.error(ex, ApiError{500, cl.status().message(), "server_error", "", ""});
    grammars[static_cast<size_t>(i)] = std::move(cl).value();
  }
  auto submit = [&](int i) -> std::optional<ApiError> {
    EngineRequest r = er;
    r.sampling.seed = seed + static_cast<uint64_t>(i);
    r.constraint = grammars[static_cast<size_t>(i)];
    Choice& x = ch[static_cast<size_t>(i)];
    x.stream = std::make_shared<CompletionStream>(*tok, c.stop, c.logprobs >= 0);
    Submission sub = engine->submit(std::move(r), x.stream);
    if (sub.error != SubmitError::kNone) return submit_error(sub);
    x.handle = sub.handle;
    if (id.empty()) id = fmt.id_prefix() + std::to_string(sub.handle->id());
    x.fmt = std::make_unique<OpenAiFormat>(c.endpoint);
    x.fmt->begin(Generation{id, opt.model_id, created, n_prompt, seed + static_cast<uint64_t>(i), &c},
                 c.tools.is_null() ? ToolFormat::kNone : tool_format);
    return std::nullopt;
  };
  if (auto e = submit(0)) return fmt.error(ex, *e);
  std::string pending;  // choice 0's stream events before the others start
  const bool streaming = c.stream;
  if (streaming &&
      !ex.begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}}, ":\n\n"))
    return;
  auto take = [&](int i, const CompletionStream::Update& u) -> std::string {
    Choice& x = ch[static_cast<size_t>(i)];
    std::string out;
    x.text += u.text;
    for (const auto& l : u.logprobs) x.lps.push_back(l);
    if (streaming) out += as_choice(x.fmt->stream_piece(u), i);
    if (u.finished) {
      x.done = true;
      x.last = u;
      if (streaming) out += as_choice(x.fmt->stream_end(u), i);
    }
    return out;
  };
  // Choice 0 until its first token (its prompt's state is then in the prompt cache).
  while (!ch[0].done && ch[0].text.empty()) {
    if (stop_requested.load()) ch[0].handle->cancel();
    CompletionStream::Update u = ch[0].stream->wait(std::chrono::milliseconds(50));
    pending += take(0, u);
    if (!u.text.empty() || !u.logprobs.empty()) break;
    if (ex.client_gone()) return;
  }
  for (int i = 1; i < n; ++i) {
    if (auto e = submit(i)) {
      if (!streaming) return fmt.error(ex, *e);
      ex.write(sse(error_body(*e)) + "data: [DONE]\n\n");
      ex.end_stream();
      return;
    }
  }
  if (streaming && !pending.empty() && !ex.write(pending)) return;
  for (;;) {
    bool all = true;
    std::string out;
    for (int i = 0; i < n; ++i) {
      Choice& x = ch[static_cast<size_t>(i)];
      if (x.done) continue;
      all = false;
      if (stop_requested.load()) x.handle->cancel();
      out += take(i, x.stream->wait(std::chrono::milliseconds(i == 0 ? 20 : 1)));
    }
    if (all) break;
    if (streaming) {
      if (out.empty() ? ex.client_gone() : !ex.write(out)) return;
    } else if (ex.client_gone()) {
      return;
    }
  }
  Usage total;
  total.prompt_tokens = n_prompt;
  total.cached_tokens = ch[0].last.summary.cached_tokens;
  for (const Choice& x : ch) {
    total.completion_tokens += x.last.summary.n_generated;
    total.spec_rounds += x.last.summary.spec_rounds;
    total.drafted += x.last.summary.drafted;
    total.accepted += x.last.summary.accepted;
  }
  if (streaming) {
    std::string out;
    if (c.include_usage) out += sse(usage_chunk(id, created, opt.model_id, c.endpoint, total));
    ex.write(out + "data: [DONE]\n\n");
    ex.end_stream();
    return;
  }
  for (const Choice& x : ch) {
    const Outcome oc = x.last.summary.outcome;
    if (oc == Outcome::kFailed || oc == Outcome::kCancelled) {
      ApiError e = cut_error(x.last, &c);
      if (e.status >= 500)
        e.message = "generation " + x.last.finish_reason + (x.last.summary.error.empty() ? "" : ": " + x.last.summary.error);
      return fmt.error(ex, e);
    }
  }
  json body = ch[0].fmt->whole(ch[0].text, ch[0].lps, ch[0].last);
  for (int i = 1; i < n; ++i) {
    Choice& x = ch[static_cast<size_t>(i)];
    json b = x.fmt->whole(x.text, x.lps, x.last);
    b["choices"][0]["index"] = i;
    body["choices"].push_back(b["choices"][0]);
  }
  body["usage"] = usage_json(total);
  ex.respond(200, "application/json", dump_json(body));
}

void Server::Impl::run_generation(CompletionParams c, http::Exchange& ex, AnswerFormat& fmt) {
  const Endpoint endpoint = c.endpoint;
  if (!c.model.empty() && c.model != opt.model_id)
    return fmt.error(ex, ApiError{fmt.unknown_model_status(),
                                  "model '" + c.model + "' is not served here; this server serves '" + opt.model_id + "'",
                                  "invalid_request_error", "model", "model_not_found"});
  std::vector<int32_t> ids;
  if (auto e = build_prompt(c, &ids)) return fmt.error(ex, *e);
  EngineRequest er;
  if (auto e = compile_constraint(c, &er.constraint)) return fmt.error(ex, *e);
  // echo: the answer starts with the prompt (as sent; token ids as their text), and with
  // logprobs the prompt's tokens lead the entries (the first has no logprob: null).
  std::string echo_text;
  std::vector<TokenLogprob> echo_lps;
  if (c.echo) {
    if (c.prompt_is_ids) {
      auto t = tok->decode(ids, /*remove_special=*/true, /*render_special=*/false);
      if (t) echo_text = std::move(t).value();
    } else {
      echo_text = c.prompt_text;
    }
    if (c.logprobs >= 0) {
      er.prompt_logprobs = c.logprobs;
      TokenLogprob first;
      first.token = tok->token_to_piece(ids[0], false);
      first.logprob = std::numeric_limits<float>::quiet_NaN();  // JSON null
      echo_lps.push_back(std::move(first));
    }
  }
  er.prompt = std::move(ids);
  const int64_t n_prompt = static_cast<int64_t>(er.prompt.size());
  if (c.max_tokens) {
    er.max_tokens = *c.max_tokens;
  } else {
    const int64_t room = opt.engine.n_ctx - n_prompt;
    if (room <= 0)
      return fmt.error(ex, ApiError{400, "the prompt has " + std::to_string(n_prompt) + " tokens; the context holds " +
                                             std::to_string(opt.engine.n_ctx),
                                    "invalid_request_error", endpoint == Endpoint::kChat ? "messages" : "prompt",
                                    "context_length_exceeded"});
    er.max_tokens = static_cast<int32_t>(room);
  }
  er.sampling = c.sampling;
  if (er.sampling.dry_multiplier > 0.0f) er.sampling.dry_breaker_ids = dry_breaker_ids(er.sampling.dry_sequence_breakers);
  if (!c.seed_given) er.sampling.seed = random_seed();
  er.top_logprobs = c.logprobs;
  er.ignore_eos = c.ignore_eos;
  er.speculative = c.speculative;
  if (opt.engine.generation_checkpoint > 0) {
    // What shapes the text besides the engine request: the route and the stop strings.
    er.resume_key = endpoint == Endpoint::kChat ? "chat" : "completion";
    for (const std::string& st : c.stop) er.resume_key += "\x1f" + st;
  }
  if (c.n > 1) return run_choices(c, std::move(er), n_prompt, ex, fmt);
  const uint64_t seed = er.sampling.seed;
  auto stream = std::make_shared<CompletionStream>(*tok, c.stop, c.logprobs >= 0);
  Submission sub = engine->submit(std::move(er), stream);
  if (sub.error != SubmitError::kNone) return fmt.error(ex, submit_error(sub));
  fmt.begin(Generation{fmt.id_prefix() + std::to_string(sub.handle->id()), opt.model_id, unix_now(), n_prompt, seed, &c},
            c.tools.is_null() ? ToolFormat::kNone : tool_format);
  RequestHandle& handle = *sub.handle;
  // However this ends before the finish (client gone, an exception), the request stops
  // generating.
  bool finished = false;
  struct CancelUnlessFinished {
    const bool& finished;
    RequestHandle& handle;
    ~CancelUnlessFinished() {
      if (!finished) handle.cancel();
    }
  } guard{finished, handle};

  if (!c.stream) {
    std::string text;
    std::vector<TokenLogprob> lps;
    CompletionStream::Update u;
    // A client that goes away while its answer is computed frees its row within a step:
    // its connection is probed each time the request makes progress (and every 100 ms).
    bool client_left = false;
    for (;;) {
      if (stop_requested.load()) handle.cancel();  // shutting down: don't hold it up
      u = stream->wait(std::chrono::milliseconds(100));
      for (auto& l : u.prompt_logprobs) echo_lps.push_back(std::move(l));
      text += u.text;
      for (auto& l : u.logprobs) lps.push_back(std::move(l));
      if (u.finished) break;
      if (!handle.cancelled() && ex.client_gone()) {
        handle.cancel();
        client_left = true;
      }
    }
    finished = true;
    if (client_left && u.summary.outcome == Outcome::kCancelled) return;  // nobody to answer
    if (u.summary.outcome == Outcome::kFailed || u.summary.outcome == Outcome::kCancelled) {
      ApiError e = cut_error(u, &c);
      if (e.status >= 500)
        e.message = "generation " + u.finish_reason + (u.summary.error.empty() ? "" : ": " + u.summary.error);
      return fmt.error(ex, e);
    }
    if (c.echo) {
      text = echo_text + text;
      if (c.logprobs >= 0) {
        for (auto& l : lps) echo_lps.push_back(std::move(l));
        lps = std::move(echo_lps);
      }
    }
    ex.respond(200, "application/json", dump_json(fmt.whole(text, lps, u)));
    return;
  }

  // The probe is an SSE comment: clients ignore it (see http::Exchange::client_gone).
  if (!ex.begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}}, ":\n\n"))
    return;
  std::string out = fmt.stream_start();
  bool echoed = !c.echo;
  while (!finished) {
    if (stop_requested.load()) handle.cancel();  // shutting down: end the stream now
    CompletionStream::Update u = stream->wait(std::chrono::milliseconds(250));
    for (auto& l : u.prompt_logprobs) echo_lps.push_back(std::move(l));
    if (!echoed && (u.finished || !u.text.empty() || !u.logprobs.empty())) {
      // The prompt goes first, once its logprobs are all in (they precede any token).
      CompletionStream::Update e;
      e.text = echo_text;
      if (c.logprobs >= 0) e.logprobs = std::move(echo_lps);
      out += fmt.stream_piece(e);
      echoed = true;
    }
    out += fmt.stream_piece(u);
    if (u.finished) {
      out += fmt.stream_end(u);
      finished = true;
    }
    // Nothing new: probe the connection so a vanished client is noticed.
    const bool gone = out.empty() ? ex.client_gone() : !ex.write(out);
    out.clear();
    if (gone) {
      handle.cancel();
      return;
    }
  }
  ex.end_stream();
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
  {
    const http::Stats hs = http->stats();
    gauge("specula_http_connections_open", "Open client connections.", static_cast<double>(hs.open_connections));
    counter("specula_http_connections_total",
            "Connections by fate: accepted, refused with 503 over --max-connections, dropped by a deadline, "
            "refused as malformed (400/413/431).");
    o << "specula_http_connections_total{event=\"accepted\"} " << hs.accepted_total << "\n";
    o << "specula_http_connections_total{event=\"refused_over_cap\"} " << hs.refused_over_cap_total << "\n";
    o << "specula_http_connections_total{event=\"timed_out\"} " << hs.timed_out_total << "\n";
    o << "specula_http_connections_total{event=\"malformed\"} " << hs.malformed_total << "\n";
  }
  counter("specula_prompt_tokens_total", "Prompt tokens admitted.");
  o << "specula_prompt_tokens_total " << s.prompt_tokens << "\n";
  counter("specula_generated_tokens_total", "Tokens sampled.");
  o << "specula_generated_tokens_total " << s.generated_tokens << "\n";
  counter("specula_steps_total", "Engine steps (one batched forward each).");
  o << "specula_steps_total " << s.steps << "\n";
  counter("specula_grammar_masks_total", "Structured-output token masks computed (one per constrained position).");
  o << "specula_grammar_masks_total " << s.grammar_masks << "\n";
  counter("specula_grammar_mask_seconds_total",
          "Seconds the grammar worker spent on masks (it runs while the target forward does).");
  o << "specula_grammar_mask_seconds_total " << s.grammar_mask_seconds << "\n";
  counter("specula_grammar_wait_seconds_total", "Seconds steps waited for grammar masks after their forward.");
  o << "specula_grammar_wait_seconds_total " << s.grammar_wait_seconds << "\n";
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
