// cli/common.h — what the verbs of the `specula` command share: failing with one line,
// finding and loading a model (a GGUF file, a model folder, or ORG/NAME pulled from the
// Hub), the KV cache flags (llama.cpp's names), the sampling flags (one per field of
// sampling/params.h's table that has a flag), and the verb registry main() walks.
// Every failure is one line on stderr ("specula: [component] message") and exit code 1.
// Does not: hold model math or engine logic (engine/, model/ do).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime_config.h"
#include "model/model.h"
#include "sampling/params.h"
#include "specula/status.h"
#include "state/layout.h"
#include "tokenizer/tokenizer.h"

namespace specula::cli {

// A verb of the command: its subcommand (flags added) and what runs it once parsed.
struct Verb {
  CLI::App* command = nullptr;
  std::function<int()> run;
};
// Each verb file adds its subcommand to `app`; the runner reads the parsed flags.
Verb add_generate(CLI::App& app, const RuntimeConfig& config);
Verb add_chat(CLI::App& app, const RuntimeConfig& config);
Verb add_serve(CLI::App& app, const RuntimeConfig& config);
Verb add_bench(CLI::App& app, const RuntimeConfig& config);
Verb add_kld(CLI::App& app, const RuntimeConfig& config);
Verb add_tokenize(CLI::App& app, const RuntimeConfig& config);
Verb add_info(CLI::App& app, const RuntimeConfig& config);
Verb add_pull(CLI::App& app, const RuntimeConfig& config);

constexpr const char* kDefaultModelFile = "gemma-3-270m-q4_k_m.gguf";
constexpr const char* kModelHelp =
    "GGUF file, Hugging Face / MLX folder, or ORG/NAME pulled (default: the Gemma 3 270M in the model cache)";

// Prints "specula: <msg>" on stderr; returns 1.
int fail(const std::string& msg);
double now_seconds();

// The path of `m` (a file or folder that exists, or ORG/NAME in the hub cache), or of the
// default model in config.models_dir when `m` is empty.
Result<std::string> resolve_model(const RuntimeConfig& config, const std::string& m);

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tok;  // owns its Vocab
  double load_seconds = 0;
  std::string path;
};
// Resolves and loads a model and (with_tokenizer) its tokenizer; `quantize`: --quantize
// ("" = off), the time it takes printed.
Result<Loaded> load(const RuntimeConfig& config, const std::string& model_arg, int threads,
                    const std::string& quantize = "", bool with_tokenizer = true);

// "weights repacked for <isa>: N tensors, X MiB extra memory (packed in Y s)" or why not
// (bench and info print it).
std::string describe_packed(const ModelInfo& info);

// Adds --quantize (q8_0 | q4_k).
void add_quantize_option(CLI::App* cmd, std::string& quantize);

// --lora FILE (repeatable) and --lora-scale S, shared by generate and chat.
struct LoraArgs {
  std::vector<std::string> paths;  // GGUF LoRA files or PEFT folders (model/lora.h)
  float scale = 1.0f;              // every adapter's scale
  void add_options(CLI::App* cmd);
  // The adapters loaded for `model`, each at `scale` (one line each on stderr), or null when
  // none was given. Errors: a scale that is not finite, an adapter that does not load
  // (Model::load_lora's, naming the tensor).
  Result<std::shared_ptr<const LoraSet>> load(const Model& model) const;
};

// KV cache layout flags shared by generate, chat, serve, bench, kld and info (llama.cpp's
// names; -ctk / -ctv are renamed to these before parsing).
struct CacheArgs {
  std::string type_k = "f16", type_v = "f16";
  int64_t delay = 0;
  int64_t budget = 0;  // bytes, 0 = from the context
  CacheOptions options() const;
};
void add_cache_options(CLI::App* cmd, CacheArgs& c, bool budget);

// The sampling flags: one per field of sampling_fields() with a flag, bound to `params`,
// with the field's range; plus --greedy.
class SamplingFlags {
 public:
  void add(CLI::App* cmd);
  // The request's parameters: the flags given, the model's own defaults for the others
  // (generation_config.json), the request-level rules, DRY's breakers as token ids of
  // `tok` (null: none yet — for checking the flags before a model loads), and a random
  // seed when none was given. Errors: a malformed --logit-bias or breaker list.
  Result<SamplingParams> resolve(const SamplingDefaults& model_defaults, const tokenizer::Tokenizer* tok) const;

 private:
  SamplingParams params_ = api_default_sampling(SamplingApi::kOpenAi);
  std::vector<std::pair<const SamplingField*, CLI::Option*>> options_;
  std::vector<std::string> logit_bias_;  // "ID+BIAS" / "ID-BIAS"
  bool greedy_ = false;
};

}  // namespace specula::cli
