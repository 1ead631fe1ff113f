// server/response_store.cpp — see response_store.h.
#include "server/response_store.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "core/atomic_file.h"

namespace specula::server {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {
constexpr size_t kEvictedRemembered = 4096;

// Ids are ours ("resp_" + hex): anything else is never a file name.
bool safe_id(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  return std::all_of(id.begin(), id.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
  });
}
}  // namespace

std::string ResponseStore::new_id(const std::string& prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  static const char* const kHex = "0123456789abcdef";
  std::string s = prefix;
  for (int k = 0; k < 2; ++k) {
    uint64_t v = rng();
    for (int i = 0; i < 12; ++i, v >>= 4) s += kHex[v & 15];
  }
  return s;
}

ResponseStore::ResponseStore(std::string dir, size_t max_responses) : dir_(std::move(dir)), max_(std::max<size_t>(1, max_responses)) {
  if (dir_.empty()) return;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    dir_.clear();  // memory only: the server still answers
    return;
  }
  // What an earlier run stored, oldest first (loaded at first use).
  std::vector<std::pair<fs::file_time_type, std::string>> found;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (is_temporary_file_name(name)) {  // an interrupted write: gone unless a writer holds it
      std::error_code rec;
      if (is_abandoned_temporary(e.path())) fs::remove(e.path(), rec);
      continue;
    }
    if (name.size() <= 5 || name.compare(name.size() - 5, 5, ".json") != 0) continue;
    const std::string id = name.substr(0, name.size() - 5);
    if (!safe_id(id)) continue;
    std::error_code tec;
    found.emplace_back(e.last_write_time(tec), id);
  }
  std::sort(found.begin(), found.end());
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [t, id] : found) {
    lru_.push_front(id);
    entries_[id] = Entry{std::nullopt, lru_.begin(), true};
  }
  evict_over_bound();
}

std::string ResponseStore::path_of(const std::string& id) const { return (fs::path(dir_) / (id + ".json")).string(); }

bool ResponseStore::load_file(const std::string& id, StoredResponse* out) const {
  std::ifstream f(path_of(id), std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  const json j = json::parse(ss.str(), nullptr, false);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_string() || !j.contains("response") ||
      !j.contains("conversation") || !j["conversation"].is_array())
    return false;
  out->id = id;
  out->model = j["model"].get<std::string>();
  out->response = j["response"];
  out->conversation = j["conversation"];
  return true;
}

bool ResponseStore::write_file(const StoredResponse& r) const {
  if (dir_.empty()) return false;
  const json j = {{"model", r.model}, {"response", r.response}, {"conversation", r.conversation}};
  // (atomic: a killed writer's temporary file is removed at the next start, the constructor)
  return write_file_atomic(path_of(r.id), j.dump(-1, ' ', false, json::error_handler_t::replace), "responses").is_ok();
}

void ResponseStore::trim_memory() {
  // One use moves one entry to the front: at most the one now just past kInMemory crosses.
  if (dir_.empty() || entries_.size() <= kInMemory) return;
  auto it = std::next(lru_.begin(), static_cast<std::ptrdiff_t>(kInMemory));
  Entry& e = entries_[*it];
  if (e.on_disk && e.value) e.value.reset();
}

void ResponseStore::touch(const std::string& id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  lru_.splice(lru_.begin(), lru_, it->second.pos);
}

void ResponseStore::evict_over_bound() {
  while (entries_.size() > max_) {
    const std::string id = lru_.back();
    lru_.pop_back();
    entries_.erase(id);
    if (!dir_.empty()) {
      std::error_code ec;
      fs::remove(path_of(id), ec);
    }
    evicted_.insert(id);
    evicted_order_.push_back(id);
    if (evicted_order_.size() > kEvictedRemembered) {
      evicted_.erase(evicted_order_.front());
      evicted_order_.pop_front();
    }
  }
}

void ResponseStore::put(StoredResponse r, bool persist) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool on_disk = persist && write_file(r);
  const std::string id = r.id;
  auto it = entries_.find(id);
  if (it != entries_.end()) {
    it->second.value = std::move(r);
    it->second.on_disk = on_disk;
    touch(id);
  } else {
    lru_.push_front(id);
    entries_[id] = Entry{std::move(r), lru_.begin(), on_disk};
    evict_over_bound();
  }
  trim_memory();
}

bool ResponseStore::replace(StoredResponse r) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(r.id);
  if (it == entries_.end()) return false;
  it->second.on_disk = write_file(r);
  if (!it->second.on_disk && !dir_.empty()) {  // (no stale file of an earlier value either)
    std::error_code ec;
    fs::remove(path_of(r.id), ec);
  }
  it->second.value = std::move(r);
  touch(it->first);
  trim_memory();
  return true;
}

ResponseStore::Lookup ResponseStore::get(const std::string& id, StoredResponse* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return evicted_.count(id) ? Lookup::kEvicted : Lookup::kNotFound;
  if (!it->second.value) {
    StoredResponse r;
    if (!load_file(id, &r)) {  // gone or damaged on disk: forget it
      lru_.erase(it->second.pos);
      entries_.erase(it);
      return Lookup::kNotFound;
    }
    it->second.value = std::move(r);
  }
  *out = *it->second.value;
  touch(id);
  trim_memory();
  return Lookup::kFound;
}

bool ResponseStore::remove(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  lru_.erase(it->second.pos);
  entries_.erase(it);
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove(path_of(id), ec);
  }
  return true;
}

size_t ResponseStore::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace specula::server
