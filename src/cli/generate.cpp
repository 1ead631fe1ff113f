// cli/generate.cpp — `specula generate`: one prompt through the engine (one row), its text
// streamed to stdout as it is made, the speeds on stderr; with --spec / --draft-model it
// speculates, with --prompt-cache FILE (llama.cpp's flag) it starts from and saves the
// prompt's computed state.
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>

#include "chat/prompt.h"
#include "cli/common.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/setup.h"
#include "kernels/kernels.h"
#include "tokenizer/detokenizer.h"

namespace specula::cli {
namespace {

constexpr const char* kDefaultPrompt = "The three most important ideas in computer science are";

struct GenerateArgs {
  std::string quantize;
  std::string model, prompt = kDefaultPrompt;
  int n_predict = 128, threads = 0;
  int64_t ctx = 4096;
  bool parse_special = false;
  SamplingFlags sampling;
  std::string draft_model, spec;
  int spec_depth = 4;
  std::string spec_accept = "exact";
  CacheArgs cache;
  std::string prompt_cache;  // llama.cpp's --prompt-cache FILE
  LoraArgs lora;
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
    const std::string tail = detok_.finish(/*drop_incomplete_tail=*/true);
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

// The prompt cache of --prompt-cache FILE: the file's state imported when it fits.
Result<std::shared_ptr<PromptCache>> file_prompt_cache(const GenerateArgs& a, const Loaded& l, const CacheOptions& cache) {
  PromptCacheOptions po;
  po.ram_bytes = int64_t{1} << 40;  // one request: keep what it computes
  po.fingerprint = prompt_cache_fingerprint(l.path, *l.model, cache);
  auto pc = PromptCache::create(po);
  if (!pc) return pc.status();
  std::error_code ec;
  if (std::filesystem::exists(a.prompt_cache, ec)) {
    if (Status st = (*pc)->import_file(a.prompt_cache); !st.is_ok())
      std::fprintf(stderr, "[specula] not using %s: %s\n", a.prompt_cache.c_str(), st.message().c_str());
  }
  return std::shared_ptr<PromptCache>(std::move(pc).value());
}

void report(const GenerateArgs& a, const Loaded& l, const Engine& engine, const RequestSummary& res) {
  const Model& model = *l.model;
  std::fprintf(stderr, "[specula] model %s (%s), %d thread(s), ISA %s\n", model.info().name.c_str(),
               model.info().architecture.c_str(), a.threads > 0 ? a.threads : default_thread_count(),
               kernels::active().isa);
  std::fprintf(stderr, "[specula] load: %.3f s\n", l.load_seconds);
  std::fprintf(stderr, "[specula] KV cache: %s\n", engine.describe_state().c_str());
  std::fprintf(stderr, "[specula] prompt: %lld tokens, prefill %.3f s (%.2f tokens/s)\n",
               static_cast<long long>(res.n_prompt), res.prefill_seconds,
               res.n_prompt / std::max(1e-9, res.prefill_seconds));
  const int64_t n_dec = std::max<int64_t>(0, res.n_generated - 1);
  std::fprintf(stderr, "[specula] generated: %lld tokens, decode %.3f s (%.2f tokens/s)\n",
               static_cast<long long>(res.n_generated), res.decode_seconds, n_dec / std::max(1e-9, res.decode_seconds));
  if (res.spec_rounds > 0)
    std::fprintf(stderr,
                 "[specula] speculative (%s, depth %d): %lld drafted, %lld accepted (%.1f%%), "
                 "%.2f tokens per verify round\n",
                 engine.options().draft->name().c_str(), a.spec_depth, static_cast<long long>(res.drafted),
                 static_cast<long long>(res.accepted),
                 100.0 * static_cast<double>(res.accepted) / std::max<int64_t>(1, res.drafted),
                 static_cast<double>(res.accepted + res.spec_rounds) / static_cast<double>(res.spec_rounds));
}

int run_generate(const RuntimeConfig& config, const GenerateArgs& a) {
  if (auto check = a.sampling.resolve({}, nullptr); !check) return fail(check.message());  // before loading
  if (!std::isfinite(a.lora.scale)) return fail("[cli] --lora-scale must be a finite number");
  if (!a.lora.paths.empty() && !a.prompt_cache.empty())
    return fail("[cli] --prompt-cache holds the base model's states: it cannot be used with --lora");
  auto l = load(config, a.model, a.threads, a.quantize);
  if (!l) return fail(l.message());
  Model& model = *l->model;
  const auto ids = l->tok->encode_prompt(a.prompt, a.parse_special);
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
  std::string draft_path;
  if (!a.draft_model.empty()) {
    auto p = resolve_model(config, a.draft_model);
    if (!p) return fail(p.message());
    draft_path = *p;
  }
  auto draft = make_draft_source(a.spec, draft_path, model, n_ctx);
  if (!draft) return fail(draft.message());
  eo.draft = std::move(draft).value();
  if (!a.prompt_cache.empty()) {
    auto pc = file_prompt_cache(a, *l, eo.cache);
    if (!pc) return fail(pc.message());
    eo.prompt_cache = std::move(pc).value();
  }
  auto engine = Engine::create(model, eo);
  if (!engine) return fail(engine.message());
  EngineRequest req;
  req.prompt = ids;
  req.max_tokens = static_cast<int32_t>(std::min<int64_t>(a.n_predict, n_ctx - static_cast<int64_t>(ids.size())));
  auto sampling = a.sampling.resolve(model_sampling_defaults(model.file()), l->tok.get());
  if (!sampling) return fail(sampling.message());
  req.sampling = std::move(sampling).value();
  auto lora = a.lora.load(model);
  if (!lora) return fail(lora.message());
  req.lora = std::move(lora).value();
  auto sink = std::make_shared<PrintSink>(*l->tok);
  std::fputs(a.prompt.c_str(), stdout);
  std::fflush(stdout);
  Submission sub = (*engine)->submit(std::move(req), sink);
  if (!sub.ok()) return fail(sub.status.message());
  const RequestSummary res = sink->wait();
  if (res.outcome == Outcome::kFailed) return fail(res.error);
  if (eo.prompt_cache) {
    // Save the state that serves the longest prefix of this prompt (the prompt's
    // checkpoint, or the whole request for layouts that serve any prefix). The engine
    // stored the request's state before reporting its end.
    if (Status st = eo.prompt_cache->export_file(ids, a.prompt_cache); !st.is_ok())
      std::fprintf(stderr, "[specula] could not save %s: %s\n", a.prompt_cache.c_str(), st.message().c_str());
    std::fprintf(stderr, "[specula] prompt cache: %lld of %lld prompt tokens were cached, state saved to %s\n",
                 static_cast<long long>(res.cached_tokens), static_cast<long long>(res.n_prompt), a.prompt_cache.c_str());
  }
  if (res.outcome == Outcome::kLength && res.n_generated < a.n_predict)
    std::fprintf(stderr, "[specula] stopped: the context of %lld tokens is full (raise --ctx)\n",
                 static_cast<long long>(n_ctx));
  report(a, *l, **engine, res);
  return 0;
}

}  // namespace

Verb add_generate(CLI::App& app, const RuntimeConfig& config) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt (streams to stdout)");
  cmd->add_option("-m,--model", a->model, kModelHelp);
  cmd->add_option("-p,--prompt", a->prompt, "Prompt text (default: a built-in prompt)");
  cmd->add_option("-n,--n-predict", a->n_predict, "Tokens to generate (default 128)")->check(CLI::Range(1, 1 << 24));
  a->sampling.add(cmd);
  add_quantize_option(cmd, a->quantize);
  cmd->add_option("-t,--threads", a->threads, "Threads (default: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("-c,--ctx", a->ctx, "Context size in tokens (default 4096, at most the model's)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_flag("--parse-special", a->parse_special, "Parse special tokens (e.g. <start_of_turn>) in the prompt");
  cmd->add_option("--draft-model", a->draft_model, "Speculative decoding with this draft model (same vocabulary)");
  cmd->add_option("--spec", a->spec, "Draft source: ngram (prompt lookup), draft (needs --draft-model), eagle3 (--draft-model is an EAGLE-3 head), mtp (the model's own multi-token-prediction layer), none");
  cmd->add_option("--spec-depth", a->spec_depth, "Most drafted tokens per verify step; each request adapts below it (default 4)")
      ->check(CLI::Range(1, 32));
  add_cache_options(cmd, a->cache, false);
  a->lora.add_options(cmd);
  cmd->add_option("--prompt-cache", a->prompt_cache,
                  "File to load the prompt's computed state from (when it fits) and save it to (llama.cpp's --prompt-cache)");
  cmd->add_option("--spec-accept", a->spec_accept,
                  "Acceptance at temperature > 0 with a draft model, an EAGLE-3 head or MTP: exact (same seed, same text as "
                  "without) or rejection (rejection sampling with the draft distribution: more drafts accepted, same "
                  "distribution)")
      ->check(CLI::IsMember({"exact", "rejection"}));
  return Verb{cmd, [a, &config] { return run_generate(config, *a); }};
}

}  // namespace specula::cli
