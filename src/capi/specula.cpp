// capi/specula.cpp — the C API (include/specula/specula.h) over the server's engine objects:
// a specula_model is a ServedModel (server/served_model.h) set up by open_served_model
// (server/model_config.h) exactly as `specula serve` sets it up; a typed request is
// prepared by the server's own request code (the body parser, prepare_request,
// compile_constraint) and consumed by a CompletionStream; a call runs a route handler
// (server/routes.h: route_api) on a thread of its own against an in-memory Exchange that
// turns the answer into events. No second generation loop: the engine batches the
// library's requests with each other as it batches the server's.
// Every entry point catches what C++ may throw and reports it as SPECULA_ERR_INTERNAL.
#include "specula/specula.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/kernels.h"
#include "server/completion_stream.h"
#include "server/engine_request.h"
#include "server/errors.h"
#include "server/http.h"
#include "server/json_util.h"
#include "server/model_config.h"
#include "server/openai_api.h"
#include "server/routes.h"
#include "server/served_model.h"

#ifndef SPECULA_VERSION
#define SPECULA_VERSION "0.0.0"
#endif

namespace {

using json = nlohmann::ordered_json;
namespace srv = specula::server;
using specula::Status;
using specula::StatusCode;

thread_local std::string g_last_error;

specula_status fail(specula_status code, std::string message) {
  g_last_error = std::move(message);
  return code;
}
specula_status fail(const Status& st) { return fail(static_cast<specula_status>(st.code()), st.user_message()); }
specula_status fail(const srv::ApiError& e) {
  return fail(static_cast<specula_status>(e.code), e.param.empty() || e.message.find(e.param) != std::string::npos
                                                       ? e.message
                                                       : e.param + ": " + e.message);
}

// Runs f, turning anything thrown into SPECULA_ERR_INTERNAL.
template <class F>
specula_status guarded(F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return fail(SPECULA_ERR_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return fail(SPECULA_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(SPECULA_ERR_INTERNAL, "internal error");
  }
}

// Copies a caller's parameter struct over the defaults: a caller built against an older
// (shorter) struct gets the defaults for the fields it does not know.
template <class T>
specula_status read_params(const T* given, T* out, const char* what) {
  if (given == nullptr) return SPECULA_OK;
  if (given->struct_size < sizeof(size_t) || given->struct_size > sizeof(T))
    return fail(SPECULA_ERR_INVALID_ARGUMENT, std::string(what) + ".struct_size is " + std::to_string(given->struct_size) +
                                                  "; this library's is " + std::to_string(sizeof(T)) +
                                                  " (set it with the *_default_params function)");
  std::memcpy(static_cast<void*>(out), given, given->struct_size);
  out->struct_size = sizeof(T);
  return SPECULA_OK;
}

char* copy_string(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p == nullptr) throw std::bad_alloc();
  std::memcpy(p, s.data(), s.size());
  p[s.size()] = '\0';
  return p;
}

int32_t* copy_ids(const std::vector<int32_t>& ids) {
  int32_t* p = static_cast<int32_t*>(std::malloc(std::max<size_t>(1, ids.size()) * sizeof(int32_t)));
  if (p == nullptr) throw std::bad_alloc();
  if (!ids.empty()) std::memcpy(p, ids.data(), ids.size() * sizeof(int32_t));
  return p;
}

// Parses JSON text the caller gave for `field`, or says why not.
bool parse_json(const char* text, const char* field, json* out, specula_status* st) {
  try {
    *out = json::parse(text);
    return true;
  } catch (const json::exception& e) {
    *st = fail(SPECULA_ERR_INVALID_ARGUMENT, std::string(field) + " is not valid JSON: " + e.what());
    return false;
  }
}

}  // namespace

// The model and what the handles that use it share. Handles hold it by shared_ptr: the
// model goes when the caller's handle and every request and call on it are gone.
struct ModelBox {
  std::unique_ptr<srv::ServedModel> served;
  std::string path;
  std::atomic<bool> closed{false};
  std::mutex mu;
  std::vector<std::weak_ptr<specula::RequestHandle>> handles;  // typed requests, to cancel at close

  void track(const std::shared_ptr<specula::RequestHandle>& h) {
    std::lock_guard<std::mutex> lock(mu);
    std::erase_if(handles, [](const auto& w) { return w.expired(); });
    handles.push_back(h);
  }
  void close() {
    closed.store(true);
    served->stopping.store(true);  // running calls cancel their generations
    std::lock_guard<std::mutex> lock(mu);
    for (auto& w : handles)
      if (auto h = w.lock()) h->cancel();
    handles.clear();
  }
};

struct specula_model {
  std::shared_ptr<ModelBox> box;
};

struct specula_request {
  std::shared_ptr<ModelBox> box;
  std::shared_ptr<srv::CompletionStream> stream;
  std::shared_ptr<specula::RequestHandle> handle;
  uint64_t seed = 0;
  bool want_logprobs = false;
  bool final_read = false;
  srv::CompletionStream::Update last;  // what the latest update's pointers point into
};

namespace {

// An Exchange held in memory: what a route handler answers becomes events a caller reads
// with specula_call_next. A stream's bytes are cut into its SSE events.
class LocalExchange : public srv::http::Exchange {
 public:
  struct Event {
    int32_t kind = 0;  // 1 body, 2 stream event, 3 stream end
    int32_t status = 0;
    std::string data, event;
  };

  bool respond(int status, std::string_view, std::string body, const srv::http::Headers&) override {
    push(Event{1, status, std::move(body), ""});
    return !cancelled.load();
  }
  bool begin_stream(int status, std::string_view, const srv::http::Headers&, std::string) override {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = status;
    return !cancelled.load();
  }
  bool write(std::string_view data) override {
    sse_.append(data);
    for (size_t end; (end = sse_.find("\n\n")) != std::string::npos;) {
      const std::string frame = sse_.substr(0, end);
      sse_.erase(0, end + 2);
      Event ev{2, 0, "", ""};
      bool has_data = false;
      std::istringstream lines(frame);
      for (std::string line; std::getline(lines, line);) {
        if (line.rfind("data:", 0) == 0) {
          if (has_data) ev.data += "\n";
          ev.data += line.substr(line.size() > 5 && line[5] == ' ' ? 6 : 5);
          has_data = true;
        } else if (line.rfind("event:", 0) == 0) {
          ev.event = line.substr(line.size() > 6 && line[6] == ' ' ? 7 : 6);
        }
      }
      if (has_data) push(std::move(ev));  // a comment (":" probe) is no event
    }
    return !cancelled.load();
  }
  void end_stream() override { push(Event{3, 0, "", ""}); }
  bool client_gone() override { return cancelled.load(); }

  // The handler returned: nothing follows.
  void finish() {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }
  // The next event (true), or false when none came within the timeout (*ended: none ever
  // will).
  bool next(int32_t timeout_ms, Event* out, bool* ended, bool* last) {
    std::unique_lock<std::mutex> lock(mu_);
    auto ready = [&] { return !events_.empty() || done_; };
    if (timeout_ms < 0)
      cv_.wait(lock, ready);
    else
      cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready);
    *ended = events_.empty() && done_;
    if (events_.empty()) return false;
    *out = std::move(events_.front());
    events_.pop_front();
    *last = done_ && events_.empty();
    return true;
  }

  std::atomic<bool> cancelled{false};

 private:
  void push(Event ev) {
    std::lock_guard<std::mutex> lock(mu_);
    if (ev.status == 0) ev.status = status_;
    if (ev.kind == 1) status_ = ev.status;
    events_.push_back(std::move(ev));
    cv_.notify_all();
  }
  std::string sse_;  // handler thread only
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  int32_t status_ = 200;
  bool done_ = false;
};

}  // namespace

struct specula_call {
  std::shared_ptr<ModelBox> box;
  std::shared_ptr<LocalExchange> ex;
  std::thread worker;
  LocalExchange::Event current;  // what the latest event's pointers point into
};

namespace {

// specula_status is StatusCode by number (the header promises it).
static_assert(SPECULA_OK == static_cast<int>(StatusCode::kOk) &&
              SPECULA_ERR_INVALID_ARGUMENT == static_cast<int>(StatusCode::kInvalidArgument) &&
              SPECULA_ERR_NOT_FOUND == static_cast<int>(StatusCode::kNotFound) &&
              SPECULA_ERR_TOO_LARGE == static_cast<int>(StatusCode::kTooLarge) &&
              SPECULA_ERR_CONTEXT_OVERFLOW == static_cast<int>(StatusCode::kContextOverflow) &&
              SPECULA_ERR_BUSY == static_cast<int>(StatusCode::kBusy) &&
              SPECULA_ERR_UNAVAILABLE == static_cast<int>(StatusCode::kUnavailable) &&
              SPECULA_ERR_UNIMPLEMENTED == static_cast<int>(StatusCode::kUnimplemented) &&
              SPECULA_ERR_UNAUTHENTICATED == static_cast<int>(StatusCode::kUnauthenticated) &&
              SPECULA_ERR_PERMISSION_DENIED == static_cast<int>(StatusCode::kPermissionDenied) &&
              SPECULA_ERR_TIMEOUT == static_cast<int>(StatusCode::kTimeout) &&
              SPECULA_ERR_CANCELLED == static_cast<int>(StatusCode::kCancelled) &&
              SPECULA_ERR_INTERNAL == static_cast<int>(StatusCode::kInternal));

// An output struct the caller hands in must be exactly this library's (its size set by the
// caller to sizeof): SPECULA_OK, or the error that says so.
template <class T>
specula_status check_out_struct(const T* out, const char* what) {
  if (out->struct_size == sizeof(T)) return SPECULA_OK;
  return fail(SPECULA_ERR_INVALID_ARGUMENT, std::string(what) + ".struct_size is " + std::to_string(out->struct_size) +
                                                "; set it to sizeof = " + std::to_string(sizeof(T)));
}

// The model's GGUF metadata as llama-cpp-python's Llama.metadata: scalar values as text;
// arrays left out.
json metadata_of(const specula::gguf::GgufFile& file) {
  using specula::gguf::ValueType;
  json m = json::object();
  for (const std::string& key : file.metadata_keys()) {
    const specula::gguf::Value* v = file.find(key);
    if (v == nullptr || v->is_array()) continue;
    switch (v->type) {
      case ValueType::STRING: m[key] = v->str; break;
      case ValueType::F32:
      case ValueType::F64: {
        std::ostringstream ss;
        ss << v->f;
        m[key] = ss.str();
        break;
      }
      case ValueType::BOOL: m[key] = v->u != 0 ? "true" : "false"; break;
      case ValueType::I8:
      case ValueType::I16:
      case ValueType::I32:
      case ValueType::I64: m[key] = std::to_string(v->i); break;
      default: m[key] = std::to_string(v->u); break;
    }
  }
  return m;
}

// A typed request as the body of /v1/completions or /v1/chat/completions: options_json,
// then the typed fields over it.
specula_status request_body(const specula_request_params& p, json* body, srv::Endpoint* endpoint) {
  specula_status st = SPECULA_OK;
  const int given = (p.prompt_tokens != nullptr || p.n_prompt_tokens > 0) + (p.prompt != nullptr) + (p.messages_json != nullptr);
  if (given != 1)
    return fail(SPECULA_ERR_INVALID_ARGUMENT,
                given == 0 ? "the request has no prompt: set prompt_tokens, prompt or messages_json"
                           : "set one of prompt_tokens, prompt and messages_json, not several");
  if (p.options_json != nullptr) {
    if (!parse_json(p.options_json, "options_json", body, &st)) return st;
    if (!body->is_object()) return fail(SPECULA_ERR_INVALID_ARGUMENT, "options_json must be a JSON object");
  } else {
    *body = json::object();
  }
  json& b = *body;
  if (p.messages_json != nullptr) {
    *endpoint = srv::Endpoint::kChat;
    json messages;
    if (!parse_json(p.messages_json, "messages_json", &messages, &st)) return st;
    b["messages"] = std::move(messages);
    if (p.tools_json != nullptr) {
      json tools;
      if (!parse_json(p.tools_json, "tools_json", &tools, &st)) return st;
      b["tools"] = std::move(tools);
    }
  } else {
    *endpoint = srv::Endpoint::kCompletions;
    if (p.tools_json != nullptr) return fail(SPECULA_ERR_INVALID_ARGUMENT, "tools_json needs messages_json");
    if (p.prompt != nullptr) {
      b["prompt"] = p.prompt;
    } else {
      if (p.prompt_tokens == nullptr) return fail(SPECULA_ERR_INVALID_ARGUMENT, "prompt_tokens is NULL but n_prompt_tokens is not 0");
      b["prompt"] = std::vector<int32_t>(p.prompt_tokens, p.prompt_tokens + p.n_prompt_tokens);
    }
    b["parse_special"] = p.parse_special != 0;
  }
  if (p.max_tokens >= 0) b["max_tokens"] = p.max_tokens;
  else if (p.max_tokens != -1) return fail(SPECULA_ERR_INVALID_ARGUMENT, "max_tokens must be >= 0, or -1 (until the context is full)");
  if (!std::isnan(p.temperature)) b["temperature"] = p.temperature;
  if (!std::isnan(p.top_p)) b["top_p"] = p.top_p;
  if (p.top_k >= 0) b["top_k"] = p.top_k;
  if (!std::isnan(p.min_p)) b["min_p"] = p.min_p;
  if (!std::isnan(p.repeat_penalty)) b["repeat_penalty"] = p.repeat_penalty;
  if (!std::isnan(p.presence_penalty)) b["presence_penalty"] = p.presence_penalty;
  if (!std::isnan(p.frequency_penalty)) b["frequency_penalty"] = p.frequency_penalty;
  if (p.has_seed) b["seed"] = p.seed;
  if (p.logprobs >= 0) {
    if (*endpoint == srv::Endpoint::kChat) {
      b["logprobs"] = true;
      b["top_logprobs"] = p.logprobs;
    } else {
      b["logprobs"] = p.logprobs;
    }
  }
  if (p.ignore_eos) b["ignore_eos"] = true;
  if (!p.speculative) b["speculative"] = false;
  const int constraints = (p.grammar != nullptr) + (p.json_schema != nullptr) + (p.regex != nullptr);
  if (constraints > 1) return fail(SPECULA_ERR_INVALID_ARGUMENT, "set one of grammar, json_schema and regex, not several");
  if (p.grammar != nullptr) b["grammar"] = p.grammar;
  if (p.regex != nullptr) b["regex"] = p.regex;
  if (p.json_schema != nullptr) {
    json schema;
    if (!parse_json(p.json_schema, "json_schema", &schema, &st)) return st;
    b["json_schema"] = std::move(schema);
  }
  b.erase("stream");
  b.erase("stop");  // the typed field's (any number, not only the API's 4)
  return SPECULA_OK;
}

void fill_update(specula_request* r, specula_request_update* u) {
  const srv::CompletionStream::Update& x = r->last;
  const size_t size = u->struct_size;
  std::memset(static_cast<void*>(u), 0, sizeof(*u));
  u->struct_size = size;
  u->tokens = x.token_ids.data();
  u->n_tokens = x.token_ids.size();
  u->logprobs = r->want_logprobs ? x.token_logprobs.data() : nullptr;
  u->text = x.text.c_str();
  u->text_len = x.text.size();
  u->finished = x.finished ? 1 : 0;
  u->seed = r->seed;
  if (!x.finished) return;
  const specula::RequestSummary& s = x.summary;
  u->finish_reason = x.finish_reason.c_str();
  u->stop_sequence = x.stop_sequence.empty() ? nullptr : x.stop_sequence.c_str();
  u->error = s.error.empty() ? nullptr : s.error.c_str();
  u->n_prompt_tokens = s.n_prompt;
  u->n_cached_tokens = s.cached_tokens;
  u->n_generated_tokens = s.n_generated;
  u->queue_seconds = s.queue_seconds;
  u->prefill_seconds = s.prefill_seconds;
  u->decode_seconds = s.decode_seconds;
  u->drafted_tokens = s.drafted;
  u->accepted_tokens = s.accepted;
}

// specula_generate's final update, copied: the request is freed before it returns.
struct FinalUpdate {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string text, finish_reason, stop_sequence, error;
};
thread_local FinalUpdate g_generate_final;

}  // namespace

extern "C" {

const char* specula_last_error(void) { return g_last_error.c_str(); }

const char* specula_status_name(specula_status status) {
  const int i = static_cast<int>(status);
  return i >= 0 && i <= static_cast<int>(StatusCode::kInternal) ? specula::status_code_name(static_cast<StatusCode>(i))
                                                                  : "unknown";
}

const char* specula_version(void) { return SPECULA_VERSION; }

const char* specula_system_info(void) {
  static const std::string info =
      std::string("isa=") + specula::kernels::active().isa + " (" + specula::kernels::cpu_features() + ")";
  return info.c_str();
}

void specula_free(void* p) { std::free(p); }

void specula_model_default_params(specula_model_params* p) {
  if (p == nullptr) return;
  std::memset(static_cast<void*>(p), 0, sizeof(*p));
  const srv::ModelConfig d;
  p->struct_size = sizeof(*p);
  p->n_parallel = d.parallel;
  p->step_tokens = d.step_tokens;
  p->max_queue = d.queue;
  p->spec_depth = d.spec_depth;
  p->spec_max_batch = d.spec_max_batch;
  p->cache_ram_mib = d.cache_ram_mib;
  p->cache_checkpoint = d.cache_checkpoint;
}

specula_status specula_model_load(const char* path, const specula_model_params* given, specula_model** out) {
  return guarded([&]() -> specula_status {
    if (out == nullptr) return fail(SPECULA_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = nullptr;
    if (path == nullptr || *path == '\0') return fail(SPECULA_ERR_INVALID_ARGUMENT, "no model path given");
    specula_model_params p;
    specula_model_default_params(&p);
    if (specula_status st = read_params(given, &p, "specula_model_params"); st != SPECULA_OK) return st;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return fail(SPECULA_ERR_NOT_FOUND, std::string("model file not found: ") + path);
    srv::ModelConfig mc;
    if (p.model_id != nullptr) mc.model_id = p.model_id;
    if (p.chat_template != nullptr && p.chat_template_file != nullptr)
      return fail(SPECULA_ERR_INVALID_ARGUMENT, "set chat_template or chat_template_file, not both");
    if (p.chat_template != nullptr) mc.chat_template = std::string(p.chat_template);
    if (p.chat_template_file != nullptr) {
      std::ifstream in(p.chat_template_file, std::ios::binary);
      if (!in) return fail(SPECULA_ERR_NOT_FOUND, std::string("cannot read chat_template_file ") + p.chat_template_file);
      std::ostringstream ss;
      ss << in.rdbuf();
      mc.chat_template = ss.str();
    }
    if (p.n_threads < 0 || p.n_threads > 1024)
      return fail(SPECULA_ERR_INVALID_ARGUMENT, "n_threads = " + std::to_string(p.n_threads) + " is outside [0, 1024]");
    mc.parallel = p.n_parallel;
    mc.ctx = p.n_ctx;
    if (p.cache_type_k != nullptr) mc.cache.type_k = p.cache_type_k;
    if (p.cache_type_v != nullptr) mc.cache.type_v = p.cache_type_v;
    if (p.kv_delay < 0) return fail(SPECULA_ERR_INVALID_ARGUMENT, "kv_delay must be >= 0");
    mc.cache.delay = p.kv_delay;
    mc.kv_budget = p.kv_budget;
    mc.step_tokens = p.step_tokens;
    mc.queue = p.max_queue;
    if (p.spec != nullptr) mc.spec = p.spec;
    if (p.draft_model != nullptr) {
      if (!std::filesystem::exists(p.draft_model, ec))
        return fail(SPECULA_ERR_NOT_FOUND, std::string("draft model not found: ") + p.draft_model);
      mc.draft_model = p.draft_model;
    }
    mc.spec_depth = p.spec_depth;
    mc.spec_max_batch = p.spec_max_batch;
    mc.spec_rejection = p.spec_rejection != 0;
    mc.cache_ram_mib = p.cache_ram_mib;
    mc.cache_disk_mib = p.cache_disk_mib;
    if (p.cache_dir != nullptr) mc.cache_dir = p.cache_dir;
    mc.cache_checkpoint = p.cache_checkpoint;
    mc.generation_checkpoint = p.generation_checkpoint;
    if (p.pooling != nullptr) mc.pooling = p.pooling;
    specula::ModelOptions mo;
    mo.n_threads = p.n_threads;
    if (p.quantize != nullptr) {
      mo.quantize = p.quantize;
      if (mo.quantize != "q8_0" && mo.quantize != "q4_k")
        return fail(SPECULA_ERR_INVALID_ARGUMENT, "quantize '" + mo.quantize + "': use q8_0 or q4_k");
    }
    auto model = specula::load_model(path, mo);
    // A file that does not load is the caller's input (a malformed or foreign file, a value
    // out of range in its metadata), whatever the layer below classified it as.
    if (!model && model.status().code() == StatusCode::kInternal)
      return fail(SPECULA_ERR_INVALID_ARGUMENT, model.status().user_message());
    if (!model) return fail(model.status());
    srv::ServerOptions base;
    base.log_requests = false;
    auto served = srv::open_served_model(std::move(model).value(), path, mc, std::move(base));
    if (!served) return fail(served.status());
    auto box = std::make_shared<ModelBox>();
    box->served = std::move(served).value();
    box->path = path;
    *out = new specula_model{std::move(box)};
    return SPECULA_OK;
  });
}

void specula_model_free(specula_model* model) {
  if (model == nullptr) return;
  try {
    model->box->close();
  } catch (...) {
  }
  delete model;
}

int64_t specula_model_n_ctx(const specula_model* m) { return m->box->served->options().engine.n_ctx; }
int64_t specula_model_n_ctx_train(const specula_model* m) { return m->box->served->model().info().n_ctx_train; }
int32_t specula_model_n_vocab(const specula_model* m) { return static_cast<int32_t>(m->box->served->model().info().n_vocab); }
int32_t specula_model_n_embd(const specula_model* m) { return static_cast<int32_t>(m->box->served->model().info().n_embd); }
int32_t specula_model_n_parallel(const specula_model* m) { return m->box->served->options().engine.n_rows; }
int32_t specula_model_token_bos(const specula_model* m) {
  const auto& v = m->box->served->tokenizer().vocab();
  return v.valid_id(v.bos_id()) ? v.bos_id() : -1;
}
int32_t specula_model_token_eos(const specula_model* m) {
  const auto& v = m->box->served->tokenizer().vocab();
  return v.valid_id(v.eos_id()) ? v.eos_id() : -1;
}
int32_t specula_model_token_is_eog(const specula_model* m, int32_t token) {
  for (int32_t id : m->box->served->options().engine.eog_ids)
    if (id == token) return 1;
  return 0;
}
const char* specula_model_id(const specula_model* m) { return m->box->served->id().c_str(); }

specula_status specula_model_info_json(const specula_model* m, char** out) {
  return guarded([&]() -> specula_status {
    if (m == nullptr || out == nullptr) return fail(SPECULA_ERR_INVALID_ARGUMENT, "model or out is NULL");
    const srv::ServedModel& s = *m->box->served;
    const specula::ModelInfo& info = s.model().info();
    json j = {{"id", s.id()},
              {"path", m->box->path},
              {"architecture", info.architecture},
              {"name", info.name},
              {"n_vocab", info.n_vocab},
              {"n_ctx", s.options().engine.n_ctx},
              {"n_ctx_train", info.n_ctx_train},
              {"n_embd", info.n_embd},
              {"n_layer", info.n_layers},
              {"n_parallel", s.options().engine.n_rows},
              {"chat_template", s.chat_template() ? json(s.chat_template_origin()) : json(nullptr)},
              {"kv_layouts", s.engine().describe_state()},
              {"system_info", specula_system_info()},
              {"metadata", metadata_of(s.model().file())}};
    *out = copy_string(srv::dump_json(j));
    return SPECULA_OK;
  });
}

specula_status specula_model_stats_json(const specula_model* m, char** out) {
  return guarded([&]() -> specula_status {
    if (m == nullptr || out == nullptr) return fail(SPECULA_ERR_INVALID_ARGUMENT, "model or out is NULL");
    const specula::EngineStats st = m->box->served->engine().stats();
    json j = {{"running_rows", st.running_rows},
              {"queue_depth", st.queue_depth},
              {"n_rows", st.n_rows},
              {"steps", st.steps},
              {"prompt_tokens", st.prompt_tokens},
              {"generated_tokens", st.generated_tokens},
              {"finished",
               {{"stop", st.finished[0]}, {"length", st.finished[1]}, {"cancelled", st.finished[2]}, {"failed", st.finished[3]}}},
              {"kv_bytes", st.kv_bytes},
              {"kv_budget", st.kv_budget},
              {"drafted", st.drafted},
              {"accepted", st.accepted}};
    *out = copy_string(srv::dump_json(j));
    return SPECULA_OK;
  });
}

specula_status specula_lora_load(specula_model* m, const char* path, const char* name, float scale, int64_t* out_id) {
  return guarded([&]() -> specula_status {
    if (m == nullptr || path == nullptr) return fail(SPECULA_ERR_INVALID_ARGUMENT, "model or path is NULL");
    if (!std::isfinite(scale) || std::fabs(scale) > 1e4f)
      return fail(SPECULA_ERR_INVALID_ARGUMENT, "the LoRA scale must be a finite number with |scale| <= 10000");
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return fail(SPECULA_ERR_NOT_FOUND, std::string("[lora] ") + path + ": no such file");
    srv::ServedModel& s = *m->box->served;
    std::string n = name != nullptr ? name : "";
    const bool named = !n.empty();
    if (n.empty()) n = srv::lora_name_of_path(path);
    auto adapter = s.model().load_lora(path);
    if (!adapter) return fail(SPECULA_ERR_INVALID_ARGUMENT, adapter.status().user_message());
    auto id = s.lora().add(n, path, std::move(adapter).value(), scale, named);
    if (!id) return fail(id.status());
    if (out_id != nullptr) *out_id = *id;
    return SPECULA_OK;
  });
}

specula_status specula_lora_unload(specula_model* m, const char* name) {
  return guarded([&]() -> specula_status {
    if (m == nullptr || name == nullptr) return fail(SPECULA_ERR_INVALID_ARGUMENT, "model or name is NULL");
    const Status st = m->box->served->lora().remove(name);
    return st.is_ok() ? SPECULA_OK : fail(st);
  });
}

specula_status specula_lora_list_json(const specula_model* m, char** out) {
  return guarded([&]() -> specula_status {
    if (m == nullptr || out == nullptr) return fail(SPECULA_ERR_INVALID_ARGUMENT, "model or out is NULL");
    json j = json::array();
    for (const srv::LoraEntry& e : m->box->served->lora().list())
      j.push_back(json{{"id", e.id}, {"name", e.name}, {"path", e.path}, {"scale", e.scale}});
    *out = copy_string(srv::dump_json(j));
    return SPECULA_OK;
  });
}

specula_status specula_tokenize(const specula_model* m, const char* text, size_t len, int32_t add_special,
                                int32_t parse_special, int32_t** out, size_t* n) {
  return guarded([&]() -> specula_status {
    if (m == nullptr || (text == nullptr && len > 0) || out == nullptr || n == nullptr)
      return fail(SPECULA_ERR_INVALID_ARGUMENT, "model, text, out_tokens or n_tokens is NULL");
    const auto ids =
        m->box->served->tokenizer().encode(std::string_view(text == nullptr ? "" : text, len), add_special != 0, parse_special != 0);
    *out = copy_ids(ids);
    *n = ids.size();
    return SPECULA_OK;
  });
}

specula_status specula_detokenize(const specula_model* m, const int32_t* tokens, size_t n, int32_t remove_special,
                                  int32_t render_special, char** out, size_t* out_len) {
  return guarded([&]() -> specula_status {
    if (m == nullptr || (tokens == nullptr && n > 0) || out == nullptr)
      return fail(SPECULA_ERR_INVALID_ARGUMENT, "model, tokens or out_text is NULL");
    const auto& tok = m->box->served->tokenizer();
    std::vector<int32_t> ids(tokens, tokens + n);
    for (int32_t id : ids)
      if (!tok.vocab().valid_id(id))
        return fail(SPECULA_ERR_INVALID_ARGUMENT, "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                                      std::to_string(tok.vocab().size()) + ")");
    auto text = tok.decode(ids, remove_special != 0, render_special != 0);
    if (!text) return fail(text.status());
    *out = copy_string(*text);
    if (out_len != nullptr) *out_len = text->size();
    return SPECULA_OK;
  });
}

specula_status specula_token_to_piece(const specula_model* m, int32_t token, int32_t render_special, char** out,
                                      size_t* out_len) {
  return guarded([&]() -> specula_status {
    if (m == nullptr || out == nullptr) return fail(SPECULA_ERR_INVALID_ARGUMENT, "model or out_piece is NULL");
    const auto& tok = m->box->served->tokenizer();
    if (!tok.vocab().valid_id(token))
      return fail(SPECULA_ERR_INVALID_ARGUMENT, "token id " + std::to_string(token) + " is outside the vocabulary [0, " +
                                                    std::to_string(tok.vocab().size()) + ")");
    const std::string piece = tok.token_to_piece(token, render_special != 0);
    *out = copy_string(piece);
    if (out_len != nullptr) *out_len = piece.size();
    return SPECULA_OK;
  });
}

specula_status specula_apply_chat_template(const specula_model* m, const char* messages_json, const char* tools_json,
                                           char** out_text, int32_t** out_tokens, size_t* n_tokens) {
  return guarded([&]() -> specula_status {
    if (m == nullptr || messages_json == nullptr || (out_text == nullptr && out_tokens == nullptr) ||
        (out_tokens != nullptr && n_tokens == nullptr))
      return fail(SPECULA_ERR_INVALID_ARGUMENT, "model, messages_json or the outputs are NULL");
    specula_status st = SPECULA_OK;
    json body = json::object();
    if (!parse_json(messages_json, "messages_json", &body["messages"], &st)) return st;
    if (tools_json != nullptr && !parse_json(tools_json, "tools_json", &body["tools"], &st)) return st;
    const srv::ServedModel& s = *m->box->served;
    auto parsed = srv::parse_completion_request(srv::dump_json(body), srv::Endpoint::kChat, s.sampling_defaults());
    if (auto* e = std::get_if<srv::ApiError>(&parsed)) return fail(*e);
    const auto& c = std::get<srv::CompletionParams>(parsed);
    auto text = srv::render_chat_prompt(s, c);
    if (auto* e = std::get_if<srv::ApiError>(&text)) return fail(*e);
    std::vector<int32_t> ids;
    if (out_tokens != nullptr)
      if (auto e = srv::build_prompt(s, c, &ids)) return fail(*e);
    if (out_text != nullptr) *out_text = copy_string(std::get<std::string>(text));
    if (out_tokens != nullptr) {
      *out_tokens = copy_ids(ids);
      *n_tokens = ids.size();
    }
    return SPECULA_OK;
  });
}

void specula_request_default_params(specula_request_params* p) {
  if (p == nullptr) return;
  std::memset(static_cast<void*>(p), 0, sizeof(*p));
  p->struct_size = sizeof(*p);
  p->max_tokens = -1;
  p->temperature = p->top_p = p->min_p = NAN;
  p->repeat_penalty = p->presence_penalty = p->frequency_penalty = NAN;
  p->top_k = -1;
  p->logprobs = -1;
  p->speculative = 1;
  p->parse_special = 1;
}

specula_status specula_request_start(specula_model* m, const specula_request_params* given, specula_request** out) {
  return guarded([&]() -> specula_status {
    if (m == nullptr || given == nullptr || out == nullptr)
      return fail(SPECULA_ERR_INVALID_ARGUMENT, "model, params or out is NULL");
    *out = nullptr;
    if (m->box->closed.load()) return fail(SPECULA_ERR_UNAVAILABLE, "the model was freed");
    specula_request_params p;
    specula_request_default_params(&p);
    if (specula_status st = read_params(given, &p, "specula_request_params"); st != SPECULA_OK) return st;
    json body;
    srv::Endpoint endpoint = srv::Endpoint::kCompletions;
    if (specula_status st = request_body(p, &body, &endpoint); st != SPECULA_OK) return st;
    srv::ServedModel& s = *m->box->served;
    auto parsed = srv::parse_completion_request(srv::dump_json(body), endpoint, s.sampling_defaults());
    if (auto* e = std::get_if<srv::ApiError>(&parsed)) return fail(*e);
    srv::CompletionParams& c = std::get<srv::CompletionParams>(parsed);
    if (c.n != 1) return fail(SPECULA_ERR_INVALID_ARGUMENT, "n: a typed request makes one choice (start n requests)");
    if (c.prompts.size() > 1) return fail(SPECULA_ERR_INVALID_ARGUMENT, "prompt: one prompt per typed request");
    if (c.echo) return fail(SPECULA_ERR_INVALID_ARGUMENT, "echo is not supported on a typed request");
    if (p.n_stop > 0 && p.stop == nullptr) return fail(SPECULA_ERR_INVALID_ARGUMENT, "stop is NULL but n_stop is not 0");
    if (p.n_stop > 64) return fail(SPECULA_ERR_INVALID_ARGUMENT, "stop: at most 64 strings");
    for (size_t i = 0; i < p.n_stop; ++i) {
      if (p.stop[i] == nullptr) return fail(SPECULA_ERR_INVALID_ARGUMENT, "stop[" + std::to_string(i) + "] is NULL");
      if (*p.stop[i] != '\0') c.stop.emplace_back(p.stop[i]);
    }
    if (auto e = srv::check_request(s, c, StatusCode::kNotFound)) return fail(*e);
    std::shared_ptr<specula::TokenConstraint> grammar;
    if (auto e = srv::compile_constraint(s, c, &grammar)) return fail(*e);
    const uint64_t seed = c.seed_given ? c.sampling.seed : s.random_seed();
    auto prepared = srv::prepare_request(s, c, 0, seed);
    if (auto* e = std::get_if<srv::ApiError>(&prepared)) return fail(*e);
    specula::EngineRequest er = std::move(std::get<srv::PreparedRequest>(prepared).request);
    er.constraint = std::move(grammar);
    auto r = std::make_unique<specula_request>();
    r->box = m->box;
    r->seed = seed;
    r->want_logprobs = c.logprobs >= 0;
    r->stream = std::make_shared<srv::CompletionStream>(s.tokenizer(), c.stop, r->want_logprobs, /*want_ids=*/true);
    specula::Submission sub = s.engine().submit(std::move(er), r->stream);
    if (!sub.ok()) return fail(static_cast<specula_status>(sub.status.code()), sub.status.user_message());
    r->handle = sub.handle;
    m->box->track(r->handle);
    *out = r.release();
    return SPECULA_OK;
  });
}

specula_status specula_request_next(specula_request* r, int32_t timeout_ms, specula_request_update* u) {
  return guarded([&]() -> specula_status {
    if (r == nullptr || u == nullptr) return fail(SPECULA_ERR_INVALID_ARGUMENT, "request or update is NULL");
    if (specula_status st = check_out_struct(u, "update"); st != SPECULA_OK) return st;
    if (r->final_read) return fail(SPECULA_ERR_UNAVAILABLE, "the request has finished; its final update was read");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
    for (;;) {
      if (r->box->closed.load()) r->handle->cancel();
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      const auto wait = timeout_ms < 0 ? std::chrono::milliseconds(200) : std::min(left, std::chrono::milliseconds(200));
      r->last = r->stream->wait(std::max(wait, std::chrono::milliseconds(0)));
      const auto& x = r->last;
      if (x.finished || !x.text.empty() || !x.token_ids.empty()) break;
      if (timeout_ms >= 0 && std::chrono::steady_clock::now() >= deadline) {
        fill_update(r, u);
        return fail(SPECULA_ERR_TIMEOUT, "nothing new yet");
      }
    }
    r->final_read = r->last.finished;
    fill_update(r, u);
    return SPECULA_OK;
  });
}

void specula_request_cancel(specula_request* r) {
  if (r != nullptr && r->handle) r->handle->cancel();
}

void specula_request_free(specula_request* r) {
  if (r == nullptr) return;
  if (r->handle) r->handle->cancel();
  delete r;
}

specula_status specula_generate(specula_model* m, const specula_request_params* params, specula_update_callback callback,
                                void* user_data, specula_request_update* final_update) {
  if (final_update != nullptr)
    if (specula_status st = check_out_struct(final_update, "final_update"); st != SPECULA_OK) return st;
  specula_request* r = nullptr;
  if (specula_status st = specula_request_start(m, params, &r); st != SPECULA_OK) return st;
  std::unique_ptr<specula_request, void (*)(specula_request*)> owned(r, specula_request_free);
  specula_request_update u;
  u.struct_size = sizeof(u);
  for (;;) {
    const specula_status st = specula_request_next(r, -1, &u);
    if (st != SPECULA_OK) return st;
    if (callback != nullptr && callback(&u, user_data) == 0 && !u.finished) specula_request_cancel(r);
    if (u.finished) break;
  }
  if (final_update != nullptr) {
    return guarded([&]() -> specula_status {
      FinalUpdate& f = g_generate_final;
      f.tokens.assign(u.tokens, u.tokens + u.n_tokens);
      f.logprobs.assign(u.logprobs != nullptr ? u.logprobs : nullptr, u.logprobs != nullptr ? u.logprobs + u.n_tokens : nullptr);
      f.text.assign(u.text, u.text_len);
      f.finish_reason = u.finish_reason;
      f.stop_sequence = u.stop_sequence != nullptr ? u.stop_sequence : "";
      f.error = u.error != nullptr ? u.error : "";
      *final_update = u;
      final_update->tokens = f.tokens.data();
      final_update->logprobs = u.logprobs != nullptr ? f.logprobs.data() : nullptr;
      final_update->text = f.text.c_str();
      final_update->finish_reason = f.finish_reason.c_str();
      final_update->stop_sequence = u.stop_sequence != nullptr ? f.stop_sequence.c_str() : nullptr;
      final_update->error = u.error != nullptr ? f.error.c_str() : nullptr;
      return SPECULA_OK;
    });
  }
  return SPECULA_OK;
}

specula_status specula_call_start(specula_model* m, const char* method, const char* path, const char* body,
                                  size_t body_len, specula_call** out) {
  return guarded([&]() -> specula_status {
    if (m == nullptr || method == nullptr || path == nullptr || out == nullptr)
      return fail(SPECULA_ERR_INVALID_ARGUMENT, "model, method, path or out is NULL");
    *out = nullptr;
    if (m->box->closed.load()) return fail(SPECULA_ERR_UNAVAILABLE, "the model was freed");
    auto call = std::make_unique<specula_call>();
    call->box = m->box;
    call->ex = std::make_shared<LocalExchange>();
    srv::http::Request req;
    req.method = method;
    req.target = req.path = path;
    if (const size_t q = req.path.find('?'); q != std::string::npos) req.path.resize(q);
    if (body != nullptr) req.body.assign(body, body_len);
    req.headers.push_back({"Content-Type", "application/json"});
    req.remote_addr = "127.0.0.1";  // in-process: the loopback's rights (cache flush)
    call->worker = std::thread([box = m->box, ex = call->ex, req = std::move(req)] {
      try {
        if (!srv::route_api(*box->served, req, *ex, nullptr))
          ex->respond(404, "application/json",
                      srv::dump_json(srv::openai_error_body(srv::api_error(StatusCode::kNotFound,
                                                                             "no route for " + req.method + " " + req.path))),
                      {});
      } catch (const std::exception& e) {
        ex->respond(500, "application/json",
                    srv::dump_json(srv::openai_error_body(srv::api_error(StatusCode::kInternal, e.what()))), {});
      } catch (...) {
      }
      ex->finish();
    });
    *out = call.release();
    return SPECULA_OK;
  });
}

specula_status specula_call_next(specula_call* call, int32_t timeout_ms, specula_call_event* ev) {
  return guarded([&]() -> specula_status {
    if (call == nullptr || ev == nullptr) return fail(SPECULA_ERR_INVALID_ARGUMENT, "call or event is NULL");
    if (specula_status st = check_out_struct(ev, "event"); st != SPECULA_OK) return st;
    bool ended = false, last = false;
    if (!call->ex->next(timeout_ms, &call->current, &ended, &last)) {
      if (ended) return fail(SPECULA_ERR_UNAVAILABLE, "the call has finished; every event was read");
      return fail(SPECULA_ERR_TIMEOUT, "nothing new yet");
    }
    const LocalExchange::Event& e = call->current;
    ev->http_status = e.status;
    ev->kind = e.kind;
    ev->data = e.data.c_str();
    ev->data_len = e.data.size();
    ev->event = e.event.c_str();
    ev->finished = last || e.kind == 1 || e.kind == 3 ? 1 : 0;
    return SPECULA_OK;
  });
}

void specula_call_cancel(specula_call* call) {
  if (call != nullptr) call->ex->cancelled.store(true);
}

void specula_call_free(specula_call* call) {
  if (call == nullptr) return;
  call->ex->cancelled.store(true);
  if (call->worker.joinable()) call->worker.join();
  delete call;
}

}  // extern "C"
