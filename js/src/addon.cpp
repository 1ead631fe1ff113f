// js/src/addon.cpp — the Node-API addon of the `specula` npm package (loads in Node and Bun):
// the C API (include/specula/specula.h) as JS objects. Blocking calls (loading a model, waiting
// for a request's or a call's next update) run on the libuv thread pool (AsyncWorker) and
// resolve promises; waits are bounded (kWaitMs) so a pool thread never sits long on one
// request (the pool has 4 threads unless UV_THREADPOOL_SIZE says more: with many more
// generations at once than that, their updates take turns on it).
// A handle's state is shared with its workers: close() while a wait is in flight only cancels,
// and the worker frees the handle when it comes back — no use after free. The JS API (index.js)
// validates arguments and wraps these in TypeScript idiom; nothing here is public API.
#define NAPI_VERSION 8
#include <napi.h>

#include <cmath>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "specula/specula.h"

namespace {

constexpr int32_t kWaitMs = 50;

Napi::Error specula_error(Napi::Env env, specula_status st) {
  Napi::Error e = Napi::Error::New(env, specula_last_error());
  e.Set("code", Napi::String::New(env, specula_status_name(st)));
  return e;
}

// ---- model ----------------------------------------------------------------------------

struct ModelState {
  std::mutex mu;
  specula_model* model = nullptr;  // null once closed
};

// The classes' constructors, per environment (the main thread and each worker thread that
// loads the addon have their own).
struct AddonData {
  Napi::FunctionReference model, request, call;
};
AddonData& data(Napi::Env env) { return *env.GetInstanceData<AddonData>(); }

class ModelWrap : public Napi::ObjectWrap<ModelWrap> {
 public:
  static void Init(Napi::Env env, Napi::Object exports);
  explicit ModelWrap(const Napi::CallbackInfo& info);
  ~ModelWrap() override { close_now(); }

  specula_model* handle(Napi::Env env) {
    if (state_->model == nullptr) {
      Napi::Error e = Napi::Error::New(env, "the model is closed");
      e.Set("code", Napi::String::New(env, "unavailable"));
      throw e;
    }
    return state_->model;
  }

 private:
  void close_now() {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->model != nullptr) specula_model_free(state_->model);
    state_->model = nullptr;
  }
  Napi::Value Close(const Napi::CallbackInfo& info) {
    close_now();
    return info.Env().Undefined();
  }
  Napi::Value Tokenize(const Napi::CallbackInfo& info);
  Napi::Value Detokenize(const Napi::CallbackInfo& info);
  Napi::Value ApplyChatTemplate(const Napi::CallbackInfo& info);
  Napi::Value JsonText(const Napi::CallbackInfo& info, specula_status (*get)(const specula_model*, char**));
  Napi::Value InfoJson(const Napi::CallbackInfo& info);
  Napi::Value StatsJson(const Napi::CallbackInfo& info);
  Napi::Value LoraLoad(const Napi::CallbackInfo& info);
  Napi::Value LoraUnload(const Napi::CallbackInfo& info);
  Napi::Value LoraListJson(const Napi::CallbackInfo& info);
  Napi::Value StartRequest(const Napi::CallbackInfo& info);
  Napi::Value StartCall(const Napi::CallbackInfo& info);
  Napi::Value Numbers(const Napi::CallbackInfo& info);

  std::shared_ptr<ModelState> state_ = std::make_shared<ModelState>();
};

ModelWrap::ModelWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ModelWrap>(info) {
  if (info.Length() == 1 && info[0].IsExternal()) state_->model = info[0].As<Napi::External<specula_model>>().Data();
}

std::string get_string(const Napi::Object& o, const char* key, bool* has) {
  Napi::Value v = o.Get(key);
  *has = v.IsString();
  return *has ? v.As<Napi::String>().Utf8Value() : std::string();
}

// The fields of specula_model_params from a plain object whose keys are the C names (index.js
// converts and checks them).
class LoadWorker : public Napi::AsyncWorker {
 public:
  LoadWorker(Napi::Env env, std::string path, Napi::Object params)
      : Napi::AsyncWorker(env), path_(std::move(path)), deferred_(Napi::Promise::Deferred::New(env)) {
    specula_model_default_params(&p_);
    auto num = [&](const char* k, auto* field) {
      Napi::Value v = params.Get(k);
      if (v.IsNumber()) *field = static_cast<std::remove_reference_t<decltype(*field)>>(v.As<Napi::Number>().Int64Value());
    };
    auto str = [&](const char* k, const char** field) {
      bool has = false;
      std::string s = get_string(params, k, &has);
      if (!has) return;
      strings_.push_back(std::make_unique<std::string>(std::move(s)));
      *field = strings_.back()->c_str();
    };
    num("n_threads", &p_.n_threads);
    num("n_parallel", &p_.n_parallel);
    num("n_ctx", &p_.n_ctx);
    str("cache_type_k", &p_.cache_type_k);
    str("cache_type_v", &p_.cache_type_v);
    num("kv_delay", &p_.kv_delay);
    num("kv_budget", &p_.kv_budget);
    num("step_tokens", &p_.step_tokens);
    num("max_queue", &p_.max_queue);
    str("spec", &p_.spec);
    str("draft_model", &p_.draft_model);
    num("spec_depth", &p_.spec_depth);
    num("spec_max_batch", &p_.spec_max_batch);
    num("spec_rejection", &p_.spec_rejection);
    num("cache_ram_mib", &p_.cache_ram_mib);
    str("cache_dir", &p_.cache_dir);
    num("cache_disk_mib", &p_.cache_disk_mib);
    num("cache_checkpoint", &p_.cache_checkpoint);
    num("generation_checkpoint", &p_.generation_checkpoint);
    str("model_id", &p_.model_id);
    str("chat_template", &p_.chat_template);
    str("chat_template_file", &p_.chat_template_file);
    str("quantize", &p_.quantize);
    str("pooling", &p_.pooling);
  }
  Napi::Promise promise() { return deferred_.Promise(); }
  void Execute() override {
    status_ = specula_model_load(path_.c_str(), &p_, &model_);
    if (status_ != SPECULA_OK) error_ = specula_last_error();
  }
  void OnOK() override {
    Napi::Env env = Env();
    if (status_ != SPECULA_OK) {
      Napi::Error e = Napi::Error::New(env, error_);
      e.Set("code", Napi::String::New(env, specula_status_name(status_)));
      deferred_.Reject(e.Value());
      return;
    }
    deferred_.Resolve(data(env).model.New({Napi::External<specula_model>::New(env, model_)}));
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  std::string path_;
  specula_model_params p_;
  std::vector<std::unique_ptr<std::string>> strings_;
  specula_model* model_ = nullptr;
  specula_status status_ = SPECULA_OK;
  std::string error_;
  Napi::Promise::Deferred deferred_;
};

Napi::Value LoadModel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsString() || !info[1].IsObject())
    throw Napi::TypeError::New(env, "loadModel(path: string, params: object)");
  auto* w = new LoadWorker(env, info[0].As<Napi::String>().Utf8Value(), info[1].As<Napi::Object>());
  Napi::Promise p = w->promise();
  w->Queue();
  return p;
}

Napi::Value ModelWrap::Tokenize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsString()) throw Napi::TypeError::New(env, "tokenize(text: string, addSpecial, parseSpecial)");
  const std::string text = info[0].As<Napi::String>().Utf8Value();
  int32_t* ids = nullptr;
  size_t n = 0;
  std::lock_guard<std::mutex> lock(state_->mu);
  specula_status st = specula_tokenize(handle(env), text.data(), text.size(), info[1].ToBoolean(), info[2].ToBoolean(), &ids, &n);
  if (st != SPECULA_OK) throw specula_error(env, st);
  Napi::Int32Array out = Napi::Int32Array::New(env, n);
  for (size_t i = 0; i < n; ++i) out[i] = ids[i];
  specula_free(ids);
  return out;
}

Napi::Value ModelWrap::Detokenize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsTypedArray()) throw Napi::TypeError::New(env, "detokenize(ids: Int32Array, renderSpecial)");
  Napi::Int32Array ids = info[0].As<Napi::Int32Array>();
  char* text = nullptr;
  size_t len = 0;
  std::lock_guard<std::mutex> lock(state_->mu);
  specula_status st = specula_detokenize(handle(env), ids.Data(), ids.ElementLength(), 0, info[1].ToBoolean(), &text, &len);
  if (st != SPECULA_OK) throw specula_error(env, st);
  Napi::String out = Napi::String::New(env, text, len);
  specula_free(text);
  return out;
}

Napi::Value ModelWrap::ApplyChatTemplate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) throw Napi::TypeError::New(env, "applyChatTemplate(messagesJson, toolsJson?)");
  const std::string messages = info[0].As<Napi::String>().Utf8Value();
  const bool has_tools = info.Length() > 1 && info[1].IsString();
  const std::string tools = has_tools ? info[1].As<Napi::String>().Utf8Value() : "";
  char* text = nullptr;
  std::lock_guard<std::mutex> lock(state_->mu);
  specula_status st = specula_apply_chat_template(handle(env), messages.c_str(), has_tools ? tools.c_str() : nullptr, &text,
                                                  nullptr, nullptr);
  if (st != SPECULA_OK) throw specula_error(env, st);
  Napi::String out = Napi::String::New(env, text);
  specula_free(text);
  return out;
}

// A model's JSON text from `get` (specula_model_info_json, ...) as a JS string.
Napi::Value ModelWrap::JsonText(const Napi::CallbackInfo& info, specula_status (*get)(const specula_model*, char**)) {
  Napi::Env env = info.Env();
  char* text = nullptr;
  std::lock_guard<std::mutex> lock(state_->mu);
  specula_status st = get(handle(env), &text);
  if (st != SPECULA_OK) throw specula_error(env, st);
  Napi::String out = Napi::String::New(env, text);
  specula_free(text);
  return out;
}

Napi::Value ModelWrap::InfoJson(const Napi::CallbackInfo& info) { return JsonText(info, specula_model_info_json); }

Napi::Value ModelWrap::StatsJson(const Napi::CallbackInfo& info) { return JsonText(info, specula_model_stats_json); }

// loraLoad(path, name | null, scale) -> id
Napi::Value ModelWrap::LoraLoad(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsString() || !(info[1].IsString() || info[1].IsNull() || info[1].IsUndefined()) ||
      !info[2].IsNumber())
    throw Napi::TypeError::New(env, "loraLoad(path: string, name: string | null, scale: number)");
  const std::string path = info[0].As<Napi::String>().Utf8Value();
  const std::string name = info[1].IsString() ? info[1].As<Napi::String>().Utf8Value() : std::string();
  int64_t id = -1;
  std::lock_guard<std::mutex> lock(state_->mu);
  specula_status st = specula_lora_load(handle(env), path.c_str(), name.empty() ? nullptr : name.c_str(),
                                        info[2].As<Napi::Number>().FloatValue(), &id);
  if (st != SPECULA_OK) throw specula_error(env, st);
  return Napi::Number::New(env, static_cast<double>(id));
}

Napi::Value ModelWrap::LoraUnload(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) throw Napi::TypeError::New(env, "loraUnload(name: string)");
  const std::string name = info[0].As<Napi::String>().Utf8Value();
  std::lock_guard<std::mutex> lock(state_->mu);
  specula_status st = specula_lora_unload(handle(env), name.c_str());
  if (st != SPECULA_OK) throw specula_error(env, st);
  return env.Undefined();
}

Napi::Value ModelWrap::LoraListJson(const Napi::CallbackInfo& info) { return JsonText(info, specula_lora_list_json); }

Napi::Value ModelWrap::Numbers(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::lock_guard<std::mutex> lock(state_->mu);
  specula_model* m = handle(env);
  Napi::Object o = Napi::Object::New(env);
  o.Set("nCtx", Napi::Number::New(env, static_cast<double>(specula_model_n_ctx(m))));
  o.Set("nVocab", Napi::Number::New(env, specula_model_n_vocab(m)));
  o.Set("nEmbd", Napi::Number::New(env, specula_model_n_embd(m)));
  o.Set("tokenBos", Napi::Number::New(env, specula_model_token_bos(m)));
  o.Set("tokenEos", Napi::Number::New(env, specula_model_token_eos(m)));
  o.Set("id", Napi::String::New(env, specula_model_id(m)));
  return o;
}

// ---- requests -------------------------------------------------------------------------

struct RequestState {
  std::mutex mu;
  specula_request* req = nullptr;
  bool busy = false;    // a NextWorker is in flight
  bool closed = false;  // close() was called: the worker frees it when it returns
};

struct Update {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  bool has_logprobs = false;
  std::string text;
  bool finished = false;
  std::string finish_reason, stop_sequence, error;
  bool has_stop = false, has_error = false;
  int64_t n_prompt = 0, n_cached = 0, n_generated = 0, drafted = 0, accepted = 0;
  double queue_s = 0, prefill_s = 0, decode_s = 0;
  uint64_t seed = 0;
};

class RequestWrap : public Napi::ObjectWrap<RequestWrap> {
 public:
  static void Init(Napi::Env env, Napi::Object exports);
  explicit RequestWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<RequestWrap>(info) {
    if (info.Length() == 1 && info[0].IsExternal()) state_->req = info[0].As<Napi::External<specula_request>>().Data();
  }
  ~RequestWrap() override { close_now(); }
  std::shared_ptr<RequestState> state_ = std::make_shared<RequestState>();

 private:
  void close_now() {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->closed = true;
    if (state_->req == nullptr) return;
    if (state_->busy) {
      specula_request_cancel(state_->req);  // the worker frees it
      return;
    }
    specula_request_free(state_->req);
    state_->req = nullptr;
  }
  Napi::Value Next(const Napi::CallbackInfo& info);
  Napi::Value Cancel(const Napi::CallbackInfo& info) {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->req != nullptr) specula_request_cancel(state_->req);
    return info.Env().Undefined();
  }
  Napi::Value Close(const Napi::CallbackInfo& info) {
    close_now();
    return info.Env().Undefined();
  }
};

class NextWorker : public Napi::AsyncWorker {
 public:
  NextWorker(Napi::Env env, std::shared_ptr<RequestState> st)
      : Napi::AsyncWorker(env), st_(std::move(st)), deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise promise() { return deferred_.Promise(); }
  void Execute() override {
    specula_request_update u;
    u.struct_size = sizeof u;
    status_ = specula_request_next(st_->req, kWaitMs, &u);
    if (status_ == SPECULA_ERR_TIMEOUT) return;
    if (status_ != SPECULA_OK) {
      error_ = specula_last_error();
      return;
    }
    out_.tokens.assign(u.tokens, u.tokens + u.n_tokens);
    out_.has_logprobs = u.logprobs != nullptr;
    if (u.logprobs != nullptr) out_.logprobs.assign(u.logprobs, u.logprobs + u.n_tokens);
    out_.text.assign(u.text, u.text_len);
    out_.finished = u.finished != 0;
    if (!out_.finished) return;
    out_.finish_reason = u.finish_reason;
    out_.has_stop = u.stop_sequence != nullptr;
    if (out_.has_stop) out_.stop_sequence = u.stop_sequence;
    out_.has_error = u.error != nullptr;
    if (out_.has_error) out_.error = u.error;
    out_.n_prompt = u.n_prompt_tokens;
    out_.n_cached = u.n_cached_tokens;
    out_.n_generated = u.n_generated_tokens;
    out_.drafted = u.drafted_tokens;
    out_.accepted = u.accepted_tokens;
    out_.queue_s = u.queue_seconds;
    out_.prefill_s = u.prefill_seconds;
    out_.decode_s = u.decode_seconds;
    out_.seed = u.seed;
  }
  void OnOK() override {
    Napi::Env env = Env();
    release();
    if (status_ == SPECULA_ERR_TIMEOUT) return deferred_.Resolve(env.Null());  // nothing yet: ask again
    if (status_ != SPECULA_OK) {
      Napi::Error e = Napi::Error::New(env, error_);
      e.Set("code", Napi::String::New(env, specula_status_name(status_)));
      return deferred_.Reject(e.Value());
    }
    Napi::Object o = Napi::Object::New(env);
    Napi::Int32Array ids = Napi::Int32Array::New(env, out_.tokens.size());
    for (size_t i = 0; i < out_.tokens.size(); ++i) ids[i] = out_.tokens[i];
    o.Set("tokens", ids);
    if (out_.has_logprobs) {
      Napi::Float32Array lp = Napi::Float32Array::New(env, out_.logprobs.size());
      for (size_t i = 0; i < out_.logprobs.size(); ++i) lp[i] = out_.logprobs[i];
      o.Set("logprobs", lp);
    }
    o.Set("text", Napi::String::New(env, out_.text));
    o.Set("finished", Napi::Boolean::New(env, out_.finished));
    if (out_.finished) {
      o.Set("finishReason", Napi::String::New(env, out_.finish_reason));
      o.Set("stopSequence", out_.has_stop ? Napi::Value(Napi::String::New(env, out_.stop_sequence)) : env.Null());
      o.Set("error", out_.has_error ? Napi::Value(Napi::String::New(env, out_.error)) : env.Null());
      o.Set("promptTokens", Napi::Number::New(env, static_cast<double>(out_.n_prompt)));
      o.Set("cachedTokens", Napi::Number::New(env, static_cast<double>(out_.n_cached)));
      o.Set("completionTokens", Napi::Number::New(env, static_cast<double>(out_.n_generated)));
      o.Set("draftedTokens", Napi::Number::New(env, static_cast<double>(out_.drafted)));
      o.Set("acceptedTokens", Napi::Number::New(env, static_cast<double>(out_.accepted)));
      o.Set("queueSeconds", Napi::Number::New(env, out_.queue_s));
      o.Set("prefillSeconds", Napi::Number::New(env, out_.prefill_s));
      o.Set("decodeSeconds", Napi::Number::New(env, out_.decode_s));
      o.Set("seed", Napi::BigInt::New(env, out_.seed));
    }
    deferred_.Resolve(o);
  }
  void OnError(const Napi::Error& e) override {
    release();
    deferred_.Reject(e.Value());
  }

 private:
  void release() {
    std::lock_guard<std::mutex> lock(st_->mu);
    st_->busy = false;
    if (st_->closed && st_->req != nullptr) {
      specula_request_free(st_->req);
      st_->req = nullptr;
    }
  }
  std::shared_ptr<RequestState> st_;
  Napi::Promise::Deferred deferred_;
  specula_status status_ = SPECULA_OK;
  std::string error_;
  Update out_;
};

Napi::Value RequestWrap::Next(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->req == nullptr || state_->closed) throw Napi::Error::New(env, "the request is closed");
    if (state_->busy) throw Napi::Error::New(env, "next() is already waiting: one consumer at a time");
    state_->busy = true;
  }
  auto* w = new NextWorker(env, state_);
  Napi::Promise p = w->promise();
  w->Queue();
  return p;
}

// params: {prompt?: string, promptTokens?: Int32Array, messagesJson?, toolsJson?, max_tokens,
// temperature, top_p, top_k, min_p, repeat_penalty, presence_penalty, frequency_penalty,
// seed?: bigint, stop?: string[], logprobs, ignore_eos, speculative, parse_special, grammar?,
// json_schema?, regex?, options_json?} — index.js fills it from the user's camelCase options.
Napi::Value ModelWrap::StartRequest(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsObject()) throw Napi::TypeError::New(env, "startRequest(params: object)");
  Napi::Object o = info[0].As<Napi::Object>();
  specula_request_params p;
  specula_request_default_params(&p);
  std::deque<std::string> strings;  // stable addresses: p's pointers point into it
  auto str = [&](const char* k, const char** field) {
    bool has = false;
    std::string s = get_string(o, k, &has);
    if (!has) return;
    strings.push_back(std::move(s));
    *field = strings.back().c_str();
  };
  auto f32 = [&](const char* k, float* field) {
    Napi::Value v = o.Get(k);
    if (v.IsNumber()) *field = v.As<Napi::Number>().FloatValue();
  };
  auto i32 = [&](const char* k, int32_t* field) {
    Napi::Value v = o.Get(k);
    if (v.IsNumber()) *field = v.As<Napi::Number>().Int32Value();
    if (v.IsBoolean()) *field = v.As<Napi::Boolean>().Value() ? 1 : 0;
  };
  str("prompt", &p.prompt);
  std::vector<int32_t> ids;
  if (Napi::Value v = o.Get("promptTokens"); v.IsTypedArray()) {
    Napi::Int32Array a = v.As<Napi::Int32Array>();
    ids.assign(a.Data(), a.Data() + a.ElementLength());
    p.prompt_tokens = ids.data();
    p.n_prompt_tokens = ids.size();
  }
  str("messagesJson", &p.messages_json);
  str("toolsJson", &p.tools_json);
  i32("max_tokens", &p.max_tokens);
  f32("temperature", &p.temperature);
  f32("top_p", &p.top_p);
  i32("top_k", &p.top_k);
  f32("min_p", &p.min_p);
  f32("repeat_penalty", &p.repeat_penalty);
  f32("presence_penalty", &p.presence_penalty);
  f32("frequency_penalty", &p.frequency_penalty);
  if (Napi::Value v = o.Get("seed"); v.IsBigInt()) {
    bool lossless = true;
    p.seed = v.As<Napi::BigInt>().Uint64Value(&lossless);
    p.has_seed = 1;
  }
  std::vector<const char*> stops;
  if (Napi::Value v = o.Get("stop"); v.IsArray()) {
    Napi::Array a = v.As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length(); ++i) {
      Napi::Value s = a.Get(i);
      if (!s.IsString()) throw Napi::TypeError::New(env, "stop: strings only");
      strings.push_back(s.As<Napi::String>().Utf8Value());
    }
    for (size_t i = strings.size() - a.Length(); i < strings.size(); ++i) stops.push_back(strings[i].c_str());
    p.stop = stops.data();
    p.n_stop = stops.size();
  }
  i32("logprobs", &p.logprobs);
  i32("ignore_eos", &p.ignore_eos);
  i32("speculative", &p.speculative);
  i32("parse_special", &p.parse_special);
  str("grammar", &p.grammar);
  str("json_schema", &p.json_schema);
  str("regex", &p.regex);
  str("options_json", &p.options_json);
  specula_request* r = nullptr;
  specula_status st;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    st = specula_request_start(handle(env), &p, &r);
  }
  if (st != SPECULA_OK) throw specula_error(env, st);
  return data(env).request.New({Napi::External<specula_request>::New(env, r)});
}

// ---- calls ----------------------------------------------------------------------------

struct CallState {
  std::mutex mu;
  specula_call* call = nullptr;
  bool busy = false, closed = false;
};

class CallWrap : public Napi::ObjectWrap<CallWrap> {
 public:
  static void Init(Napi::Env env, Napi::Object exports);
  explicit CallWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<CallWrap>(info) {
    if (info.Length() == 1 && info[0].IsExternal()) state_->call = info[0].As<Napi::External<specula_call>>().Data();
  }
  ~CallWrap() override { close_now(); }
  std::shared_ptr<CallState> state_ = std::make_shared<CallState>();

 private:
  void close_now() {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->closed = true;
    if (state_->call == nullptr) return;
    specula_call_cancel(state_->call);
    if (state_->busy) return;  // the worker frees it
    specula_call_free(state_->call);
    state_->call = nullptr;
  }
  Napi::Value Next(const Napi::CallbackInfo& info);
  Napi::Value Cancel(const Napi::CallbackInfo& info) {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->call != nullptr) specula_call_cancel(state_->call);
    return info.Env().Undefined();
  }
  Napi::Value Close(const Napi::CallbackInfo& info) {
    close_now();
    return info.Env().Undefined();
  }
};

class CallNextWorker : public Napi::AsyncWorker {
 public:
  CallNextWorker(Napi::Env env, std::shared_ptr<CallState> st)
      : Napi::AsyncWorker(env), st_(std::move(st)), deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise promise() { return deferred_.Promise(); }
  void Execute() override {
    specula_call_event ev;
    ev.struct_size = sizeof ev;
    status_ = specula_call_next(st_->call, kWaitMs, &ev);
    if (status_ != SPECULA_OK) return;
    http_status_ = ev.http_status;
    kind_ = ev.kind;
    data_.assign(ev.data, ev.data_len);
    event_ = ev.event;
    finished_ = ev.finished != 0;
  }
  void OnOK() override {
    Napi::Env env = Env();
    {
      std::lock_guard<std::mutex> lock(st_->mu);
      st_->busy = false;
      if (st_->closed && st_->call != nullptr) {
        specula_call_free(st_->call);
        st_->call = nullptr;
      }
    }
    if (status_ == SPECULA_ERR_TIMEOUT) return deferred_.Resolve(env.Null());
    if (status_ == SPECULA_ERR_UNAVAILABLE) return deferred_.Resolve(env.Undefined());  // the end
    if (status_ != SPECULA_OK) return deferred_.Reject(Napi::Error::New(env, specula_status_name(status_)).Value());
    Napi::Object o = Napi::Object::New(env);
    o.Set("status", Napi::Number::New(env, http_status_));
    o.Set("kind", Napi::Number::New(env, kind_));
    o.Set("data", Napi::String::New(env, data_));
    o.Set("event", Napi::String::New(env, event_));
    o.Set("finished", Napi::Boolean::New(env, finished_));
    deferred_.Resolve(o);
  }

 private:
  std::shared_ptr<CallState> st_;
  Napi::Promise::Deferred deferred_;
  specula_status status_ = SPECULA_OK;
  int32_t http_status_ = 0, kind_ = 0;
  std::string data_, event_;
  bool finished_ = false;
};

Napi::Value CallWrap::Next(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->call == nullptr || state_->closed) throw Napi::Error::New(env, "the call is closed");
    if (state_->busy) throw Napi::Error::New(env, "next() is already waiting: one consumer at a time");
    state_->busy = true;
  }
  auto* w = new CallNextWorker(env, state_);
  Napi::Promise p = w->promise();
  w->Queue();
  return p;
}

Napi::Value ModelWrap::StartCall(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsString() || !info[1].IsString())
    throw Napi::TypeError::New(env, "startCall(method: string, path: string, body: string | null)");
  const std::string method = info[0].As<Napi::String>().Utf8Value(), path = info[1].As<Napi::String>().Utf8Value();
  const bool has_body = info[2].IsString();
  const std::string body = has_body ? info[2].As<Napi::String>().Utf8Value() : "";
  specula_call* c = nullptr;
  specula_status st;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    st = specula_call_start(handle(env), method.c_str(), path.c_str(), has_body ? body.data() : nullptr, body.size(), &c);
  }
  if (st != SPECULA_OK) throw specula_error(env, st);
  return data(env).call.New({Napi::External<specula_call>::New(env, c)});
}

void ModelWrap::Init(Napi::Env env, Napi::Object exports) {
  Napi::Function f = DefineClass(env, "NativeModel",
                                 {InstanceMethod("tokenize", &ModelWrap::Tokenize),
                                  InstanceMethod("detokenize", &ModelWrap::Detokenize),
                                  InstanceMethod("applyChatTemplate", &ModelWrap::ApplyChatTemplate),
                                  InstanceMethod("infoJson", &ModelWrap::InfoJson),
                                  InstanceMethod("statsJson", &ModelWrap::StatsJson),
                                  InstanceMethod("loraLoad", &ModelWrap::LoraLoad),
                                  InstanceMethod("loraUnload", &ModelWrap::LoraUnload),
                                  InstanceMethod("loraListJson", &ModelWrap::LoraListJson),
                                  InstanceMethod("numbers", &ModelWrap::Numbers),
                                  InstanceMethod("startRequest", &ModelWrap::StartRequest),
                                  InstanceMethod("startCall", &ModelWrap::StartCall),
                                  InstanceMethod("close", &ModelWrap::Close)});
  data(env).model = Napi::Persistent(f);
  exports.Set("NativeModel", f);
}

void RequestWrap::Init(Napi::Env env, Napi::Object exports) {
  Napi::Function f = DefineClass(env, "NativeRequest",
                                 {InstanceMethod("next", &RequestWrap::Next), InstanceMethod("cancel", &RequestWrap::Cancel),
                                  InstanceMethod("close", &RequestWrap::Close)});
  data(env).request = Napi::Persistent(f);
  exports.Set("NativeRequest", f);
}

void CallWrap::Init(Napi::Env env, Napi::Object exports) {
  Napi::Function f = DefineClass(env, "NativeCall",
                                 {InstanceMethod("next", &CallWrap::Next), InstanceMethod("cancel", &CallWrap::Cancel),
                                  InstanceMethod("close", &CallWrap::Close)});
  data(env).call = Napi::Persistent(f);
  exports.Set("NativeCall", f);
}

Napi::Object InitAll(Napi::Env env, Napi::Object exports) {
  env.SetInstanceData(new AddonData());  // deleted with the environment
  ModelWrap::Init(env, exports);
  RequestWrap::Init(env, exports);
  CallWrap::Init(env, exports);
  exports.Set("loadModel", Napi::Function::New(env, LoadModel));
  exports.Set("version", Napi::String::New(env, specula_version()));
  exports.Set("systemInfo", Napi::String::New(env, specula_system_info()));
  return exports;
}

}  // namespace

NODE_API_MODULE(specula, InitAll)
