// server/lora_adapters.h — the LoRA adapters a served model has loaded (model/lora.h), and
// which of them a request runs with.
//
// Each adapter has an id (llama-server's: 0, 1, ... in load order, never reused after an
// unload), a name (vLLM's: what a request's "model" names to run with it) and a global
// scale (llama-server's: what requests that choose no adapters run with; 0 = off).
//   `serve --lora NAME=PATH`            named, scale 0: used only when a request asks;
//   `serve --lora PATH`, `--lora-scaled PATH S`  llama-server's: on for every request at
//                                       scale 1 (or S; 0 with --lora-init-without-apply),
//                                       named after the file or folder;
//   POST /lora-adapters [{id, scale}]   sets the global scales (ids left out: 0);
//   POST /v1/load_lora_adapter, /v1/unload_lora_adapter  vLLM's, by name (at run time).
// A request's adapters (resolve): the adapter its "model" names (scale 1), plus its
// llama-server "lora": [{id, scale}] list (which, when sent, replaces the global scales);
// with neither, the adapters whose global scale is not 0.
// Thread-safety: every method may be called from any thread (one mutex). Running requests
// hold their adapters (shared_ptr), so an unload never disturbs them.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/lora.h"
#include "specula/status.h"

namespace specula::server {

struct LoraEntry {
  int64_t id = 0;
  std::string name, path;
  std::shared_ptr<const LoraAdapter> adapter;
  float scale = 0.0f;  // global
  bool named = false;  // given a name by the user (--lora NAME=PATH, /v1/load_lora_adapter)
};

// The name an unnamed adapter gets: the file's stem (a.gguf -> "a") or the folder's name
// (a trailing '/' ignored).
std::string lora_name_of_path(const std::string& path);

class LoraAdapters {
 public:
  // Errors (kInvalidArgument): a name the user gave (named) that is taken, empty, longer
  // than 256 bytes or holding a comma or a double quote (the metrics list names in a label);
  // a scale that is not finite. An unnamed adapter whose file name is taken is named
  // "NAME-ID".
  Result<int64_t> add(std::string name, std::string path, std::shared_ptr<const LoraAdapter> adapter, float scale,
                      bool named);
  // Errors: no such name (kNotFound, naming the loaded ones).
  Status remove(const std::string& name);
  std::vector<LoraEntry> list() const;
  std::optional<LoraEntry> by_name(const std::string& name) const;
  std::optional<LoraEntry> by_id(int64_t id) const;
  // The name of the adapter whose LoraAdapter::id is `adapter_id` ("" if none).
  std::string name_of(uint64_t adapter_id) const;
  // POST /lora-adapters: each listed id gets its scale, the others 0. Errors: an id not
  // loaded (kInvalidArgument; nothing changes), a scale that is not finite.
  Status set_scales(const std::vector<std::pair<int64_t, float>>& scales);
  // A request's set (see above). `model` is the request's "model" field (`names_base`: it is
  // the base model's id or alias); `per_request` its "lora" list when sent (as llama-server:
  // an id listed twice takes its last scale; the adapters apply in id order). Errors:
  // kInvalidArgument (param "lora"): an id not loaded, a scale that is not finite;
  // kNotFound (param "model"): once adapters are served by name (has_named), a model that
  // is neither the base nor a loaded adapter (e.g. one unloaded since). Null: the base model.
  Result<std::shared_ptr<const LoraSet>> resolve(const std::string& model, bool names_base,
                                                 const std::optional<std::vector<std::pair<int64_t, float>>>& per_request) const;
  bool empty() const;
  // Whether an adapter named by the user was ever loaded (then requests must name a model
  // that exists: after an unload, its name is an error, not the base model).
  bool has_named() const;
  // "0 'a', 1 'b'" (for errors).
  std::string describe() const;

 private:
  std::string describe_locked() const;
  mutable std::mutex mu_;
  std::vector<LoraEntry> entries_;
  int64_t next_id_ = 0;
  bool ever_named_ = false;
};

}  // namespace specula::server
