// server/metrics.cpp — see metrics.h.
#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "server/generation.h"
#include "tokenizer/bpe.h"

namespace specula::server {
namespace {

// Writes Prometheus' text format: integers exactly, other numbers as the shortest text
// that reads back as the same double.
class Writer {
 public:
  using Labelled = std::vector<std::pair<std::string, double>>;  // label text -> value

  void counter(const char* name, const char* help, double v) { header(name, help, "counter") += sample(name, "", v); }
  void counter(const char* name, const char* help, const Labelled& samples) {
    header(name, help, "counter");
    for (const auto& [labels, v] : samples) out_ += sample(name, labels, v);
  }
  void gauge(const char* name, const char* help, double v) { header(name, help, "gauge") += sample(name, "", v); }
  void gauge(const char* name, const char* help, const Labelled& samples) {
    header(name, help, "gauge");
    for (const auto& [labels, v] : samples) out_ += sample(name, labels, v);
  }
  void histogram(const char* name, const char* help, const Histogram& h) {
    header(name, help, "histogram");
    uint64_t cum = 0;
    const std::string bucket = std::string(name) + "_bucket";
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cum += h.counts[i];
      out_ += sample(bucket.c_str(), "le=\"" + number(h.bounds[i]) + "\"", static_cast<double>(cum));
    }
    cum += h.counts.back();
    out_ += sample(bucket.c_str(), "le=\"+Inf\"", static_cast<double>(cum));
    out_ += sample((std::string(name) + "_sum").c_str(), "", h.sum);
    out_ += sample((std::string(name) + "_count").c_str(), "", static_cast<double>(h.count));
  }
  std::string take() { return std::move(out_); }

  static std::string number(double v) {
    if (v == static_cast<double>(static_cast<int64_t>(v)) && v > -9.007199254740992e15 && v < 9.007199254740992e15)
      return std::to_string(static_cast<int64_t>(v));
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
    return ec == std::errc() ? std::string(buf, end) : "NaN";
  }

 private:
  std::string& header(const char* name, const char* help, const char* type) {
    out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    return out_;
  }
  static std::string sample(const char* name, const std::string& labels, double v) {
    return std::string(name) + (labels.empty() ? "" : "{" + labels + "}") + " " + number(v) + "\n";
  }
  std::string out_;
};

double d(uint64_t v) { return static_cast<double>(v); }
double d(int64_t v) { return static_cast<double>(v); }

void write_requests(Writer& w, const EngineStats& s) {
  Writer::Labelled outcomes;
  for (Outcome oc : {Outcome::kStop, Outcome::kLength, Outcome::kCancelled, Outcome::kFailed})
    outcomes.emplace_back(std::string("outcome=\"") + outcome_name(oc) + "\"", d(s.finished[static_cast<int>(oc)]));
  outcomes.emplace_back("outcome=\"rejected_invalid\"", d(s.rejected_invalid));
  outcomes.emplace_back("outcome=\"rejected_busy\"", d(s.rejected_busy));
  w.counter("specula_requests_total", "Generation requests by outcome (rejected: refused before running).", outcomes);
}

void write_http(Writer& w, const http::Stats& hs, const std::map<int, uint64_t>& responses_by_status) {
  Writer::Labelled codes;
  for (const auto& [code, n] : responses_by_status) codes.emplace_back("code=\"" + std::to_string(code) + "\"", d(n));
  w.counter("specula_http_responses_total", "HTTP responses by status code.", codes);
  w.gauge("specula_http_connections_open", "Open client connections.", d(hs.open_connections));
  w.counter("specula_http_connections_total",
            "Connections by fate: accepted, refused with 503 over --max-connections, dropped by a deadline, "
            "refused as malformed (400/413/431).",
            {{"event=\"accepted\"", d(hs.accepted_total)},
             {"event=\"refused_over_cap\"", d(hs.refused_over_cap_total)},
             {"event=\"timed_out\"", d(hs.timed_out_total)},
             {"event=\"malformed\"", d(hs.malformed_total)}});
}

void write_engine(Writer& w, const EngineStats& s) {
  w.counter("specula_prompt_tokens_total", "Prompt tokens admitted.", d(s.prompt_tokens));
  w.counter("specula_generated_tokens_total", "Tokens sampled.", d(s.generated_tokens));
  w.counter("specula_steps_total", "Engine steps (one batched forward each).", d(s.steps));
  w.counter("specula_grammar_masks_total", "Structured-output token masks computed (one per constrained position).",
            d(s.grammar_masks));
  w.counter("specula_grammar_mask_seconds_total",
            "Seconds the grammar worker spent on masks (it runs while the target forward does).", s.grammar_mask_seconds);
  w.counter("specula_grammar_wait_seconds_total", "Seconds steps waited for grammar masks after their forward.",
            s.grammar_wait_seconds);
  w.counter("specula_spec_rounds_total", "Row verify rounds that carried drafted tokens.", d(s.spec_rounds));
  w.counter("specula_spec_draft_tokens_total", "Drafted tokens proposed to the target.", d(s.drafted));
  w.counter("specula_spec_accepted_tokens_total", "Drafted tokens the target accepted.", d(s.accepted));
  w.gauge("specula_spec_acceptance_rate", "Accepted / drafted tokens since start.",
          s.drafted > 0 ? d(s.accepted) / d(s.drafted) : 0.0);
  w.gauge("specula_spec_mean_accepted_length", "Accepted drafts per verify round since start.",
          s.spec_rounds > 0 ? d(s.accepted) / d(s.spec_rounds) : 0.0);
  w.gauge("specula_queue_depth", "Requests waiting for a row.", d(s.queue_depth));
  w.gauge("specula_running_rows", "Requests holding a row.", d(s.running_rows));
  w.gauge("specula_rows", "Rows (--parallel).", s.n_rows);
  w.gauge("specula_kv_bytes", "Bytes of KV cache and other model state held by running requests.", d(s.kv_bytes));
  w.gauge("specula_kv_reserved_bytes", "Bytes of model state reserved by running requests (prompt + max_tokens).",
          d(s.kv_reserved));
  w.gauge("specula_kv_budget_bytes", "The KV budget (--kv-budget, or from --ctx).", d(s.kv_budget));
}

void write_prompt_cache(Writer& w, const PromptCacheStats& c) {
  w.counter("specula_prompt_cache_lookups_total", "Admitted requests that looked up the prompt cache, by result.",
            {{"result=\"hit\"", d(c.hits)}, {"result=\"miss\"", d(c.misses)}});
  w.counter("specula_prompt_cache_hit_tokens_total", "Prompt tokens served by the prompt cache (not prefilled).",
            d(c.hit_tokens));
  w.counter("specula_prompt_cache_evictions_total", "Entries dropped to keep a tier within its cap.",
            {{"tier=\"ram\"", d(c.evictions)}, {"tier=\"disk\"", d(c.disk_evictions)}});
  w.counter("specula_prompt_cache_disk_rejected_total",
            "Cache files skipped: corrupted, truncated, foreign or old version.", d(c.disk_rejected));
  w.counter("specula_prompt_cache_disk_io_total", "Entries written to / read back from disk.",
            {{"op=\"write\"", d(c.disk_writes)}, {"op=\"read\"", d(c.disk_reads)}});
  w.gauge("specula_prompt_cache_bytes", "Bytes held by the prompt cache, by tier.",
          {{"tier=\"ram\"", d(c.ram_bytes)}, {"tier=\"disk\"", d(c.disk_bytes)}});
  w.gauge("specula_prompt_cache_entries", "Entries in the prompt cache, by tier.",
          {{"tier=\"ram\"", d(c.ram_entries)}, {"tier=\"disk\"", d(c.disk_entries)}});
  w.gauge("specula_prompt_cache_disk_pending", "Entries waiting to be written.", d(c.disk_pending));
  w.gauge("specula_prompt_cache_generation_checkpoints",
          "In-flight generations with a checkpoint (--generation-checkpoint).", d(c.checkpoints));
}

// Process memory (Prometheus' standard names), from /proc/self/statm.
void write_process(Writer& w) {
  long pages_total = 0, pages_resident = 0;
  if (FILE* fp = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(fp, "%ld %ld", &pages_total, &pages_resident) != 2) pages_total = pages_resident = 0;
    std::fclose(fp);
  }
  const int64_t page = sysconf(_SC_PAGESIZE);
  w.gauge("process_resident_memory_bytes", "Resident set size of the server process.", d(pages_resident * page));
  w.gauge("process_virtual_memory_bytes", "Virtual memory size of the server process.", d(pages_total * page));
  w.gauge("specula_tokenizer_scratch_bytes", "Bytes held by the BPE tokenizer's per-thread merge scratch.",
          d(static_cast<int64_t>(tokenizer::bpe_scratch_bytes())));
}

void write_histograms(Writer& w, const EngineStats& s) {
  w.histogram("specula_step_seconds", "Wall time of one engine step.", s.step_seconds);
  w.histogram("specula_batch_rows", "Rows in one step's forward.", s.batch_rows);
  w.histogram("specula_batch_tokens", "Tokens in one step's forward.", s.batch_tokens);
  w.histogram("specula_time_to_first_token_seconds", "Per request: submitted to its first token (queue + prefill).",
              s.ttft_seconds);
  w.histogram("specula_time_per_output_token_seconds", "Per request: decode seconds per token after the first.",
              s.tpot_seconds);
  w.histogram("specula_request_latency_seconds", "Per request: submitted to finished (end-to-end).", s.request_seconds);
  w.histogram("specula_request_prompt_tokens", "Per request: prompt tokens.", s.request_prompt_tokens);
  w.histogram("specula_request_generation_tokens", "Per request: generated tokens.", s.request_generated_tokens);
}

// llama-server's series (its names and meanings, tools/server/server-task.cpp to_metrics),
// for dashboards built on them: from the engine's counters and the finished generations'.
void write_llamacpp(Writer& w, const EngineStats& s, const ServedModel::GenerationTotals& t) {
  w.counter("llamacpp:prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens",
            d(t.prompt_tokens));
  w.counter("llamacpp:prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", d(t.cached_tokens));
  w.counter("llamacpp:prompt_seconds_total", "Total time spent processing prompts", t.prefill_seconds);
  w.counter("llamacpp:tokens_predicted_total", "Number of generation tokens processed", d(t.generated_tokens));
  w.counter("llamacpp:tokens_predicted_seconds_total", "Total time spent generating tokens", t.decode_seconds);
  w.counter("llamacpp:n_decode_total", "Total number of forward steps (batched: all rows in one)", d(s.steps));
  w.counter("llamacpp:n_tokens_max", "Largest observed sequence length (prompt + generation)", d(t.max_tokens_seen));
  w.counter("llamacpp:spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", d(s.drafted));
  w.counter("llamacpp:spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by the target model",
            d(s.accepted));
  w.counter("llamacpp:spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps",
            d(s.spec_rounds));
  w.gauge("llamacpp:prompt_tokens_seconds", "Average prompt throughput in tokens/s (since start)",
          t.prefill_seconds > 0 ? d(t.prompt_tokens) / t.prefill_seconds : 0.0);
  w.gauge("llamacpp:predicted_tokens_seconds", "Average generation throughput in tokens/s (since start)",
          t.decode_seconds > 0 ? d(t.generated_tokens) / t.decode_seconds : 0.0);
  w.gauge("llamacpp:requests_processing", "Number of requests processing", d(s.running_rows));
  w.gauge("llamacpp:requests_deferred", "Number of requests deferred", d(s.queue_depth));
  w.gauge("llamacpp:n_busy_slots_per_decode", "Average number of busy slots per forward step",
          s.batch_rows.count > 0 ? s.batch_rows.sum / d(s.batch_rows.count) : 0.0);
}

// A Prometheus label value: backslash, double quote and newline escaped.
std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// The gauges routers and the Kubernetes Gateway API Inference Extension's endpoint picker
// scrape to choose a replica (its model server protocol: queued requests, running
// requests, KV-cache utilization), under vLLM's names (the protocol's defaults, also
// read by vllm-router and llm-d) and SGLang's (sglang-router, the picker's SGLang
// profile). KV utilization: state bytes held by running requests over the KV budget.
void write_router_gauges(Writer& w, const EngineStats& s, const std::string& model) {
  const std::string label = "model_name=\"" + label_value(model) + "\"";
  const double usage = s.kv_budget > 0 ? std::min(1.0, d(s.kv_bytes) / d(s.kv_budget)) : 0.0;
  w.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", {{label, d(s.running_rows)}});
  w.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", {{label, d(s.queue_depth)}});
  w.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", {{label, usage}});
  w.gauge("vllm:gpu_cache_usage_perc", "KV-cache usage (vLLM's older name). 1 means 100 percent usage.", {{label, usage}});
  w.gauge("sglang:num_running_reqs", "The number of running requests.", {{label, d(s.running_rows)}});
  w.gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", {{label, d(s.queue_depth)}});
  w.gauge("sglang:num_used_tokens", "The number of tokens in the KV cache of running requests.", {{label, d(s.kv_tokens)}});
  w.gauge("sglang:token_usage", "The token usage (KV-cache utilization).", {{label, usage}});
}

// The Gateway API Inference Extension's LoRA gauge (its model server protocol, vLLM's
// name): labels running_lora_adapters / waiting_lora_adapters (comma-separated adapter
// names of the running and queued requests) and max_lora (adapters one batch may run: every
// loaded one, as rows group by adapter without a limit); the value is the time of this
// report (Unix seconds), the freshest label set winning. Only when adapters are loaded.
void write_lora(Writer& w, const ServedModel& served) {
  const auto loaded = served.lora().list();
  if (loaded.empty()) return;
  const Engine::LoraUse use = served.engine().lora_in_use();
  const auto names = [&](const std::vector<uint64_t>& ids) {
    std::string out;
    for (uint64_t id : ids) {
      std::string n = served.lora().name_of(id);
      if (n.empty()) n = "unloaded-" + std::to_string(id);
      out += (out.empty() ? "" : ",") + n;
    }
    return out;
  };
  const std::string labels = "running_lora_adapters=\"" + label_value(names(use.running)) +
                             "\",waiting_lora_adapters=\"" + label_value(names(use.waiting)) + "\",max_lora=\"" +
                             std::to_string(loaded.size()) + "\"";
  w.gauge("vllm:lora_requests_info", "Running and waiting LoRA adapters (labels); the value is the report's time.",
          {{labels, static_cast<double>(unix_now())}});
}

}  // namespace

std::string metrics_text(const ServedModel* served, const http::Stats& http_stats,
                         const std::map<int, uint64_t>& responses_by_status) {
  Writer w;
  if (served == nullptr) {
    write_http(w, http_stats, responses_by_status);
    write_process(w);
    return w.take();
  }
  const EngineStats s = served->engine().stats();
  write_requests(w, s);
  write_http(w, http_stats, responses_by_status);
  write_engine(w, s);
  if (const auto& draft = served->engine().options().draft) {
    // The same counts, labelled with the draft source that made them (one per served model).
    const std::string label = "source=\"" + label_value(draft->name()) + "\"";
    w.counter("specula_spec_source_draft_tokens_total", "Drafted tokens, by draft source (ngram, draft-model, eagle3, mtp).",
              {{label, d(s.drafted)}});
    w.counter("specula_spec_source_accepted_tokens_total", "Accepted drafted tokens, by draft source.",
              {{label, d(s.accepted)}});
    w.gauge("specula_spec_source_acceptance_rate", "Accepted / drafted tokens since start, by draft source.",
            {{label, s.drafted > 0 ? d(s.accepted) / d(s.drafted) : 0.0}});
  }
  if (const auto& cache = served->options().engine.prompt_cache) write_prompt_cache(w, cache->stats());
  write_lora(w, *served);
  write_process(w);
  write_histograms(w, s);
  write_llamacpp(w, s, served->generation_totals());
  write_router_gauges(w, s, served->id());
  return w.take();
}

std::string models_metrics_text(const std::vector<ModelRegistry::Info>& models) {
  Writer w;
  Writer::Labelled loaded, bytes, requests;
  for (const ModelRegistry::Info& m : models) {
    const std::string label = "model=\"" + label_value(m.name) + "\"";
    loaded.emplace_back(label, m.state == "loaded" ? 1.0 : 0.0);
    bytes.emplace_back(label, d(m.bytes));
    requests.emplace_back(label, d(m.in_use));
  }
  w.gauge("specula_model_loaded", "1 when the model is loaded (several models: --models-dir, -m NAME=PATH).", loaded);
  w.gauge("specula_model_bytes", "The model's size against --models-memory: weights + KV budget (0 before its first load).",
          bytes);
  w.gauge("specula_model_requests", "Requests running on the model.", requests);
  return w.take();
}

}  // namespace specula::server
