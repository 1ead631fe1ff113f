// server/lora_adapters.cpp — see lora_adapters.h.
#include "server/lora_adapters.h"

#include <cmath>
#include <filesystem>
#include <map>

namespace specula::server {

std::string lora_name_of_path(const std::string& path) {
  std::filesystem::path p(path);
  while (!p.empty() && !p.has_filename()) p = p.parent_path();
  return p.extension() == ".gguf" ? p.stem().string() : p.filename().string();
}

Result<int64_t> LoraAdapters::add(std::string name, std::string path, std::shared_ptr<const LoraAdapter> adapter,
                                  float scale, bool named) {
  if (!std::isfinite(scale)) return Status::invalid_argument("[lora] the scale of '" + name + "' is not a finite number");
  if (named && (name.empty() || name.size() > 256 || name.find_first_of(",\"") != std::string::npos))
    return Status::invalid_argument("[lora] the adapter name '" + name.substr(0, 64) +
                                    "' must be 1 to 256 bytes without commas or double quotes");
  std::lock_guard<std::mutex> lock(mu_);
  const auto taken = [&](const std::string& n) {
    for (const LoraEntry& e : entries_)
      if (e.name == n) return &e;
    return static_cast<const LoraEntry*>(nullptr);
  };
  if (const LoraEntry* t = taken(name)) {
    if (named) return Status::invalid_argument("[lora] an adapter named '" + name + "' is already loaded (from " + t->path + ")");
    name += '-';  // (not "-" + ...: GCC 12's -Wrestrict false positive)
    name += std::to_string(next_id_);
  }
  LoraEntry e;
  e.id = next_id_++;
  e.name = std::move(name);
  e.path = std::move(path);
  e.adapter = std::move(adapter);
  e.scale = scale;
  e.named = named;
  ever_named_ = ever_named_ || named;
  entries_.push_back(std::move(e));
  return entries_.back().id;
}

Status LoraAdapters::remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->name == name) {
      entries_.erase(it);
      return Status::ok();
    }
  return Status::error(StatusCode::kNotFound, "[lora] no adapter named '" + name + "' is loaded" +
                                                  (entries_.empty() ? std::string(" (none is)") : " (loaded: " + describe_locked() + ")"));
}

std::vector<LoraEntry> LoraAdapters::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_;
}

std::optional<LoraEntry> LoraAdapters::by_name(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const LoraEntry& e : entries_)
    if (e.name == name) return e;
  return std::nullopt;
}

std::optional<LoraEntry> LoraAdapters::by_id(int64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const LoraEntry& e : entries_)
    if (e.id == id) return e;
  return std::nullopt;
}

std::string LoraAdapters::name_of(uint64_t adapter_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const LoraEntry& e : entries_)
    if (e.adapter != nullptr && e.adapter->id() == adapter_id) return e.name;
  return "";
}

Status LoraAdapters::set_scales(const std::vector<std::pair<int64_t, float>>& scales) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, scale] : scales) {
    bool found = false;
    for (const LoraEntry& e : entries_) found = found || e.id == id;
    if (!found)
      return Status::invalid_argument("[lora] no adapter has id " + std::to_string(id) +
                                      (entries_.empty() ? std::string(" (none is loaded)") : " (loaded: " + describe_locked() + ")"));
    if (!std::isfinite(scale)) return Status::invalid_argument("[lora] the scale of id " + std::to_string(id) + " is not a finite number");
  }
  for (LoraEntry& e : entries_) {
    e.scale = 0.0f;
    for (const auto& [id, scale] : scales)
      if (id == e.id) e.scale = scale;
  }
  return Status::ok();
}

Result<std::shared_ptr<const LoraSet>> LoraAdapters::resolve(
    const std::string& model, bool names_base,
    const std::optional<std::vector<std::pair<int64_t, float>>>& per_request) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto set = std::make_shared<LoraSet>();
  bool named = false;
  for (const LoraEntry& e : entries_)
    if (!model.empty() && e.name == model) {
      set->adapters.push_back({e.adapter, 1.0f});
      named = true;
    }
  if (ever_named_ && !model.empty() && !names_base && !named)
    return Status::error(StatusCode::kNotFound, "[lora] The model '" + model + "' does not exist: no base model or LoRA adapter has that name" +
                                                    (entries_.empty() ? std::string() : " (adapters: " + describe_locked() + ")"));
  if (per_request) {
    std::map<int64_t, float> by_id;  // llama-server's: the last scale of an id; applied in id order
    for (size_t i = 0; i < per_request->size(); ++i) {
      const auto& [id, scale] = (*per_request)[i];
      bool found = false;
      for (const LoraEntry& e : entries_) found = found || e.id == id;
      if (!found)
        return Status::invalid_argument("[lora] 'lora[" + std::to_string(i) + "]' names adapter id " + std::to_string(id) +
                                        ", which is not loaded" +
                                        (entries_.empty() ? std::string(" (no adapter is)") : " (loaded: " + describe_locked() + ")"));
      if (!std::isfinite(scale))
        return Status::invalid_argument("[lora] 'lora[" + std::to_string(i) + "].scale' is not a finite number");
      by_id[id] = scale;
    }
    for (const auto& [id, scale] : by_id)
      for (const LoraEntry& e : entries_)
        if (e.id == id && scale != 0.0f) set->adapters.push_back({e.adapter, scale});
  } else if (!named) {
    for (const LoraEntry& e : entries_)
      if (e.scale != 0.0f) set->adapters.push_back({e.adapter, e.scale});
  }
  if (set->empty()) return std::shared_ptr<const LoraSet>();
  return std::shared_ptr<const LoraSet>(std::move(set));
}

bool LoraAdapters::has_named() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ever_named_;
}

bool LoraAdapters::empty() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.empty();
}

std::string LoraAdapters::describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  return describe_locked();
}

std::string LoraAdapters::describe_locked() const {
  std::string s;
  for (const LoraEntry& e : entries_) s += (s.empty() ? "" : ", ") + std::to_string(e.id) + " '" + e.name + "'";
  return s;
}

}  // namespace specula::server
