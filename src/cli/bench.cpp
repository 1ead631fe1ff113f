// cli/bench.cpp — `specula bench`: llama-bench style speed test on random tokens: one
// prefill of -p tokens (logits for the last one) and -n decodes of -b rows (logits for
// each), -r repetitions after a warm-up, straight on the model (no engine, no sampling);
// then the weight bytes a decode step reads against this machine's measured read
// bandwidth.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "model/lora.h"

namespace specula::cli {
namespace {

struct BenchArgs {
  std::string quantize;
  std::string model;
  int n_prompt = 512, n_gen = 128, threads = 0, reps = 3, batch = 1;
  int64_t depth = 0;  // context already in the rows before the decode test
  bool json = false;
  CacheArgs cache;
  std::vector<std::string> lora;  // --lora: row r runs with adapter r % n
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

// Runs the timed loops over one state of `batch` rows.
class Bench {
 public:
  Bench(const BenchArgs& a, Model& model, StateRows& cache, std::vector<LoraSet> lora)
      : a_(a), model_(model), cache_(cache), B_(a.batch), rng_(1234), lora_(std::move(lora)) {
    for (int32_t r = 0; r < B_ && !lora_.empty(); ++r) row_lora_.push_back(&lora_[static_cast<size_t>(r) % lora_.size()]);
    const int64_t n_vocab = model.info().n_vocab;
    prompt_.resize(static_cast<size_t>(std::max<int64_t>({1, a.n_prompt, a.depth})));
    for (auto& t : prompt_) t = static_cast<int32_t>(rng_() % static_cast<uint32_t>(n_vocab));
    logits_.resize(static_cast<size_t>(n_vocab) * B_);
    all_rows_.resize(static_cast<size_t>(B_));
    toks_.resize(static_cast<size_t>(B_));
    for (int32_t r = 0; r < B_; ++r) all_rows_[r] = r;
  }
  // Seconds of one prefill of n_prompt tokens in row 0.
  Result<double> prefill() {
    SPECULA_RETURN_IF_ERROR(cache_.reset(0));
    const int32_t rows[1] = {0};
    const double t0 = now_seconds();
    Batch b{1, static_cast<int64_t>(a_.n_prompt), prompt_.data(), rows};
    b.lora = lora_of(0);
    SPECULA_RETURN_IF_ERROR(model_.forward(b, cache_, hidden_));
    const int64_t E = model_.info().n_embd;
    model_.project_logits(hidden_.data() + (hidden_.dim(0) - 1) * E, 1, logits_.data());
    return now_seconds() - t0;
  }
  // Seconds of n_gen steps of B rows together (one forward + one logits projection per
  // step), after a context of `depth` tokens in each (filled in chunks, not timed).
  Result<double> decode() {
    const int64_t n_vocab = model_.info().n_vocab;
    for (int32_t r = 0; r < B_; ++r) {
      SPECULA_RETURN_IF_ERROR(cache_.reset(r));
      for (int64_t off = 0; off < a_.depth; off += 512) {
        const int32_t row[1] = {r};
        Batch b{1, std::min<int64_t>(512, a_.depth - off), prompt_.data() + off, row};
        b.lora = lora_of(r);
        SPECULA_RETURN_IF_ERROR(model_.forward(b, cache_, hidden_));
      }
      toks_[r] = prompt_[0];
    }
    const double t0 = now_seconds();
    for (int i = 0; i < a_.n_gen; ++i) {
      Batch b{B_, 1, toks_.data(), all_rows_.data()};
      b.lora = lora_of(0);
      SPECULA_RETURN_IF_ERROR(model_.forward(b, cache_, hidden_));
      model_.project_logits(hidden_.data(), B_, logits_.data());
      for (auto& t : toks_) t = static_cast<int32_t>(rng_() % static_cast<uint32_t>(n_vocab));
    }
    return now_seconds() - t0;
  }

 private:
  // Batch::lora for rows starting at row r (null without adapters).
  const LoraSet* const* lora_of(int32_t r) const { return row_lora_.empty() ? nullptr : row_lora_.data() + r; }
  const BenchArgs& a_;
  Model& model_;
  StateRows& cache_;
  int32_t B_;
  std::mt19937 rng_;
  std::vector<int32_t> prompt_, all_rows_, toks_;
  std::vector<float> logits_;
  Tensor hidden_;
  std::vector<LoraSet> lora_;
  std::vector<const LoraSet*> row_lora_;
};

// Mean and standard deviation.
std::pair<double, double> mean_sd(const std::vector<double>& v) {
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  for (double x : v) s += (x - m) * (x - m);
  return {m, v.size() > 1 ? std::sqrt(s / static_cast<double>(v.size() - 1)) : 0.0};
}

// The decode step's bytes against the machine's bandwidth (one row).
void report_bandwidth(const Model& model, int threads, nlohmann::json& out) {
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

Result<StateRows> bench_state(const BenchArgs& a, const Model& model) {
  auto state = new_state(model, a.cache.options(), a.depth + std::max(a.n_prompt, 1) + a.n_gen + 16);
  if (!state) return state.status();
  SPECULA_RETURN_IF_ERROR(state->reserve(a.batch));
  for (int32_t r = 0; r < a.batch; ++r) {
    auto row = state->new_row();
    if (!row) return row.status();
    state->insert(std::move(row).value());
  }
  return state;
}

int run_bench(const RuntimeConfig& config, const BenchArgs& a) {
  if (a.n_prompt == 0 && a.n_gen == 0) return fail("[cli] bench: nothing to measure (-p and -n are both 0)");
  auto l = load(config, a.model, a.threads, a.quantize, /*with_tokenizer=*/false);
  if (!l) return fail(l.message());
  Model& model = *l->model;
  auto state = bench_state(a, model);
  if (!state) return fail(state.message());
  std::vector<LoraSet> lora;
  for (const std::string& path : a.lora) {
    auto adapter = model.load_lora(path);
    if (!adapter) return fail(adapter.message());
    std::printf("LoRA %s: %lld projections, rank %lld\n", path.c_str(), static_cast<long long>((*adapter)->n_pairs()),
                static_cast<long long>((*adapter)->max_rank()));
    lora.push_back(LoraSet{{LoraWeight{std::move(adapter).value(), 1.0f}}});
  }
  Bench bench(a, model, *state, std::move(lora));
  if (auto w = bench.decode(); !w) return fail(w.message());  // warm-up
  std::vector<double> pp, tg;
  for (int r = 0; r < a.reps; ++r) {
    if (a.n_prompt > 0) {
      auto t = bench.prefill();
      if (!t) return fail(t.message());
      pp.push_back(a.n_prompt / *t);
    }
    if (a.n_gen > 0) {
      auto t = bench.decode();
      if (!t) return fail(t.message());
      tg.push_back(static_cast<double>(a.n_gen) * a.batch / *t);
    }
  }
  const int threads = a.threads > 0 ? a.threads : default_thread_count();
  const char* name = model.info().name.c_str();
  nlohmann::json out = {{"model", model.info().name}, {"threads", threads}, {"isa", kernels::active().isa},
                        {"cpu_features", kernels::cpu_features()}, {"packed_bytes", model.info().packed_bytes},
                        {"decode_prefetch", kernels::active().decode_prefetch},
                        {"reps", a.reps}, {"kv_cache", state->describe()},
                        {"kv_bytes_per_token", state->bytes_per_token()}, {"depth", a.depth}};
  std::printf("kernels: %s (CPU features: %s); %s\n", kernels::active().isa, kernels::cpu_features(),
              describe_packed(model.info()).c_str());
  std::printf("KV cache: %s — %.0f bytes per token per request (+%lld fixed per request)\n", state->describe().c_str(),
              state->bytes_per_token(), static_cast<long long>(state->fixed_bytes_per_row()));
  std::printf("| model | threads | isa | test | tokens/s |\n|---|---|---|---|---|\n");
  if (!pp.empty()) {
    auto [m, s] = mean_sd(pp);
    std::printf("| %s | %d | %s | pp%d | %.2f ± %.2f |\n", name, threads, kernels::active().isa, a.n_prompt, m, s);
    out["pp"] = {{"n", a.n_prompt}, {"tokens_per_s", m}, {"sd", s}};
  }
  if (!tg.empty()) {
    auto [m, s] = mean_sd(tg);
    const std::string label = std::string(a.batch > 1 ? " x " + std::to_string(a.batch) + " rows" : "") +
                              (a.depth > 0 ? " @ d" + std::to_string(a.depth) : "");
    std::printf("| %s | %d | %s | tg%d%s | %.2f ± %.2f |\n", name, threads, kernels::active().isa, a.n_gen,
                label.c_str(), m, s);
    out["tg"] = {{"n", a.n_gen}, {"rows", a.batch}, {"tokens_per_s", m}, {"sd", s}};
  }
  if (!tg.empty() && a.batch == 1) report_bandwidth(model, threads, out);
  if (a.json) std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

}  // namespace

std::string describe_packed(const ModelInfo& info) {
  char buf[256];
  if (info.packed_tensors == 0) {
    std::snprintf(buf, sizeof buf, "weights used as stored (%s)",
                  info.repack ? "no repacked gemm for their types in this tier" : "repacking off: SPECULA_REPACK=0");
  } else {
    std::snprintf(buf, sizeof buf,
                  "weights repacked for %s: %lld tensors, %.1f MiB extra memory (packed in %.2f s); decode prefetch %s",
                  kernels::active().isa, static_cast<long long>(info.packed_tensors),
                  static_cast<double>(info.packed_bytes) / (1 << 20), info.pack_seconds,
                  kernels::active().decode_prefetch ? "on" : "off");
  }
  return buf;
}

Verb add_bench(CLI::App& app, const RuntimeConfig& config) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prefill and decode tokens/s (like llama-bench)");
  cmd->add_option("-m,--model", a->model, kModelHelp);
  cmd->add_option("-p,--n-prompt", a->n_prompt, "Prompt tokens for the prefill test (default 512)")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-n,--n-gen", a->n_gen, "Tokens for the decode test (default 128)")->check(CLI::Range(0, 1 << 20));
  add_quantize_option(cmd, a->quantize);
  cmd->add_option("-t,--threads", a->threads, "Threads (default: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("-r,--repetitions", a->reps, "Repetitions (default 3)")->check(CLI::Range(1, 1000));
  cmd->add_flag("--json", a->json, "Also print one JSON line");
  cmd->add_option("--lora", a->lora,
                  "A LoRA adapter (GGUF LoRA file or PEFT folder) at scale 1, repeatable: row r of -b runs with "
                  "adapter r mod the count");
  cmd->add_option("-b,--batch", a->batch, "Rows decoding together in the decode test (default 1)")->check(CLI::Range(1, 256));
  cmd->add_option("-d,--n-depth", a->depth, "Context tokens already in each row before the decode test (default 0)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  add_cache_options(cmd, a->cache, false);
  return Verb{cmd, [a, &config] { return run_bench(config, *a); }};
}

}  // namespace specula::cli
