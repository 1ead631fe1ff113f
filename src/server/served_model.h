// server/served_model.h — the model a front door serves (the HTTP server, and the library:
// capi/ hands out a ServedModel as its specula_model) and what every route shares: the
// model, its tokenizer, chat template and tool-call format, its sampling and embedding
// pooling defaults, the engine that runs it, and caches built on first use (the grammar
// vocabulary, DRY's breaker ids per list); a source of random seeds; and the stop flag
// handlers poll while they wait.
// Created once (open_served_model, server/model_config.h); shared by every handler thread
// and library call: the members are set before the first request and never change, the
// caches take their own locks.
// Owns: the model (last to go), the tokenizer, the template, the engine.
// Does not: route, parse or answer requests (server.cpp and the API family files do).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/reasoning.h"
#include "chat/tool_calls.h"
#include "engine/engine.h"
#include "grammar/constraint.h"
#include "model/model.h"
#include "sampling/params.h"
#include "server/lora_adapters.h"
#include "server/options.h"
#include "specula/status.h"
#include "tokenizer/tokenizer.h"

namespace specula::server {

class ServedModel {
 public:
  // Builds tokenizer, chat template and engine for `model`, and loads options.lora. Errors:
  // tokenizer or template errors, engine options, an adapter that does not load. options.model_id is filled in when empty.
  static Result<std::unique_ptr<ServedModel>> create(std::unique_ptr<Model> model, ServerOptions options);
  ~ServedModel();

  const ServerOptions& options() const { return options_; }
  const std::string& id() const { return options_.model_id; }
  // Whether `name` is this model's id or one of its aliases (--alias).
  bool is_own_name(const std::string& name) const;
  Model& model() const { return *model_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tok_; }
  const chat::ChatTemplate* chat_template() const { return chat_template_ ? &*chat_template_ : nullptr; }
  const std::string& chat_template_origin() const { return chat_template_origin_; }  // "model metadata" / "file"
  chat::ToolFormat tool_format() const { return tool_format_; }
  // The template's thinking format (chat/reasoning.h; kNone: not a reasoning template).
  chat::ReasoningFormat reasoning_format() const { return reasoning_format_; }
  // The Responses API's store (ServerOptions::responses).
  ResponseStore& responses() const { return *options_.responses; }
  const SamplingDefaults& sampling_defaults() const { return sampling_defaults_; }  // generation_config.json
  const std::string& default_pooling() const { return default_pooling_; }
  Engine& engine() const { return *engine_; }
  // The LoRA adapters loaded for this model (ServerOptions::lora, then the run-time routes).
  LoraAdapters& lora() const { return lora_; }

  // Structured outputs: the vocabulary as llguidance sees it, built at the first use.
  Result<std::shared_ptr<const GrammarVocab>> grammar_vocab();
  // DRY's sequence breakers as token ids, per breaker list (one pass over the vocabulary
  // each; the last 64 lists are kept).
  std::vector<std::vector<int32_t>> dry_breaker_ids(const std::vector<std::string>& breakers);
  // A seed for a request that sent none: in [0, 2^63), so a client can send it back.
  uint64_t random_seed();

  // Set to stop (the library's close): waiting handlers cancel their requests and answer.
  std::atomic<bool> stopping{false};
  // The server's own stop flag (Server::stop(), set from a signal handler), when a server
  // serves this model; set before the first request.
  const std::atomic<bool>* also_stopping = nullptr;
  bool stop_requested() const { return stopping.load() || (also_stopping != nullptr && also_stopping->load()); }

  // Totals over the finished generations of every route, for llama-server's llamacpp:*
  // metrics: prompt tokens prefilled and served by the prompt cache, seconds of prefill
  // and of decode, tokens generated, the longest prompt + generation. Thread-safe.
  struct GenerationTotals {
    uint64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0, finished = 0;
    double prefill_seconds = 0, decode_seconds = 0;
    int64_t max_tokens_seen = 0;
  };
  void add_finished(const RequestSummary& s);
  GenerationTotals generation_totals() const;
  int64_t start_time_unix() const { return start_time_unix_; }

 private:
  ServedModel() = default;
  ServerOptions options_;
  std::unique_ptr<Model> model_;  // declared before the engine: goes last
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::optional<chat::ChatTemplate> chat_template_;
  std::string chat_template_origin_;
  chat::ToolFormat tool_format_ = chat::ToolFormat::kNone;
  chat::ReasoningFormat reasoning_format_ = chat::ReasoningFormat::kNone;
  SamplingDefaults sampling_defaults_;
  std::string default_pooling_ = "mean";
  std::unique_ptr<Engine> engine_;
  mutable LoraAdapters lora_;

  std::mutex grammar_mu_;
  std::shared_ptr<const GrammarVocab> grammar_vocab_;
  std::mutex dry_mu_;
  std::map<std::vector<std::string>, std::vector<std::vector<int32_t>>> dry_breakers_;
  std::mutex seed_mu_;
  std::mt19937_64 seed_rng_{std::random_device{}()};
  mutable std::mutex totals_mu_;
  GenerationTotals totals_;
  int64_t start_time_unix_ = 0;
};

}  // namespace specula::server
