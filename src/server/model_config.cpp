// server/model_config.cpp — see model_config.h.
#include "server/model_config.h"

#include <algorithm>
#include <filesystem>

#include "engine/setup.h"

namespace specula::server {

namespace {

Status out_of_range(const std::string& field, int64_t v, int64_t lo, int64_t hi) {
  return Status::invalid_argument("[server] " + field + " = " + std::to_string(v) + " is outside [" + std::to_string(lo) +
                                  ", " + std::to_string(hi) + "]");
}

Status check_config(const ModelConfig& c) {
  struct Range {
    const char* field;
    int64_t v, lo, hi;
  };
  // Named as specula_model_params spells them (the CLI checks its flags' ranges itself).
  const Range ranges[] = {
      {"n_parallel", c.parallel, 1, 256},
      {"n_ctx", c.ctx, -1, int64_t{1} << 26},
      {"kv_budget", c.kv_budget, 0, int64_t{1} << 50},
      {"step_tokens", c.step_tokens, 1, int64_t{1} << 20},
      {"max_queue", c.queue, 0, 100000},
      {"spec_depth", c.spec_depth, 1, 32},
      {"spec_max_batch", c.spec_max_batch, 0, 1 << 16},
      {"cache_ram_mib", c.cache_ram_mib, -1, int64_t{1} << 30},
      {"cache_disk_mib", c.cache_disk_mib, 0, int64_t{1} << 30},
      {"cache_checkpoint", c.cache_checkpoint, 0, int64_t{1} << 30},
      {"generation_checkpoint", c.generation_checkpoint, 0, int64_t{1} << 30},
  };
  for (const Range& r : ranges)
    if (r.v < r.lo || r.v > r.hi) return out_of_range(r.field, r.v, r.lo, r.hi);
  if (c.ctx > 0 && c.ctx < 16) return out_of_range("n_ctx", c.ctx, 16, int64_t{1} << 26);
  if (!c.pooling.empty() && c.pooling != "mean" && c.pooling != "last")
    return Status::invalid_argument("[server] pooling '" + c.pooling + "': use mean or last");
  return Status::ok();
}

// The prompt cache: a RAM tier and an optional disk tier; null when both are off.
Result<std::shared_ptr<PromptCache>> make_prompt_cache(const ModelConfig& c, const std::string& path, const Model& model) {
  const int64_t ram = c.cache_ram_mib < 0 ? default_prompt_cache_ram_mib() : c.cache_ram_mib;
  if (ram == 0 && c.cache_dir.empty()) {
    if (c.generation_checkpoint > 0)
      return Status::invalid_argument(
          "[server] generation checkpoints (--generation-checkpoint) need the prompt cache (--cache-ram or --cache-dir)");
    return std::shared_ptr<PromptCache>();
  }
  PromptCacheOptions po;
  po.ram_bytes = ram << 20;
  po.dir = c.cache_dir;
  po.disk_bytes = c.cache_disk_mib << 20;
  po.fingerprint = prompt_cache_fingerprint(path, model, c.cache);
  auto pc = PromptCache::create(po);
  if (!pc) return pc.status();
  return std::shared_ptr<PromptCache>(std::move(pc).value());
}

}  // namespace

Result<std::unique_ptr<ServedModel>> open_served_model(std::unique_ptr<Model> model, const std::string& path,
                                                       const ModelConfig& c, ServerOptions so) {
  if (model == nullptr) return Status::invalid_argument("[server] no model");
  SPECULA_RETURN_IF_ERROR(check_config(c));
  so.model_id = c.model_id.empty() ? std::filesystem::path(path).stem().string() : c.model_id;
  so.model_aliases = c.aliases;
  so.model_tags = c.tags;
  so.chat_template = c.chat_template;
  so.model_path = path;
  so.pooling = c.pooling;
  // The context is the total of all requests' tokens (llama-server's -c): the KV budget
  // holds that many tokens, and one request may use up to all of it (at most the model's
  // training context).
  const int64_t n_ctx_train = model->info().n_ctx_train;
  const int64_t per_row = c.ctx < 0 && n_ctx_train > 0 ? n_ctx_train : 4096;
  const int64_t total_ctx = c.ctx > 0 ? c.ctx : per_row * c.parallel;
  EngineOptions& eo = so.engine;
  eo.n_rows = c.parallel;
  const int64_t per_request = c.ctx_split ? std::max<int64_t>(16, total_ctx / c.parallel) : total_ctx;
  eo.n_ctx = n_ctx_train > 0 ? std::min<int64_t>(per_request, n_ctx_train) : per_request;
  eo.total_ctx = total_ctx;
  eo.cache = c.cache;
  eo.kv_budget = c.kv_budget;
  eo.step_tokens = std::max<int64_t>(c.step_tokens, c.parallel);
  eo.max_queue = c.queue;
  eo.spec_depth = c.spec_depth;
  eo.spec_max_batch = c.spec_max_batch;
  eo.spec_rejection = c.spec_rejection;
  auto draft = make_draft_source(c.spec, c.draft_model, *model, eo.n_ctx);
  if (!draft) return draft.status();
  eo.draft = std::move(draft).value();
  auto pc = make_prompt_cache(c, path, *model);
  if (!pc) return pc.status();
  if (*pc) {
    eo.prompt_cache = std::move(pc).value();
    eo.cache_checkpoint_every = c.cache_checkpoint;
    eo.generation_checkpoint = c.generation_checkpoint;
  }
  return ServedModel::create(std::move(model), std::move(so));
}

}  // namespace specula::server
