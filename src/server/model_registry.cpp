// server/model_registry.cpp — see model_registry.h.
#include "server/model_registry.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>

#include "engine/engine.h"

namespace specula::server {

namespace {

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Bytes of a model file, or of every file in a model folder.
int64_t path_bytes(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    int64_t n = 0;
    for (const auto& de : std::filesystem::recursive_directory_iterator(path, ec))
      if (de.is_regular_file(ec)) n += static_cast<int64_t>(de.file_size(ec));
    return n;
  }
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<int64_t>(n);
}

}  // namespace

ModelRegistry::ModelRegistry(std::unique_ptr<ServedModel> model) {
  Entry e;
  e.src = {model->id(), model->options().model_path};
  e.model = std::shared_ptr<ServedModel>(std::move(model));
  entries_.push_back(std::move(e));
}

Result<std::unique_ptr<ModelRegistry>> ModelRegistry::create(std::vector<ModelSource> sources, ModelOpener opener,
                                                             RegistryOptions options) {
  if (sources.empty()) return Status::invalid_argument("[server] no models to serve");
  std::set<std::string> seen;
  for (const ModelSource& s : sources)
    if (!seen.insert(s.name).second) return Status::invalid_argument("[server] model name '" + s.name + "' given twice");
  std::unique_ptr<ModelRegistry> r(new ModelRegistry());
  r->multi_ = true;
  r->opener_ = std::move(opener);
  r->opt_ = options;
  for (ModelSource& s : sources) {
    Entry e;
    e.src = std::move(s);
    r->entries_.push_back(std::move(e));
  }
  return r;
}

ModelRegistry::~ModelRegistry() = default;

ModelRegistry::Lease::~Lease() {
  model_.reset();
  if (reg_ != nullptr) reg_->release(index_);
}

void ModelRegistry::set_stop_flag(const std::atomic<bool>* flag) {
  std::lock_guard<std::mutex> lock(mu_);
  stop_flag_ = flag;
  for (Entry& e : entries_)
    if (e.model) e.model->also_stopping = flag;
}

size_t ModelRegistry::find_locked(const std::string& name) const {
  if (!multi_ || name.empty()) return 0;  // one model answers every name; "" is the default
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].src.name == name) return i;
  return entries_.size();
}

std::string ModelRegistry::known_names_locked() const {
  std::string out;
  for (const Entry& e : entries_) out += (out.empty() ? "" : ", ") + e.src.name;
  return out;
}

int64_t ModelRegistry::used_bytes_locked() const {
  int64_t n = 0;
  for (const Entry& e : entries_)
    if (e.model || e.loading) n += e.bytes;
  return n;
}

void ModelRegistry::unload_locked(Entry& e, const char* why) {
  std::fprintf(stderr, "specula: unloading model '%s' (%s)\n", e.src.name.c_str(), why);
  e.model.reset();  // no lease holds it: freed now (its engine stops, its weights unmap)
}

Result<ModelRegistry::Lease> ModelRegistry::acquire(const std::string& name) {
  std::unique_lock<std::mutex> lock(mu_);
  const size_t i = find_locked(name);
  if (i == entries_.size())
    return Status::error(StatusCode::kNotFound,
                  "model '" + name + "' is not served here; the models are: " + known_names_locked());
  for (;;) {
    Entry& e = entries_[i];
    if (stop_flag_ != nullptr && stop_flag_->load()) return Status::error(StatusCode::kUnavailable, "the server is stopping");
    if (e.model) {
      ++e.in_use;
      e.last_used = ++clock_;
      Lease l;
      l.reg_ = this;
      l.index_ = i;
      l.model_ = e.model;
      return l;
    }
    if (e.loading) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));  // (and sees a stop within 0.1 s)
      continue;
    }
    // This request loads it; the others wait for this load.
    e.loading = true;
    if (e.bytes == 0) e.bytes = path_bytes(e.src.path);  // first load: the weights (KV added after)
    if (opt_.memory_budget_bytes > 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                                    std::chrono::duration<double>(opt_.busy_wait_s));
      while (used_bytes_locked() > opt_.memory_budget_bytes) {
        // The least recently used idle model goes first.
        Entry* victim = nullptr;
        bool busy = false;
        for (Entry& o : entries_) {
          if (&o == &e || !o.model) continue;
          if (o.in_use > 0) {
            busy = true;
            continue;
          }
          if (victim == nullptr || o.last_used < victim->last_used) victim = &o;
        }
        if (victim != nullptr) {
          unload_locked(*victim, "the memory budget needs room");
          continue;
        }
        if (!busy || std::chrono::steady_clock::now() >= deadline) break;  // nothing to free: load over budget
        if (stop_flag_ != nullptr && stop_flag_->load()) {
          e.loading = false;
          cv_.notify_all();
          return Status::error(StatusCode::kUnavailable, "the server is stopping");
        }
        cv_.wait_for(lock, std::chrono::milliseconds(100));
      }
    }
    const ModelSource src = e.src;
    lock.unlock();
    std::fprintf(stderr, "specula: loading model '%s' from %s\n", src.name.c_str(), src.path.c_str());
    Result<std::unique_ptr<ServedModel>> opened = Status::internal("[server] the model did not load");
    try {
      opened = opener_(src);
    } catch (const std::exception& ex) {
      opened = Status::internal(std::string("[server] loading model '") + src.name + "' failed: " + ex.what());
    } catch (...) {
    }
    lock.lock();
    Entry& f = entries_[i];
    f.loading = false;
    if (!opened) {
      cv_.notify_all();
      return opened.status();
    }
    f.model = std::shared_ptr<ServedModel>(std::move(opened).value());
    f.model->also_stopping = stop_flag_;
    f.bytes = path_bytes(src.path) + f.model->engine().options().kv_budget;
    f.released_ms = steady_ms();
    // Its size is known now (the KV budget was not, at the first load): idle models go
    // until the budget holds it.
    while (opt_.memory_budget_bytes > 0 && used_bytes_locked() > opt_.memory_budget_bytes) {
      Entry* victim = nullptr;
      for (Entry& o : entries_)
        if (&o != &f && o.model && o.in_use == 0 && (victim == nullptr || o.last_used < victim->last_used)) victim = &o;
      if (victim == nullptr) break;
      unload_locked(*victim, "the memory budget needs room");
    }
    cv_.notify_all();
  }
}

void ModelRegistry::release(size_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[index];
  --e.in_use;
  e.last_used = ++clock_;
  e.released_ms = steady_ms();
  cv_.notify_all();  // a load waiting for room may go on
}

Status ModelRegistry::load(const std::string& name) {
  auto l = acquire(name);
  return l ? Status::ok() : l.status();
}

Status ModelRegistry::unload(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t i = find_locked(name);
  if (i == entries_.size())
    return Status::error(StatusCode::kNotFound,
                  "model '" + name + "' is not served here; the models are: " + known_names_locked());
  if (!multi_) return Status::error(StatusCode::kBusy, "a server of one model does not unload it");
  Entry& e = entries_[i];
  if (e.in_use > 0)
    return Status::error(StatusCode::kBusy,
                  "model '" + name + "' has " + std::to_string(e.in_use) + " request(s) running; unload it when idle");
  if (e.model) unload_locked(e, "asked");
  cv_.notify_all();
  return Status::ok();
}

void ModelRegistry::tick() {
  if (!multi_ || opt_.idle_unload_s <= 0) return;
  const int64_t now = steady_ms();
  std::lock_guard<std::mutex> lock(mu_);
  for (Entry& e : entries_)
    if (e.model && e.in_use == 0 && static_cast<double>(now - e.released_ms) >= opt_.idle_unload_s * 1000.0)
      unload_locked(e, "idle");
}

std::vector<ModelRegistry::Info> ModelRegistry::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Info> out;
  for (const Entry& e : entries_)
    out.push_back({e.src.name, e.src.path, e.model ? "loaded" : e.loading ? "loading" : "unloaded", e.bytes, e.in_use});
  return out;
}

std::vector<std::string> ModelRegistry::names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const Entry& e : entries_) out.push_back(e.src.name);
  return out;
}

std::shared_ptr<ServedModel> ModelRegistry::any_loaded() const {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry* best = nullptr;
  for (const Entry& e : entries_)
    if (e.model && (best == nullptr || e.last_used > best->last_used)) best = &e;
  return best ? best->model : nullptr;
}

std::shared_ptr<ServedModel> ModelRegistry::loaded(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t i = find_locked(name);
  return i < entries_.size() ? entries_[i].model : nullptr;
}

}  // namespace specula::server
