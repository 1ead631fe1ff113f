// cli/kld.cpp — see kld.h; and the `specula kld` verb that runs it.
#include "cli/kld.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "decoding/draft.h"

namespace specula {
namespace {

// log-softmax of n logits into out (double).
void log_softmax(const float* l, int64_t n, std::vector<double>& out) {
  out.resize(static_cast<size_t>(n));
  double mx = l[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(l[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(l[i]) - mx);
  const double lse = mx + std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<double>(l[i]) - lse;
}

}  // namespace

Result<KldResult> kl_divergence(Model& model, const tokenizer::Tokenizer& tok, const KldOptions& o) {
  std::ifstream in(o.text_file, std::ios::binary);
  if (!in) return Status::error("[kld] cannot read " + o.text_file);
  std::stringstream ss;
  ss << in.rdbuf();
  // As llama-perplexity: the whole text with BOS first, then chunks whose first token is BOS.
  const std::vector<int32_t> ids = tok.encode(ss.str(), /*add_special=*/true, /*parse_special=*/false);
  if (o.n_ctx < 4) return Status::error("[kld] chunk size " + std::to_string(o.n_ctx) + " is too small");
  int64_t n_chunks = static_cast<int64_t>(ids.size()) / o.n_ctx;
  if (o.max_chunks > 0) n_chunks = std::min(n_chunks, o.max_chunks);
  if (n_chunks == 0)
    return Status::error("[kld] " + o.text_file + " has " + std::to_string(ids.size()) +
                         " tokens, fewer than one chunk of " + std::to_string(o.n_ctx));
  Model& bm = o.base_model != nullptr ? *o.base_model : model;
  if (o.base_model != nullptr) SPECULA_RETURN_IF_ERROR(check_same_vocabulary(bm, model));
  auto base = new_state(bm, CacheOptions{}, o.n_ctx);
  if (!base) return base.status();
  auto test = new_state(model, o.test, o.n_ctx);
  if (!test) return test.status();
  for (StateRows* s : {&*base, &*test}) {
    SPECULA_RETURN_IF_ERROR(s->reserve(1));
    auto row = s->new_row();
    if (!row) return row.status();
    s->insert(std::move(row).value());
  }
  const int64_t V = model.info().n_vocab, E = model.info().n_embd, Eb = bm.info().n_embd;
  const int32_t bos = tok.vocab().add_bos() ? tok.vocab().bos_id() : -1;
  const int64_t first = o.n_ctx / 2;
  constexpr int64_t kBlock = 32;  // positions projected at once
  std::vector<double> klds;
  double nll_base = 0, nll_test = 0;
  int64_t same = 0;
  Tensor hb, ht;
  std::vector<float> lb(static_cast<size_t>(kBlock * V)), lt(static_cast<size_t>(kBlock * V));
  const int32_t row[1] = {0};
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> chunk(ids.begin() + c * o.n_ctx, ids.begin() + (c + 1) * o.n_ctx);
    if (bos >= 0) chunk[0] = bos;
    for (auto [m, s, h] : {std::tuple{&bm, &*base, &hb}, std::tuple{&model, &*test, &ht}}) {
      SPECULA_RETURN_IF_ERROR(s->reset(0));
      SPECULA_RETURN_IF_ERROR(m->forward(Batch{1, o.n_ctx, chunk.data(), row}, *s, *h));
    }
    for (int64_t j0 = first; j0 < o.n_ctx - 1; j0 += kBlock) {
      const int64_t n = std::min(kBlock, o.n_ctx - 1 - j0);
      bm.project_logits(hb.data() + j0 * Eb, n, lb.data());
      model.project_logits(ht.data() + j0 * E, n, lt.data());
      // Positions in parallel (each thread its own softmax buffers), reduced in order.
      std::vector<double> kl(static_cast<size_t>(n)), nb(static_cast<size_t>(n)), nt(static_cast<size_t>(n));
      std::vector<uint8_t> agree(static_cast<size_t>(n));
      model.pool()->run([&](int ith, int nth) {
        std::vector<double> pb, pt;
        auto [k0, k1] = ThreadPool::split(n, ith, nth);
        for (int64_t k = k0; k < k1; ++k) {
          const float* b = lb.data() + k * V;
          const float* t = lt.data() + k * V;
          log_softmax(b, V, pb);
          log_softmax(t, V, pt);
          // llama-perplexity's sum: tokens whose base log-probability is below -16 (p < 1.1e-7)
          // are left out (with vocabularies of 150k-260k tokens their tail adds noise).
          double d = 0;
          for (int64_t i = 0; i < V; ++i)
            if (pb[i] > -16.0) d += std::exp(pb[i]) * (pb[i] - pt[i]);
          kl[k] = std::max(0.0, d);
          const int32_t next = chunk[j0 + k + 1];
          nb[k] = -pb[next];
          nt[k] = -pt[next];
          agree[k] = (std::max_element(b, b + V) - b) == (std::max_element(t, t + V) - t);
        }
      });
      for (int64_t k = 0; k < n; ++k) {
        klds.push_back(kl[k]);
        nll_base += nb[k];
        nll_test += nt[k];
        same += agree[k];
      }
    }
  }
  KldResult r;
  r.chunks = n_chunks;
  r.positions = static_cast<int64_t>(klds.size());
  for (double k : klds) r.mean_kld += k;
  r.mean_kld /= static_cast<double>(r.positions);
  for (double k : klds) r.sd_kld += (k - r.mean_kld) * (k - r.mean_kld);
  r.sd_kld = std::sqrt(r.sd_kld / std::max<double>(1, r.positions - 1));
  std::vector<double> sorted = klds;
  std::sort(sorted.begin(), sorted.end());
  r.median_kld = sorted[sorted.size() / 2];
  r.p99_kld = sorted[std::min(sorted.size() - 1, static_cast<size_t>(0.99 * static_cast<double>(sorted.size())))];
  r.max_kld = sorted.back();
  r.same_top = static_cast<double>(same) / static_cast<double>(r.positions);
  r.ppl_base = std::exp(nll_base / static_cast<double>(r.positions));
  r.ppl_test = std::exp(nll_test / static_cast<double>(r.positions));
  r.bytes_per_token_base = base->bytes_per_token();
  r.bytes_per_token_test = test->bytes_per_token();
  return r;
}

}  // namespace specula

// ---------------------------------------------------------------- the verb

namespace specula::cli {
namespace {

struct KldArgs {
  std::string quantize;
  std::string base_model, base_quantize;  // --base-model, --base-quantize
  std::string model, file;
  int64_t ctx = 512, chunks = 0;
  int threads = 0;
  bool json = false;
  CacheArgs cache;
};

void print_kld(const KldArgs& a, const Loaded& l, bool with_base, const KldResult& r, double seconds) {
  std::string type = a.cache.type_k + "/" + a.cache.type_v + (a.cache.delay > 0 ? " delay " + std::to_string(a.cache.delay) : "");
  if (with_base) type = "f16/f16";
  const std::string base = with_base ? "base model " + a.base_model + (a.base_quantize.empty() ? "" : " (" + a.base_quantize + ")")
                                     : std::string("f16/f16");
  std::printf("model %s%s, KV cache %s vs %s, %lld chunks of %lld tokens, %lld positions scored (%.1f s)\n",
              l.model->info().name.c_str(), a.quantize.empty() ? "" : (" (" + a.quantize + " at load)").c_str(),
              type.c_str(), base.c_str(), static_cast<long long>(r.chunks), static_cast<long long>(a.ctx),
              static_cast<long long>(r.positions), seconds);
  std::printf("KV bytes per token: %.0f (f16 %.0f)\n", r.bytes_per_token_test, r.bytes_per_token_base);
  std::printf("Mean KLD: %.6f ± %.6f\nMedian KLD: %.6f\n99%% KLD: %.6f\nMax KLD: %.6f\nSame top: %.3f%%\n", r.mean_kld,
              r.sd_kld / std::sqrt(static_cast<double>(r.positions)), r.median_kld, r.p99_kld, r.max_kld,
              100.0 * r.same_top);
  std::printf("PPL base: %.4f, PPL %s: %.4f\n", r.ppl_base, with_base ? "model" : type.c_str(), r.ppl_test);
  if (a.json) {
    nlohmann::json j = {{"model", l.model->info().name}, {"cache", type}, {"chunks", r.chunks}, {"ctx", a.ctx},
                        {"positions", r.positions}, {"mean_kld", r.mean_kld},
                        {"mean_kld_se", r.sd_kld / std::sqrt(static_cast<double>(r.positions))},
                        {"median_kld", r.median_kld}, {"p99_kld", r.p99_kld}, {"max_kld", r.max_kld},
                        {"same_top", r.same_top}, {"ppl_base", r.ppl_base}, {"ppl_test", r.ppl_test},
                        {"kv_bytes_per_token", r.bytes_per_token_test}, {"kv_bytes_per_token_f16", r.bytes_per_token_base}};
    std::printf("%s\n", j.dump().c_str());
  }
}

int run_kld(const RuntimeConfig& config, const KldArgs& a) {
  auto l = load(config, a.model, a.threads, a.quantize);
  if (!l) return fail(l.message());
  KldOptions o;
  o.text_file = a.file;
  o.n_ctx = a.ctx;
  o.max_chunks = a.chunks;
  o.test = a.cache.options();
  std::optional<Loaded> base;
  if (!a.base_model.empty()) {
    auto b = load(config, a.base_model, a.threads, a.base_quantize);
    if (!b) return fail(b.message());
    base = std::move(b).value();
    o.base_model = base->model.get();
  }
  const double t0 = now_seconds();
  auto r = kl_divergence(*l->model, *l->tok, o);
  if (!r) return fail(r.message());
  print_kld(a, *l, base.has_value(), *r, now_seconds() - t0);
  return 0;
}

}  // namespace

Verb add_kld(CLI::App& app, const RuntimeConfig& config) {
  auto a = std::make_shared<KldArgs>();
  CLI::App* cmd = app.add_subcommand(
      "kld", "KL divergence of a KV cache type vs f16 over a text (as llama-perplexity --kl-divergence)");
  cmd->add_option("-m,--model", a->model, kModelHelp);
  cmd->add_option("-f,--file", a->file, "Text file")->required();
  cmd->add_option("--base-model", a->base_model,
                  "Compare the model's weights against this model's (same vocabulary), e.g. a bf16 folder against "
                  "itself with --quantize q4_k, instead of KV cache types against f16");
  cmd->add_option("--base-quantize", a->base_quantize, "--quantize for the base model")->check(CLI::IsMember({"q8_0", "q4_k"}));
  cmd->add_option("-c,--ctx", a->ctx, "Tokens per chunk; the second half of each is scored (default 512)")
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 20));
  cmd->add_option("--chunks", a->chunks, "Chunks to evaluate (default: all)")->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  add_quantize_option(cmd, a->quantize);
  cmd->add_option("-t,--threads", a->threads, "Threads (default: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_flag("--json", a->json, "Also print one JSON line");
  add_cache_options(cmd, a->cache, false);
  return Verb{cmd, [a, &config] { return run_kld(config, *a); }};
}

}  // namespace specula::cli
