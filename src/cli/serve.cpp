// cli/serve.cpp — `specula serve`: loads the model, its draft source and prompt cache
// (engine/setup.h), and runs the HTTP server (server/server.h) until SIGINT or SIGTERM.
#include <algorithm>
#include <csignal>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "cli/common.h"
#include "core/strings.h"
#include "chat/builtin_templates.h"
#include "server/model_config.h"
#include "server/server.h"

namespace specula::cli {
namespace {

struct ServeArgs {
  std::string quantize;
  std::vector<std::string> models;  // -m: one model, or NAME=PATH several times
  std::string models_dir;
  int64_t models_memory_mib = 0;
  double models_idle_unload = 0;
  std::string host = "127.0.0.1", api_key, alias, chat_template_file, draft_model, spec;
  int port = 8080, parallel = 4, threads = 0, queue = 64, spec_depth = 4, spec_max_batch = 2;
  std::string spec_accept = "exact";
  int64_t ctx = 0, step_tokens = 512;  // ctx 0: 4096 per parallel request
  size_t max_body = 1 << 20;
  int max_connections = 1024;
  double timeout_header = 10, timeout_write = 30, timeout_body = 10;
  double drain_timeout = 30;
  double drain_grace = 0;
  std::string pooling;
  int log_requests = 1;
  CacheArgs cache;
  int64_t cache_ram_mib = -1;  // -1: default
  int64_t cache_disk_mib = 0;
  std::string cache_dir;
  int64_t cache_checkpoint = 1024;
  int64_t generation_checkpoint = 0;
  // llama-server's request defaults and front-end switches
  std::optional<float> temp;
  std::optional<int64_t> seed, n_predict;
  std::string cors_origin = "*";
  bool no_webui = false, no_slots = false, no_metrics = false, verbose = false, kv_split = false;
  std::string reasoning = "auto";
  std::string reasoning_format = "auto";
  int64_t reasoning_budget = -1;
  int64_t responses_max = 1024;
  std::string chat_template;
  std::string tags;
  // LoRA adapters: --lora NAME=PATH (vLLM's: on request) or PATH (llama-server's: on for
  // every request), --lora-scaled PATH SCALE, --lora-init-without-apply, --lora-runtime-updates.
  std::vector<std::string> lora;
  std::vector<std::string> lora_scaled;  // PATH SCALE pairs, flattened
  bool lora_init_without_apply = false, lora_runtime_updates = false;
};

server::Server* g_server = nullptr;
// SIGTERM (routers, Kubernetes, systemd) drains: after --drain-grace nothing new is admitted, what runs
// finishes (up to --drain-timeout); SIGINT (Ctrl-C), or a second SIGTERM, stops at once.
void on_signal(int sig) {
  if (g_server == nullptr) return;
  if (sig == SIGTERM && !g_server->draining()) {
    g_server->drain();
  } else {
    g_server->stop();
  }
}

// The connection layer's options from the flags (the model's and engine's come from
// model_config()).
// The adapters of --lora / --lora-scaled. NAME=PATH (NAME without '/'): named, scale 0 (used
// when a request names it); PATH: named after the file (its stem) or folder, at scale 1 (or
// SCALE) for every request, 0 with --lora-init-without-apply (llama-server's flags).
std::vector<server::LoraSpec> lora_specs(const ServeArgs& a) {
  std::vector<server::LoraSpec> out;
  const auto global = [&](const std::string& path, float scale) {
    server::LoraSpec s;
    s.path = path;
    s.name = server::lora_name_of_path(path);
    s.scale = a.lora_init_without_apply ? 0.0f : scale;
    out.push_back(std::move(s));
  };
  for (const std::string& l : a.lora) {
    const size_t eq = l.find('=');
    if (eq != std::string::npos && eq > 0 && l.substr(0, eq).find('/') == std::string::npos) {
      server::LoraSpec s;
      s.name = l.substr(0, eq);
      s.path = l.substr(eq + 1);
      s.named = true;
      out.push_back(std::move(s));
    } else {
      global(l, 1.0f);
    }
  }
  for (size_t i = 0; i + 1 < a.lora_scaled.size(); i += 2)
    global(a.lora_scaled[i], std::strtof(a.lora_scaled[i + 1].c_str(), nullptr));  // checked by run_serve
  return out;
}

server::ServerOptions connection_options(const RuntimeConfig& config, const ServeArgs& a) {
  server::ServerOptions so;
  so.host = a.host;
  so.port = a.port;
  so.api_key = a.api_key;
  so.max_body_bytes = a.max_body;
  so.max_connections = a.max_connections;
  so.header_timeout_s = a.timeout_header;
  so.write_timeout_s = a.timeout_write;
  so.drain_timeout_s = a.drain_timeout;
  so.drain_grace_s = a.drain_grace;
  so.body_timeout_s = a.timeout_body;
  so.log_requests = a.log_requests != 0;
  so.default_temperature = a.temp;
  if (a.seed && *a.seed >= 0) so.default_seed = static_cast<uint64_t>(*a.seed);  // -1: random, as llama-server
  if (a.n_predict && *a.n_predict >= 0) so.default_n_predict = static_cast<int32_t>(*a.n_predict);
  so.cors_origins = a.cors_origin;
  so.webui = !a.no_webui;
  so.slots = !a.no_slots;
  so.metrics = !a.no_metrics;
  so.verbose = a.verbose;
  so.reasoning = a.reasoning;
  so.reasoning_format = a.reasoning_format == "deepseek" ? "auto" : a.reasoning_format;
  so.reasoning_budget = a.reasoning_budget;
  so.lora = lora_specs(a);
  so.lora_runtime_updates = a.lora_runtime_updates;
  // One response store for every model; on disk beside the prompt cache with --cache-dir.
  so.responses = std::make_shared<server::ResponseStore>(
      a.cache_dir.empty() ? std::string() : (std::filesystem::path(a.cache_dir) / "responses").string(),
      static_cast<size_t>(a.responses_max));
  // Vertex AI's custom-container variables (cloud.google.com/vertex-ai/docs/predictions/
  // custom-container-requirements), as llama-server reads them.
  if (config.aip_mode == "PREDICTION") {
    so.predict_route = config.aip_predict_route.empty() ? "/predict" : config.aip_predict_route;
    so.health_route = config.aip_health_route;
    if (!config.aip_http_port.empty()) so.port = std::atoi(config.aip_http_port.c_str());
  }
  return so;
}

// Several models (-m NAME=PATH repeated, -m given more than once, or --models-dir): their
// names and paths; none (empty) for one model.
Result<std::vector<server::ModelSource>> model_sources(const RuntimeConfig& config, const ServeArgs& a) {
  std::vector<server::ModelSource> out;
  bool named = false;
  for (const std::string& m : a.models) named = named || m.find('=') != std::string::npos;
  if (a.models_dir.empty() && a.models.size() <= 1 && !named) return out;
  for (const std::string& m : a.models) {
    const size_t eq = m.find('=');
    const std::string arg = eq == std::string::npos ? m : m.substr(eq + 1);
    auto path = resolve_model(config, arg);
    if (!path) return path.status();
    std::string name = eq == std::string::npos ? std::filesystem::path(*path).filename().string() : m.substr(0, eq);
    if (eq == std::string::npos && name.size() > 5 && name.ends_with(".gguf")) name.resize(name.size() - 5);
    if (name.empty()) return Status::invalid_argument("[cli] -m " + m + ": an empty model name");
    out.push_back({name, *path});
  }
  if (!a.models_dir.empty()) {
    std::error_code ec;
    std::vector<server::ModelSource> found;
    for (const auto& de : std::filesystem::directory_iterator(a.models_dir, ec)) {
      const std::string file = de.path().filename().string();
      if (de.is_directory(ec) && std::filesystem::exists(de.path() / "config.json", ec)) {
        found.push_back({file, de.path().string()});
      } else if (de.is_regular_file(ec) && file.ends_with(".gguf") && !file.starts_with("mmproj")) {
        found.push_back({file.substr(0, file.size() - 5), de.path().string()});
      }
    }
    if (ec) return Status::not_found("[cli] cannot list --models-dir " + a.models_dir + ": " + ec.message());
    std::sort(found.begin(), found.end(), [](const auto& x, const auto& y) { return x.name < y.name; });
    if (found.empty()) return Status::not_found("[cli] --models-dir " + a.models_dir + " holds no .gguf file or model folder");
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

// The served model's set-up from the flags (server/model_config.h, shared with the library).
Result<server::ModelConfig> model_config(const RuntimeConfig& config, const ServeArgs& a) {
  server::ModelConfig mc;
  // --alias a,b,c (llama-server): several names; the id is the first in byte order.
  mc.aliases = split_list(a.alias);
  if (!mc.aliases.empty()) mc.model_id = *std::min_element(mc.aliases.begin(), mc.aliases.end());
  mc.tags = split_list(a.tags);
  if (!a.chat_template.empty()) {
    auto t = chat::builtin_chat_template(a.chat_template);
    if (!t) return t.status();
    mc.chat_template = std::move(t).value();
  }
  if (!a.chat_template_file.empty()) {
    std::ifstream in(a.chat_template_file, std::ios::binary);
    if (!in) return Status::not_found("[cli] cannot read --chat-template-file " + a.chat_template_file);
    std::ostringstream ss;
    ss << in.rdbuf();
    mc.chat_template = ss.str();
  }
  mc.parallel = a.parallel;
  mc.ctx = a.ctx;
  mc.ctx_split = a.kv_split;
  mc.cache = a.cache.options();
  mc.kv_budget = a.cache.budget;
  mc.step_tokens = a.step_tokens;
  mc.queue = a.queue;
  mc.spec = a.spec;
  if (!a.draft_model.empty()) {
    auto p = resolve_model(config, a.draft_model);
    if (!p) return p.status();
    mc.draft_model = *p;
  }
  mc.spec_depth = a.spec_depth;
  mc.spec_max_batch = a.spec_max_batch;
  mc.spec_rejection = a.spec_accept == "rejection";
  mc.cache_ram_mib = a.cache_ram_mib;
  mc.cache_disk_mib = a.cache_disk_mib;
  mc.cache_dir = a.cache_dir;
  mc.cache_checkpoint = a.cache_checkpoint;
  mc.generation_checkpoint = a.generation_checkpoint;
  mc.pooling = a.pooling;
  return mc;
}

int run_serve(const RuntimeConfig& config, const ServeArgs& a) {
  if (a.drain_grace > 0 && a.drain_grace >= a.drain_timeout) {
    char msg[200];
    std::snprintf(msg, sizeof msg, "[cli] --drain-grace (%g s) must be less than --drain-timeout (%g s)", a.drain_grace,
                  a.drain_timeout);
    return fail(std::string(msg) + ": the requests admitted in the grace finish within what is left of the timeout");
  }
#if defined(__GLIBC__)
  // glibc raises its mmap threshold to the size of each large block freed (up to 32 MiB),
  // after which such blocks come from per-thread arenas that keep their pages: a server
  // whose request threads each once parsed a huge body or tokenized a huge word would
  // keep that peak per arena. A fixed threshold (which also stops the adjustment) sends
  // every block of 1 MiB or more to mmap, returned to the system when freed.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
  auto mc = model_config(config, a);
  if (!mc) return fail(mc.message());
  auto sources = model_sources(config, a);
  if (!sources) return fail(sources.message());
  for (size_t i = 0; i < a.lora_scaled.size(); i += 2) {
    char* end = nullptr;
    const std::string scale = i + 1 < a.lora_scaled.size() ? a.lora_scaled[i + 1] : "";
    const float v = std::strtof(scale.c_str(), &end);
    if (scale.empty() || end == nullptr || *end != '\0' || !std::isfinite(v) || std::fabs(v) > 1e4)
      return fail("[cli] --lora-scaled takes PATH SCALE (a finite number, |SCALE| <= 10000); got '" +
                  a.lora_scaled[i] + "' " + (scale.empty() ? "and no scale" : "'" + scale + "'"));
  }
  if (!sources->empty() && (!a.lora.empty() || !a.lora_scaled.empty()))
    return fail("[cli] --lora and --lora-scaled need a single model (-m FILE): an adapter is made for one model");
  std::unique_ptr<server::Server> srv;
  std::string what, details;  // "FILE as 'id'" / "models a, b"; " (parallel ..., ...)"
  if (sources->empty()) {
    // One model (-m FILE, or the default): loaded now, every request's model name finds it.
    auto l = load(config, a.models.empty() ? "" : a.models.front(), a.threads, a.quantize,
                  /*with_tokenizer=*/false);  // the server loads its own
    if (!l) return fail(l.message());
    auto served = server::open_served_model(std::move(l->model), l->path, *mc, connection_options(config, a));
    if (!served) return fail(served.message());
    for (const server::LoraEntry& e : (*served)->lora().list())
      std::fprintf(stderr, "[specula] LoRA adapter %lld '%s': %s, %lld projections, rank %lld, %s\n",
                   static_cast<long long>(e.id), e.name.c_str(), e.path.c_str(),
                   static_cast<long long>(e.adapter->n_pairs()), static_cast<long long>(e.adapter->max_rank()),
                   e.scale != 0.0f ? ("on for every request at scale " + std::to_string(e.scale)).c_str()
                                   : "used by requests that name it");
    const EngineOptions& eo = (*served)->engine().options();
    const std::string spec_note =
        eo.draft ? ", speculative " + eo.draft->name() + " depth " + std::to_string(a.spec_depth) : "";
    what = l->path + " as '" + (*served)->id() + "'";
    details = " (parallel " + std::to_string(a.parallel) + ", a request up to " +
                                std::to_string(eo.n_ctx) + " tokens, KV budget " + std::to_string(eo.kv_budget >> 20) +
                                " MiB: " + (*served)->engine().describe_state() +
                                (a.api_key.empty() ? "" : ", API key required") + spec_note + ")";
    auto s = server::Server::create(std::move(served).value());
    if (!s) return fail(s.message());
    srv = std::move(s).value();
  } else {
    // Several: each loads on first use (server/model_registry.h).
    server::ModelConfig base = *mc;
    server::ServerOptions conn = connection_options(config, a);
    server::ModelOpener opener = [config, a, base, conn](const server::ModelSource& src)
        -> Result<std::unique_ptr<server::ServedModel>> {
      auto l = load(config, src.path, a.threads, a.quantize, /*with_tokenizer=*/false);
      if (!l) return l.status();
      server::ModelConfig c = base;
      c.model_id = src.name;
      c.aliases.clear();
      return server::open_served_model(std::move(l->model), l->path, c, conn);
    };
    server::RegistryOptions ro;
    ro.memory_budget_bytes = a.models_memory_mib << 20;
    ro.idle_unload_s = a.models_idle_unload;
    std::string names;
    for (const auto& src : *sources) names += (names.empty() ? "" : ", ") + src.name;
    auto reg = server::ModelRegistry::create(std::move(sources).value(), std::move(opener), ro);
    if (!reg) return fail(reg.message());
    // The connection fields, and the engine shape for the worker count.
    conn.engine.n_rows = a.parallel;
    conn.engine.max_queue = a.queue;
    auto s = server::Server::create(std::move(reg).value(), conn);
    if (!s) return fail(s.message());
    srv = std::move(s).value();
    what = "models " + names;
    details = " (each loaded on first use, parallel " + std::to_string(a.parallel) +
           (a.models_memory_mib > 0 ? ", memory budget " + std::to_string(a.models_memory_mib) + " MiB" : "") +
           (a.models_idle_unload > 0 ? ", unloaded after " + std::to_string(static_cast<int>(a.models_idle_unload)) +
                                           " s idle"
                                     : "") +
           (a.api_key.empty() ? "" : ", API key required") + ")";
  }
  if (Status st = srv->bind(); !st.is_ok()) return fail(st.message());
  g_server = srv.get();
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  // Every address of --host (a comma-separated list): http://A:PORT, http://[B]:PORT.
  std::string urls;
  for (const std::string& h : split_list(a.host)) {
    if (!urls.empty()) urls += ", ";
    urls += "http://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + std::to_string(srv->port());
  }
  std::fprintf(stderr, "specula: serving %s on %s%s\n", what.c_str(), urls.c_str(), details.c_str());
  std::fflush(stderr);
  srv->serve();
  g_server = nullptr;
  std::fprintf(stderr, "specula: server stopped\n");
  return 0;
}

void add_serve_flags(CLI::App* cmd, ServeArgs& a) {
  cmd->add_option("-m,--model", a.models,
                  std::string(kModelHelp) +
                      " Several models in one server: NAME=PATH, once per model (a request's \"model\" chooses; "
                      "each loads on first use)");
  cmd->add_option("--models-dir", a.models_dir,
                  "Serve every model in DIR (each .gguf file, and each folder with a config.json), named by the file "
                  "name without .gguf or the folder name; each loads on first use");
  cmd->add_option("--models-memory", a.models_memory_mib,
                  "Several models: MiB the loaded models may take together (weights + KV budget); the least recently "
                  "used idle ones unload to make room (default 0: no budget)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--models-idle-unload", a.models_idle_unload,
                  "Several models: unload a model after SECONDS without requests (default 0: never)")
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--host", a.host,
                  "Address to listen on (default 127.0.0.1, loopback only); a comma-separated list listens on each "
                  "(e.g. 127.0.0.1,::1)");
  cmd->add_option("--port", a.port, "Port (default 8080; 0 = any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--parallel", a.parallel, "Requests decoded together (cache rows, default 4)")->check(CLI::Range(1, 256));
  cmd->add_option("-c,--ctx", a.ctx,
                  "Total context in tokens shared by all requests, as llama-server's -c; one request may use all of "
                  "it (default 4096 x --parallel)")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 26));
  add_cache_options(cmd, a.cache, true);
  cmd->add_option("--cache-ram", a.cache_ram_mib, "Prompt cache in RAM, MiB (default: a quarter of RAM, at most 8192; 0 = off)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--generation-checkpoint", a.generation_checkpoint,
                  "Store an in-flight generation every N tokens; after a restart (with --cache-dir) an identical "
                  "request continues it exactly (default 0 = off)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--cache-dir", a.cache_dir, "Prompt cache on disk in this folder (survives restarts)");
  cmd->add_option("--cache-disk", a.cache_disk_mib, "Prompt cache on disk, MiB (default: 4 x --cache-ram, at least 1024)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--cache-checkpoint", a.cache_checkpoint,
                  "For sliding-window and recurrent layers: also store the state every N prompt tokens (default 1024; "
                  "0 = only at the prompt's end)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--api-key", a.api_key, "Require 'Authorization: Bearer KEY' (or 'x-api-key: KEY') on every route but /health");
  cmd->add_option("--alias", a.alias,
                  "Model id clients send as \"model\" (default: the file name without .gguf); a comma-separated "
                  "list gives several names (the id is the first in byte order, as llama-server)");
  cmd->add_option("--tags", a.tags, "Comma-separated labels /models lists for the model (llama-server's --tags)");
  cmd->add_option("--chat-template-file", a.chat_template_file, "Jinja chat template to use instead of the model's");
  cmd->add_option("--chat-template", a.chat_template,
                  "A built-in chat template by name instead of the model's: " + chat::builtin_chat_template_names());
  cmd->add_option("--temp", a.temp, "Default temperature of requests that send none (default: the model's, else 0.8)")
      ->check(CLI::Range(0.0, 2.0));
  cmd->add_option("--seed", a.seed, "Default seed of requests that send none (default -1: a random seed per request)");
  cmd->add_option("-n,--n-predict", a.n_predict,
                  "Default token limit of requests that send none (default -1: until the context is full)")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 30));
  cmd->add_option("--cors-origin", a.cors_origin,
                  "Origins web pages may call the API from (CORS): * (default, as llama-server: any — set --api-key), "
                  "localhost, a comma-separated list, or \"\" for none");
  cmd->add_flag("--no-webui", a.no_webui, "Do not serve the chat page at /");
  cmd->add_flag("--no-slots", a.no_slots, "Answer GET /slots with 501 (llama-server's --no-slots)");
  cmd->add_flag("--no-metrics", a.no_metrics, "Answer GET /metrics with 501");
  cmd->add_flag("--verbose", a.verbose,
                "Every OpenAI answer also carries llama-server's native object as \"__verbose\" (the prompt as text, "
                "settings, timings)");
  cmd->add_option("--reasoning", a.reasoning,
                  "Reasoning models: auto (the template as it is), off (ask not to think: enable_thinking false and an "
                  "empty thinking block after the generation prompt), on (enable_thinking true)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  cmd->add_option("--reasoning-format", a.reasoning_format,
                  "Reasoning models' thinking (<think>...</think>): auto / deepseek (split out: reasoning_content, "
                  "thinking blocks, reasoning items) or none (left in the content); a request's reasoning_format wins")
      ->check(CLI::IsMember({"auto", "deepseek", "none"}));
  cmd->add_option("--responses-max", a.responses_max,
                  "Responses API: stored responses kept for previous_response_id (least recently used out; on disk "
                  "under --cache-dir/responses when set; default 1024)")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}));
  cmd->add_option("--reasoning-budget", a.reasoning_budget,
                  "Thinking tokens a request may spend before the closing tag is forced (-1: unlimited, 0: none); a "
                  "request's thinking_budget_tokens / reasoning_effort / thinking.budget_tokens wins")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 30));
  cmd->add_flag("--kv-split", a.kv_split,
                "One request holds at most --ctx / --parallel tokens (llama-server's per-slot context); default: one "
                "request may use all of --ctx");
  cmd->add_option("--queue", a.queue, "Requests that may wait for a free row before 429 (default 64)")->check(CLI::Range(0, 100000));
  cmd->add_option("--step-tokens", a.step_tokens, "Tokens per engine step: decode rows + prompt chunks (default 512)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--max-body", a.max_body, "Largest request body in bytes (default 1 MiB)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  cmd->add_option("--max-connections", a.max_connections,
                  "Open connections served at once; more get 503 (default 1024, lowered to fit the descriptor limit)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--timeout-header", a.timeout_header,
                  "Seconds a connection has to send a request's line and headers, from its opening or its last "
                  "response (default 10)")
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--timeout-body", a.timeout_body, "Seconds a request body may take beyond its size at 64 KiB/s (default 10)")
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--pooling", a.pooling, "Pooling of /v1/embeddings: mean or last (default: the model's pooling_type, else mean)")
      ->check(CLI::IsMember({"mean", "last"}));
  cmd->add_option("--timeout-write", a.timeout_write,
                  "Seconds one response write may take before a client that does not read is dropped (default 30)")
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--drain-timeout", a.drain_timeout,
                  "On SIGTERM, seconds the requests in flight may take to finish while nothing new is admitted "
                  "(/health answers 503), before the rest is cancelled; 0: cancel at once, as SIGINT (default 30)")
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--drain-grace", a.drain_grace,
                  "On SIGTERM, seconds during which new requests are still served while /health already answers 503, "
                  "so that a router or load balancer polling /health takes the replica out before it refuses anything; "
                  "part of --drain-timeout, so less than it: a request admitted at the grace's end has the rest of "
                  "the timeout to finish (default 0: refuse at once)")
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--lora", a.lora,
                  "A LoRA adapter (llama.cpp's GGUF LoRA file or a PEFT folder), repeatable. NAME=PATH (vLLM's "
                  "--lora-modules): listed by /v1/models and used by requests whose \"model\" is NAME; PATH alone "
                  "(llama-server's): applied to every request at scale 1 unless it sends \"lora\" (ids of GET "
                  "/lora-adapters)");
  cmd->add_option("--lora-scaled", a.lora_scaled,
                  "PATH SCALE: a LoRA adapter applied to every request at SCALE (llama-server's), repeatable")
      ->expected(2)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_flag("--lora-init-without-apply", a.lora_init_without_apply,
                "Load the --lora PATH / --lora-scaled adapters at scale 0 (POST /lora-adapters or a request's "
                "\"lora\" turns them on)");
  cmd->add_flag("--lora-runtime-updates", a.lora_runtime_updates,
                "Answer POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's; they read any path the "
                "server can, so off by default: 403)");
  cmd->add_option("--log-requests", a.log_requests,
                  "1: one line per request on stderr (method, path, status, time, tokens, time to first token); 0: none "
                  "(default 1)")
      ->check(CLI::Range(0, 1));
  add_quantize_option(cmd, a.quantize);
  cmd->add_option("-t,--threads", a.threads, "Threads (default: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--draft-model", a.draft_model, "Speculative decoding with this draft model (same vocabulary)");
  cmd->add_option("--spec", a.spec, "Draft source for every request: ngram, draft (needs --draft-model), eagle3 (--draft-model is an EAGLE-3 head), mtp (the model's own multi-token-prediction layer), none");
  cmd->add_option("--spec-depth", a.spec_depth, "Most drafted tokens per verify step; each request adapts below it (default 4)")
      ->check(CLI::Range(1, 32));
  cmd->add_option("--spec-accept", a.spec_accept,
                  "Acceptance at temperature > 0 with a draft model, an EAGLE-3 head or MTP: exact (same seed, same text as "
                  "without) or rejection (rejection sampling with the draft distribution: more drafts accepted, same "
                  "distribution)")
      ->check(CLI::IsMember({"exact", "rejection"}));
  cmd->add_option("--spec-max-batch", a.spec_max_batch, "Speculate only while at most this many requests decode; 0 = always (default 2)")
      ->check(CLI::Range(0, 1 << 16));
}

}  // namespace

Verb add_serve(CLI::App& app, const RuntimeConfig& config) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  add_serve_flags(cmd, *a);
  return Verb{cmd, [a, &config] { return run_serve(config, *a); }};
}

}  // namespace specula::cli
