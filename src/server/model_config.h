// server/model_config.h — what a front door says about the model it serves, in one
// struct: the CLI's `specula serve` flags and the library's specula_model_params
// (include/specula/specula.h) both fill a ModelConfig, and open_served_model() turns it
// into the engine's options — rows, context and KV budget, cache types, step budget and
// queue, speculation (draft source), prompt cache (RAM and disk tiers, checkpoints) — and
// the ServedModel every route and every library call runs on. One set-up, so the server
// and the library cannot drift apart.
// Does not: find a model by name (the front door resolves paths), listen, or parse flags.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "model/model.h"
#include "server/options.h"
#include "server/served_model.h"
#include "specula/status.h"
#include "state/layout.h"

namespace specula::server {

struct ModelConfig {
  std::string model_id;                      // the id requests name; "" -> the file or folder name (no .gguf)
  // llama-server's --alias a,b,c: every name; model_id is then the first in byte order (as
  // llama-server picks it). --tags: labels /models lists. Neither changes which model answers.
  std::vector<std::string> aliases, tags;
  std::optional<std::string> chat_template;  // Jinja source replacing the model's own
  int parallel = 4;                          // requests decoded together (state rows), 1..256
  // Total tokens all requests hold together (llama-server's -c); one request may use all
  // of it, at most the model's training context. 0: 4096 x parallel; -1: the training
  // context (4096 when the model does not say) x parallel.
  int64_t ctx = 0;
  // llama-server's split context (its default without --kv-unified): one request may hold
  // at most ctx / parallel tokens. false (specula's default): one request may use all of
  // ctx while the others' tokens leave room.
  bool ctx_split = false;
  CacheOptions cache;                        // K/V cache types, delayed quantization
  int64_t kv_budget = 0;                     // bytes of state all rows may hold; 0: from ctx
  int64_t step_tokens = 512;                 // tokens per engine step (at least `parallel`)
  int queue = 64;                            // requests waiting for a row beyond `parallel`
  // Speculative decoding: "ngram", "draft" (needs draft_model), "eagle3" (draft_model is an
  // EAGLE-3 head), "mtp" (the model's own MTP layer), "none", or "" (draft when a draft
  // model is given).
  std::string spec;
  std::string draft_model;                   // path of the draft model (same vocabulary)
  int spec_depth = 4, spec_max_batch = 2;
  bool spec_rejection = false;               // rejection sampling at temperature > 0 (draft model)
  // Prompt cache: RAM tier in MiB (-1: default_prompt_cache_ram_mib(); 0: off), disk tier
  // folder ("" off) and size (0: 4 x RAM, at least 1 GiB), a checkpoint every N prompt
  // tokens for ring/recurrent layers, and generation checkpoints every N tokens.
  int64_t cache_ram_mib = -1, cache_disk_mib = 0;
  std::string cache_dir;
  int64_t cache_checkpoint = 1024, generation_checkpoint = 0;
  std::string pooling;                       // embeddings: "mean" | "last" | "" (the model's)
};

// Fills base's model and engine fields from `config` for `model` (loaded from `path`),
// builds the draft source and the prompt cache, and creates the ServedModel. Errors:
// bad values (kInvalidArgument, naming the field), a draft model that does not load or
// whose vocabulary differs, a prompt cache folder that cannot be used, engine options.
Result<std::unique_ptr<ServedModel>> open_served_model(std::unique_ptr<Model> model, const std::string& path,
                                                       const ModelConfig& config, ServerOptions base);

}  // namespace specula::server
