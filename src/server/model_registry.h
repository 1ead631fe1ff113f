// server/model_registry.h — the models one server serves, by name: one always-loaded model
// (`specula serve -m FILE`), or several (`--models-dir DIR`, repeated `-m NAME=PATH`) that
// load on first use and unload when idle or when a memory budget needs room, least
// recently used first (Ollama's and llama-server's router mode).
//
// acquire(name) hands out a Lease that keeps the model loaded while a request runs on it:
// a model not loaded is loaded by the first request that names it while the requests that
// arrive meanwhile wait for the same load; a name not served is kNotFound, its message
// naming the known models. Before a load, idle models (no lease) are unloaded, least
// recently used first, until the budget holds the new one (a model's size: its file or
// folder plus its KV budget, known once it was loaded); when every loaded model is busy
// the load waits for one to become idle (at most `busy_wait_s`, then loads anyway over
// budget rather than fail). tick() unloads models idle for `idle_unload_s`.
// Thread-safety: every method may be called from any thread (one mutex; a load runs
// outside it). Each model's ServedModel sees the server's stop flag (also_stopping).
// Owns: the loaded models (a lease shares ownership: an unloaded model goes when its
// last lease does).
// Does not: parse requests (server.cpp picks the name), or read files (the opener does).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/served_model.h"
#include "specula/status.h"

namespace specula::server {

struct ModelSource {
  std::string name;  // the id requests name
  std::string path;  // a GGUF file or a model folder
};

// Opens one model (the CLI's loader: weights, tokenizer, engine). Called outside the lock.
using ModelOpener = std::function<Result<std::unique_ptr<ServedModel>>(const ModelSource&)>;

struct RegistryOptions {
  int64_t memory_budget_bytes = 0;  // 0: no budget
  double idle_unload_s = 0;         // 0: never unload for idleness
  double busy_wait_s = 120;         // how long a load waits for a busy model to free room
};

class ModelRegistry {
 public:
  // One model, loaded, never unloaded (its name: the model's id; every name finds it).
  explicit ModelRegistry(std::unique_ptr<ServedModel> model);
  // Several models, none loaded yet. Errors: no models, or a name given twice.
  static Result<std::unique_ptr<ModelRegistry>> create(std::vector<ModelSource> sources, ModelOpener opener,
                                                       RegistryOptions options);
  ~ModelRegistry();

  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept : reg_(o.reg_), index_(o.index_), model_(std::move(o.model_)) { o.reg_ = nullptr; }
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    ServedModel& operator*() const { return *model_; }
    ServedModel* operator->() const { return model_.get(); }
    ServedModel* get() const { return model_.get(); }

   private:
    friend class ModelRegistry;
    ModelRegistry* reg_ = nullptr;
    size_t index_ = 0;
    std::shared_ptr<ServedModel> model_;
  };

  bool multi() const { return multi_; }
  // The model named `name` ("": the default, the first one), loaded. Errors: kNotFound
  // (the message names the known models), the load's error, kUnavailable when stopping.
  Result<Lease> acquire(const std::string& name);
  // Loads `name` (as a request would) / unloads it. Errors: kNotFound; unload of a model
  // with requests running: kBusy.
  Status load(const std::string& name);
  Status unload(const std::string& name);
  // Unloads the models idle for idle_unload_s. Called about once a second by the server.
  void tick();
  // The server's stop flag, seen by every model (ServedModel::stop_requested).
  void set_stop_flag(const std::atomic<bool>* flag);

  struct Info {
    std::string name, path;
    std::string state;        // "loaded" | "loading" | "unloaded"
    int64_t bytes = 0;        // its size as counted against the budget (0: not known yet)
    int64_t in_use = 0;       // leases held
  };
  std::vector<Info> list() const;
  std::vector<std::string> names() const;
  // A loaded model to describe the server by (/metrics, /props without a name): the most
  // recently used, or none.
  std::shared_ptr<ServedModel> any_loaded() const;
  // The model `name` if it is loaded (never loads it), else null.
  std::shared_ptr<ServedModel> loaded(const std::string& name) const;
  const RegistryOptions& options() const { return opt_; }

 private:
  struct Entry {
    ModelSource src;
    std::shared_ptr<ServedModel> model;
    bool loading = false;
    int64_t in_use = 0;
    int64_t bytes = 0;
    uint64_t last_used = 0;  // a clock of acquisitions and releases (LRU order)
    int64_t released_ms = 0; // steady-clock ms of the last release (the idle timer)
  };
  ModelRegistry() = default;
  void release(size_t index);
  size_t find_locked(const std::string& name) const;  // entries_.size(): none
  int64_t used_bytes_locked() const;
  std::string known_names_locked() const;
  void unload_locked(Entry& e, const char* why);

  bool multi_ = false;
  ModelOpener opener_;
  RegistryOptions opt_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
  const std::atomic<bool>* stop_flag_ = nullptr;
};

}  // namespace specula::server
