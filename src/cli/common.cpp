// cli/common.cpp — see common.h.
#include "cli/common.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <random>

#include "cli/hub.h"
#include "model/lora.h"
#include "sampling/sampler.h"
#include "state/kv_codec.h"
#include "tokenizer/hf_tokenizer.h"

namespace specula::cli {

int fail(const std::string& msg) {
  std::fprintf(stderr, "specula: %s\n", msg.c_str());
  return 1;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Result<std::string> resolve_model(const RuntimeConfig& config, const std::string& m) {
  std::error_code ec;
  if (!m.empty()) {
    if (std::filesystem::exists(m, ec)) return m;
    if (auto snap = hub::cached_snapshot(m); snap) return *snap;  // ORG/NAME pulled from the Hub
    return Status::not_found("[cli] model file not found: " + m +
                             (hub::parse_repo_id(m) ? " (run specula pull " + m + ")" : ""));
  }
  const std::string p = config.models_dir + "/" + kDefaultModelFile;
  if (!std::filesystem::exists(p, ec))
    return Status::not_found("[cli] default model not found at " + p +
                             " (run ./scripts/fetch_model.sh, or pass -m FILE)");
  return p;
}

namespace {
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
}  // namespace

Result<Loaded> load(const RuntimeConfig& config, const std::string& model_arg, int threads, const std::string& quantize,
                    bool with_tokenizer) {
  auto path = resolve_model(config, model_arg);
  if (!path) return path.status();
  const double t0 = now_seconds();
  ModelOptions mo;
  mo.n_threads = threads;
  mo.quantize = quantize;
  auto model = load_model(*path, mo);
  if (!model) return model.status();
  note_quantized((*model)->info());
  Loaded l;
  if (with_tokenizer) {
    auto tok = tokenizer::load_tokenizer((*model)->file());
    if (!tok) return tok.status();
    l.tok = std::move(tok).value();
  }
  l.model = std::move(model).value();
  l.load_seconds = now_seconds() - t0;
  l.path = *path;
  return l;
}

void add_quantize_option(CLI::App* cmd, std::string& quantize) {
  cmd->add_option("--quantize", quantize,
                  "Quantize float (F32/F16/BF16) weights at load: q8_0 or q4_k (e.g. a bf16 Hugging Face folder)")
      ->check(CLI::IsMember({"q8_0", "q4_k"}));
}

CacheOptions CacheArgs::options() const {
  CacheOptions o;
  o.type_k = type_k;
  o.type_v = type_v;
  o.delay = delay;
  return o;
}

void add_cache_options(CLI::App* cmd, CacheArgs& c, bool budget) {
  std::string types;
  for (const auto& n : kv_codec_names()) types += (types.empty() ? "" : ", ") + n;
  cmd->add_option("--cache-type-k", c.type_k, "KV cache type for K (-ctk): " + types + " (default f16)");
  cmd->add_option("--cache-type-v", c.type_v, "KV cache type for V (-ctv): " + types + " (default f16)");
  cmd->add_option("--kv-delay", c.delay,
                  "Delayed quantization: keep each request's newest N positions in f16, older ones in the "
                  "K/V cache types (default 0 = off)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  if (budget)
    cmd->add_option("--kv-budget", c.budget,
                    "Bytes of KV cache (and other model state) all requests may hold together; admission waits "
                    "when it is full (default: from --ctx)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 50));
}

// ---------------------------------------------------------------- SamplingFlags

namespace {
// A range validator for a field: [lo, hi], lo excluded when lo_open.
CLI::Validator field_range(const SamplingField& f) {
  return CLI::Validator(
      [&f](std::string& in) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(in.c_str(), &end);
        if (end == in.c_str() || *end != '\0' || !std::isfinite(v) || v < f.lo || v > f.hi || (f.lo_open && v == f.lo))
          return "Value " + in + " not in range " + (f.lo_open ? "(" : "[") + CLI::detail::to_string(f.lo) + " - " +
                 CLI::detail::to_string(f.hi) + "]";
        return std::string();
      },
      "", "RANGE");
}
}  // namespace

void SamplingFlags::add(CLI::App* cmd) {
  for (const SamplingField& f : sampling_fields()) {
    if (f.cli == nullptr) continue;
    std::string help = f.help;
    const bool model_default = SamplingDefaults::covers(f.name);
    if (f.kind == SamplingKind::kSeed)
      help += " (default: random, so each run differs)";
    else if (f.kind != SamplingKind::kTokenBias)
      help += std::string(" (default: ") + (model_default ? "the model's, else " : "") + f.text(SamplingParams{}) + ")";
    CLI::Option* o = nullptr;
    std::visit(
        [&](auto m) {
          using T = std::remove_reference_t<decltype(params_.*m)>;
          if constexpr (std::is_same_v<T, std::vector<std::pair<int32_t, float>>>) {
            o = cmd->add_option(f.cli, logit_bias_, help);
          } else {
            o = cmd->add_option(f.cli, params_.*m, help);
          }
        },
        f.member);
    if (f.kind == SamplingKind::kFloat || f.kind == SamplingKind::kInt) o->check(field_range(f));
    options_.emplace_back(&f, o);
  }
  cmd->add_flag("--greedy", greedy_, "Greedy decoding (same as --temp 0)");
}

Result<SamplingParams> SamplingFlags::resolve(const SamplingDefaults& model_defaults,
                                              const tokenizer::Tokenizer* tok) const {
  SamplingParams p = params_;
  model_defaults.apply(p);
  for (const auto& [f, o] : options_)
    if (o->count() > 0) f->copy(params_, p);  // given on the command line: the flag wins
  p.logit_bias.clear();
  for (const std::string& s : logit_bias_) {
    // llama.cpp's TOKEN_ID(+/-)BIAS, e.g. 15043+1, 15043-1, 15043-inf (bans the token).
    const size_t k = s.find_first_of("+-", 1);
    char* end = nullptr;
    const std::string id_text = k == std::string::npos ? "" : s.substr(0, k);
    const bool digits = !id_text.empty() && id_text.find_first_not_of("0123456789") == std::string::npos;
    const long long id = digits ? std::strtoll(id_text.c_str(), nullptr, 10) : -1;
    const std::string value = k == std::string::npos ? "" : s.substr(k + 1);
    double bias = value == "inf" ? std::numeric_limits<double>::infinity() : std::strtod(value.c_str(), &end);
    if (k != std::string::npos && s[k] == '-') bias = -bias;
    const bool ok = id >= 0 && id <= std::numeric_limits<int32_t>::max() && !value.empty() &&
                    (value == "inf" ? bias < 0 : (*end == '\0' && bias >= -100 && bias <= 100));
    if (!ok)
      return Status::invalid_argument("[cli] --logit-bias " + s +
                                      ": want TOKEN_ID+BIAS or TOKEN_ID-BIAS, BIAS in [0, 100] or -inf (a ban)");
    p.logit_bias.push_back({static_cast<int32_t>(id), static_cast<float>(bias)});
  }
  for (const auto& [f, o] : options_) {
    if (f->kind != SamplingKind::kStrings || o->count() == 0) continue;
    auto& list = p.*std::get<std::vector<std::string> SamplingParams::*>(f->member);
    if (list == std::vector<std::string>{"none"}) {
      list.clear();  // llama.cpp: "none" clears the list
      continue;
    }
    if (list.size() > 64 || std::count(list.begin(), list.end(), std::string()) > 0)
      return Status::invalid_argument(std::string("[cli] ") + f->cli + ": at most 64 non-empty strings");
  }
  normalize_request_sampling(p);
  // DRY's breakers as token ids, as the server derives them (sampler.h).
  if (p.dry_multiplier > 0.0f && tok != nullptr) p.dry_breaker_ids = dry_breaker_ids_from_strings(p.dry_sequence_breakers, *tok);
  if (greedy_) p.temperature = 0.0f;
  bool seed_given = false;
  for (const auto& [f, o] : options_) seed_given |= f->kind == SamplingKind::kSeed && o->count() > 0;
  if (!seed_given) p.seed = std::random_device{}();
  return p;
}

void LoraArgs::add_options(CLI::App* cmd) {
  cmd->add_option("--lora", paths,
                  "A LoRA adapter (llama.cpp's GGUF LoRA file or a PEFT folder) applied without merging; repeat for "
                  "several (their deltas add)");
  cmd->add_option("--lora-scale", scale, "Scale of every --lora adapter (default 1; llama.cpp's --lora-scaled)")
      ->check(CLI::Range(-10000.0, 10000.0))
      ->needs(cmd->get_option("--lora"));
}

Result<std::shared_ptr<const LoraSet>> LoraArgs::load(const Model& model) const {
  if (!std::isfinite(scale)) return Status::invalid_argument("[cli] --lora-scale must be a finite number");
  if (paths.empty()) return std::shared_ptr<const LoraSet>();
  auto set = std::make_shared<LoraSet>();
  for (const std::string& path : paths) {
    auto adapter = model.load_lora(path);
    if (!adapter) return adapter.status();
    std::fprintf(stderr, "[specula] LoRA %s: %lld projections, rank %lld, alpha %g, scale %g\n", path.c_str(),
                 static_cast<long long>((*adapter)->n_pairs()), static_cast<long long>((*adapter)->max_rank()),
                 static_cast<double>((*adapter)->alpha()), static_cast<double>(scale));
    set->adapters.push_back({std::move(adapter).value(), scale});
  }
  return std::shared_ptr<const LoraSet>(std::move(set));
}

}  // namespace specula::cli
