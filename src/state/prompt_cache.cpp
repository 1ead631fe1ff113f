// state/prompt_cache.cpp — see prompt_cache.h.
#include "state/prompt_cache.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <chrono>
#include <limits>
#include <random>

#include "core/atomic_file.h"
#include "core/fault.h"

namespace specula {
namespace {

constexpr char kMagic[8] = {'S', 'P', 'C', 'A', 'C', 'H', 'E', '1'};
constexpr uint64_t kVersion = 1;
constexpr size_t kMaxSubtree = 64;  // entries examined below a divergence point

uint64_t fnv1a(std::span<const int32_t> t) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t x : t)
    for (int b = 0; b < 4; ++b) {
      h ^= static_cast<uint8_t>(x >> (8 * b));
      h *= 1099511628211ULL;
    }
  return h;
}

uint32_t crc32_of(std::string_view s) {
  uLong c = crc32(0L, Z_NULL, 0);
  size_t off = 0;
  while (off < s.size()) {  // zlib takes uInt lengths
    const size_t n = std::min<size_t>(s.size() - off, 1u << 30);
    c = crc32(c, reinterpret_cast<const Bytef*>(s.data() + off), static_cast<uInt>(n));
    off += n;
  }
  return static_cast<uint32_t>(c);
}

// An entry's file, written atomically (core/atomic_file.h: a killed writer's temporary file
// is removed at the next start, index_disk).
Status write_atomic(const std::string& path, const std::string& bytes) {
  if (fault::fire(fault::Point::kCacheWrite)) return Status::error("[prompt_cache] [fault] injected: cannot write " + path);
  return write_file_atomic(path, bytes, "prompt_cache");
}

// Header of an entry file, as parsed. A checkpoint file also carries its key and record.
struct FileHeader {
  std::string fingerprint;
  std::string key, record;  // generation checkpoints only
  std::vector<int32_t> tokens;
  int64_t min_length = 0;
  uint64_t n_layers = 0;
};

bool get_string(std::string_view& in, std::string& out, uint64_t max) {
  uint64_t n;
  if (!get_u64(in, n) || n > max || in.size() < n) return false;
  out.assign(in.data(), n);
  in.remove_prefix(n);
  return true;
}

// Parses magic, version, fingerprint, min_length, tokens, layer count from the front of
// `in` (advancing it). Errors say which part is bad.
Status parse_header(std::string_view& in, FileHeader& h) {
  char magic[8];
  uint64_t version, n, minl;
  if (!get_bytes(in, magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return Status::error("not a specula cache file");
  if (!get_u64(in, version)) return Status::error("truncated header");
  if (version != kVersion)
    return Status::error("format version " + std::to_string(version) + " (this build reads " + std::to_string(kVersion) + ")");
  if (!get_string(in, h.fingerprint, 1u << 20) || !get_string(in, h.key, 1u << 20) ||
      !get_string(in, h.record, uint64_t{1} << 30))
    return Status::error("truncated header");
  if (!get_u64(in, minl) || !get_u64(in, n) || n > (uint64_t{1} << 30) || in.size() < n * 4)
    return Status::error("truncated header");
  h.min_length = static_cast<int64_t>(minl);
  h.tokens.resize(n);
  get_bytes(in, h.tokens.data(), n * 4);
  if (!get_u64(in, h.n_layers) || h.n_layers > 100000) return Status::error("truncated header");
  return Status::ok();
}

}  // namespace

struct PromptCache::Entry {
  std::vector<int32_t> tokens;
  std::shared_ptr<const RowState> state;  // RAM copy; null when only on disk
  int64_t bytes = 0;                      // RAM bytes of state
  int64_t min_length = 0;
  uint64_t last_use = 0;
  size_t node = 0;
  std::string file;        // disk copy ("" when none)
  int64_t file_bytes = 0;
  bool pending = false;    // queued for the writer
  std::string key, record;  // a generation checkpoint (not in the tree)
};

Result<std::unique_ptr<PromptCache>> PromptCache::create(PromptCacheOptions options) {
  if (options.ram_bytes < 0 || options.disk_bytes < 0) return Status::error("[prompt_cache] negative byte cap");
  if (options.disk_bytes == 0) options.disk_bytes = std::max<int64_t>(int64_t{1} << 30, 4 * options.ram_bytes);
  std::unique_ptr<PromptCache> c(new PromptCache(std::move(options)));
  if (!c->opt_.dir.empty()) {
    SPECULA_RETURN_IF_ERROR(c->index_disk());
    c->writer_ = std::thread([p = c.get()] { p->writer_loop(); });
  }
  return c;
}

PromptCache::~PromptCache() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    write_cv_.notify_all();
  }
  if (writer_.joinable()) writer_.join();
}

size_t PromptCache::node_for(std::span<const int32_t> tokens) {
  size_t n = 0;
  size_t i = 0;
  while (i < tokens.size()) {
    Node& cur = nodes_[n];
    auto it = cur.children.find(tokens[i]);
    if (it == cur.children.end()) {
      const size_t idx = free_nodes_.empty() ? nodes_.size() : free_nodes_.back();
      Node child;
      child.edge.assign(tokens.begin() + static_cast<ptrdiff_t>(i), tokens.end());
      child.parent = n;
      child.depth = static_cast<int64_t>(tokens.size());
      if (free_nodes_.empty()) {
        nodes_.push_back(std::move(child));
      } else {
        free_nodes_.pop_back();
        nodes_[idx] = std::move(child);
      }
      nodes_[n].children[tokens[i]] = idx;
      return idx;
    }
    const size_t c = it->second;
    const std::vector<int32_t>& e = nodes_[c].edge;
    size_t k = 0;
    while (k < e.size() && i + k < tokens.size() && e[k] == tokens[i + k]) ++k;
    if (k == e.size()) {
      n = c;
      i += k;
      continue;
    }
    // Split edge c at k: a new middle node holds e[0, k).
    const size_t mid = free_nodes_.empty() ? nodes_.size() : free_nodes_.back();
    Node m;
    m.edge.assign(e.begin(), e.begin() + static_cast<ptrdiff_t>(k));
    m.parent = n;
    m.depth = nodes_[n].depth + static_cast<int64_t>(k);
    if (free_nodes_.empty()) {
      nodes_.push_back(std::move(m));
    } else {
      free_nodes_.pop_back();
      nodes_[mid] = std::move(m);
    }
    Node& child = nodes_[c];
    const int32_t first_rest = child.edge[k];
    child.edge.erase(child.edge.begin(), child.edge.begin() + static_cast<ptrdiff_t>(k));
    child.parent = mid;
    nodes_[mid].children[first_rest] = c;
    nodes_[n].children[tokens[i]] = mid;
    n = mid;
    i += k;
  }
  return n;
}

bool PromptCache::is_leaf_entry(size_t node) const {
  // No entry with a RAM state anywhere below.
  std::vector<size_t> stack;
  for (const auto& [t, c] : nodes_[node].children) stack.push_back(c);
  while (!stack.empty()) {
    const size_t n = stack.back();
    stack.pop_back();
    if (nodes_[n].entry && nodes_[n].entry->state) return false;
    for (const auto& [t, c] : nodes_[n].children) stack.push_back(c);
  }
  return true;
}

void PromptCache::remove_entry(size_t node) {
  nodes_[node].entry.reset();
  // Prune empty leaves upwards.
  size_t n = node;
  while (n != 0 && !nodes_[n].entry && nodes_[n].children.empty()) {
    const size_t parent = nodes_[n].parent;
    nodes_[parent].children.erase(nodes_[n].edge.front());
    nodes_[n] = Node{};
    free_nodes_.push_back(n);
    n = parent;
  }
}

void PromptCache::evict_ram_locked() {
  while (stats_.ram_bytes > opt_.ram_bytes) {
    size_t victim = 0;
    uint64_t oldest = std::numeric_limits<uint64_t>::max();
    for (size_t n = 1; n < nodes_.size(); ++n) {
      const auto& e = nodes_[n].entry;
      if (e && e->state && e->last_use < oldest && is_leaf_entry(n)) {
        oldest = e->last_use;
        victim = n;
      }
    }
    if (victim == 0) break;
    Entry& e = *nodes_[victim].entry;
    e.state.reset();  // the writer keeps its own reference while writing
    stats_.ram_bytes -= e.bytes;
    --stats_.ram_entries;
    ++stats_.evictions;
    if (e.file.empty() && !e.pending) remove_entry(victim);
  }
}

void PromptCache::evict_disk_locked() {
  while (stats_.disk_bytes > opt_.disk_bytes) {
    size_t victim = 0;
    uint64_t oldest = std::numeric_limits<uint64_t>::max();
    for (size_t n = 1; n < nodes_.size(); ++n) {
      const auto& e = nodes_[n].entry;
      if (e && !e->file.empty() && foreign_.count(e->file) == 0 && e->last_use < oldest) {
        oldest = e->last_use;
        victim = n;
      }
    }
    if (victim == 0) break;
    Entry& e = *nodes_[victim].entry;
    std::error_code ec;
    std::filesystem::remove(e.file, ec);
    forget_file_locked(e.file);
    stats_.disk_bytes -= e.file_bytes;
    --stats_.disk_entries;
    ++stats_.disk_evictions;
    e.file.clear();
    e.file_bytes = 0;
    if (!e.state && !e.pending) remove_entry(victim);
  }
}

std::optional<PromptCache::Hit> PromptCache::lookup(std::span<const int32_t> tokens, int64_t max_length,
                                                    const StateRows& group) {
  max_length = std::min<int64_t>(max_length, static_cast<int64_t>(tokens.size()));
  if (!opt_.dir.empty()) rescan_disk();  // entries other processes sharing the folder wrote
  std::shared_ptr<Entry> best;
  int64_t best_len = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.lookups;
    const auto consider = [&](const std::shared_ptr<Entry>& e, int64_t common) {
      const int64_t u = std::min({common, max_length, static_cast<int64_t>(e->tokens.size())});
      if (u <= 0 || u < e->min_length) return;
      if (u > best_len || (u == best_len && best && e->tokens.size() < best->tokens.size())) {
        best = e;
        best_len = u;
      }
    };
    // Entries below node `from`, all sharing `common` tokens with the request.
    const auto subtree = [&](size_t from, int64_t common) {
      std::vector<size_t> q = {from};
      size_t seen = 0;
      for (size_t h = 0; h < q.size() && seen < kMaxSubtree; ++h) {
        const Node& nd = nodes_[q[h]];
        if (nd.entry) {
          consider(nd.entry, common);
          ++seen;
        }
        for (const auto& [t, c] : nd.children) q.push_back(c);
      }
    };
    size_t n = 0;
    size_t i = 0;
    for (;;) {
      if (nodes_[n].entry) consider(nodes_[n].entry, nodes_[n].depth);
      if (i == tokens.size()) {
        for (const auto& [t, c] : nodes_[n].children) subtree(c, static_cast<int64_t>(i));
        break;
      }
      auto it = nodes_[n].children.find(tokens[i]);
      if (it == nodes_[n].children.end()) {
        for (const auto& [t, c] : nodes_[n].children) subtree(c, static_cast<int64_t>(i));
        break;
      }
      const size_t c = it->second;
      const std::vector<int32_t>& e = nodes_[c].edge;
      size_t k = 0;
      while (k < e.size() && i + k < tokens.size() && e[k] == tokens[i + k]) ++k;
      if (k < e.size()) {
        subtree(c, static_cast<int64_t>(i + k));
        break;
      }
      n = c;
      i += k;
    }
    if (!best) {
      ++stats_.misses;
      return std::nullopt;
    }
    best->last_use = ++clock_;
  }
  // Copy (or read back) outside the lock.
  std::shared_ptr<const RowState> src;
  std::string file;
  {
    std::lock_guard<std::mutex> lock(mu_);
    src = best->state;
    file = best->file;
  }
  std::optional<RowState> copy;
  if (src) {
    auto c = src->clone();
    if (c) copy = std::move(c).value();
  } else if (!file.empty()) {
    auto r = read_file(file, best->tokens, group, foreign_.count(file) == 0);
    if (r) {
      auto c = r->clone();
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.disk_reads;
      if (!best->state && opt_.ram_bytes > 0) {  // back into the RAM tier
        best->state = std::make_shared<const RowState>(std::move(*r));
        best->bytes = best->state->bytes();
        stats_.ram_bytes += best->bytes;
        ++stats_.ram_entries;
        evict_ram_locked();
      }
      if (c) copy = std::move(c).value();
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      if (nodes_[best->node].entry == best && best->file == file) {
        if (foreign_.count(file) == 0) {
          stats_.disk_bytes -= best->file_bytes;
          --stats_.disk_entries;
        }
        forget_file_locked(file);
        best->file.clear();
        if (!best->state && !best->pending) remove_entry(best->node);
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!copy || !copy->truncate(best_len).is_ok() || copy->layers.size() != static_cast<size_t>(group.n_layers())) {
    ++stats_.misses;
    return std::nullopt;
  }
  ++stats_.hits;
  stats_.hit_tokens += static_cast<uint64_t>(best_len);
  return Hit{best_len, std::move(*copy)};
}

void PromptCache::insert(std::vector<int32_t> tokens, RowState state) {
  if (tokens.empty() || static_cast<int64_t>(tokens.size()) != state.length) return;
  auto e = std::make_shared<Entry>();
  e->bytes = state.bytes();
  e->min_length = state.min_length();
  e->tokens = std::move(tokens);
  e->state = std::make_shared<const RowState>(std::move(state));
  std::lock_guard<std::mutex> lock(mu_);
  const size_t node = node_for(e->tokens);
  e->node = node;
  e->last_use = ++clock_;
  if (auto& old = nodes_[node].entry) {  // same tokens: the new state replaces the old one
    if (old->state) {
      stats_.ram_bytes -= old->bytes;
      --stats_.ram_entries;
    }
    e->file = old->file;  // the same tokens give the same state: keep its file
    e->file_bytes = old->file_bytes;
    old->file.clear();
  }
  nodes_[node].entry = e;
  stats_.ram_bytes += e->bytes;
  ++stats_.ram_entries;
  ++stats_.inserts;
  if (!opt_.dir.empty() && e->file.empty()) {
    e->pending = true;
    write_queue_.push_back({e, e->state});
    ++queued_;
    stats_.disk_pending = static_cast<int64_t>(write_queue_.size());
    write_cv_.notify_all();
  }
  evict_ram_locked();
}

std::string PromptCache::serialize(const std::string& fingerprint, const Entry& e, const RowState& state) {
  std::string out;
  put_bytes(out, kMagic, 8);
  put_u64(out, kVersion);
  for (const std::string* str : {&fingerprint, &e.key, &e.record}) {
    put_u64(out, str->size());
    put_bytes(out, str->data(), str->size());
  }
  put_u64(out, static_cast<uint64_t>(e.min_length));
  put_u64(out, e.tokens.size());
  put_bytes(out, e.tokens.data(), e.tokens.size() * 4);
  put_u64(out, state.layers.size());
  std::string blob;
  for (const auto& l : state.layers) {
    blob.clear();
    l->save(blob);
    put_u64(out, blob.size());
    out += blob;
  }
  const uint32_t crc = crc32_of(out);
  put_bytes(out, &crc, 4);
  return out;
}

Status PromptCache::export_file(std::span<const int32_t> tokens, const std::string& path) {
  std::shared_ptr<Entry> best;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Entries along the path of `tokens`: the deepest one in RAM.
    size_t n = 0, i = 0;
    for (;;) {
      if (nodes_[n].entry && nodes_[n].entry->state) best = nodes_[n].entry;
      if (i == tokens.size()) break;
      auto it = nodes_[n].children.find(tokens[i]);
      if (it == nodes_[n].children.end()) break;
      const auto& e = nodes_[it->second].edge;
      if (i + e.size() > tokens.size() || !std::equal(e.begin(), e.end(), tokens.begin() + static_cast<ptrdiff_t>(i))) break;
      i += e.size();
      n = it->second;
    }
  }
  if (!best) return Status::error("[prompt_cache] no cached state for these tokens to save");
  return write_atomic(path, serialize(opt_.fingerprint, *best, *best->state));
}

Status PromptCache::import_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error("[prompt_cache] cannot read " + path);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string_view v(bytes);
  FileHeader h;
  if (Status st = parse_header(v, h); !st.is_ok()) return Status::error("[prompt_cache] " + path + ": " + st.message());
  if (h.fingerprint != opt_.fingerprint)
    return Status::error("[prompt_cache] " + path + " was made for another model or cache layout");
  if (h.tokens.empty()) return Status::error("[prompt_cache] " + path + " holds no tokens");
  auto e = std::make_shared<Entry>();
  e->tokens = std::move(h.tokens);
  e->min_length = h.min_length;
  e->file = path;
  std::lock_guard<std::mutex> lock(mu_);
  foreign_.insert(path);
  const size_t node = node_for(e->tokens);
  e->node = node;
  e->last_use = ++clock_;
  if (!nodes_[node].entry) nodes_[node].entry = e;
  return Status::ok();
}

void PromptCache::writer_loop() {
  for (;;) {
    std::shared_ptr<Entry> e;
    std::shared_ptr<const RowState> state;
    {
      std::unique_lock<std::mutex> lock(mu_);
      write_cv_.wait(lock, [&] { return stopping_ || !write_queue_.empty(); });
      if (write_queue_.empty()) return;  // stopping, queue drained
      e = write_queue_.front().first;
      state = write_queue_.front().second;
      write_queue_.pop_front();
      stats_.disk_pending = static_cast<int64_t>(write_queue_.size());
    }
    Status st = Status::ok();
    std::string path;
    int64_t size = 0;
    if (state) {
      const std::string out = serialize(opt_.fingerprint, *e, *state);
      char name[64];
      // The fingerprint's hash first: models (or layouts) sharing a folder never meet on a name.
      const std::vector<int32_t> fb(opt_.fingerprint.begin(), opt_.fingerprint.end());
      if (e->key.empty()) {
        std::snprintf(name, sizeof(name), "%08x-%016llx-%08x.spc", static_cast<unsigned>(fnv1a(fb)),
                      static_cast<unsigned long long>(fnv1a(e->tokens)), static_cast<unsigned>(e->tokens.size()));
      } else {
        const std::vector<int32_t> kb(e->key.begin(), e->key.end());
        std::snprintf(name, sizeof(name), "gen-%016llx.spg", static_cast<unsigned long long>(fnv1a(kb)));
      }
      path = (std::filesystem::path(opt_.dir) / name).string();
      size = static_cast<int64_t>(out.size());
      st = write_atomic(path, out);
    }
    std::lock_guard<std::mutex> lock(mu_);
    e->pending = false;
    const bool current = e->key.empty() ? nodes_[e->node].entry == e
                                        : (checkpoints_.count(e->key) != 0 && checkpoints_[e->key] == e);
    if (!st.is_ok()) {
      write_error_ = st.message();
      std::fprintf(stderr, "%s\n", st.message().c_str());
    } else if (state && current) {
      known_files_.insert(path);
      e->file = path;
      e->file_bytes = size;
      stats_.disk_bytes += size;
      ++stats_.disk_entries;
      ++stats_.disk_writes;
      evict_disk_locked();
    } else if (state) {
      std::error_code ec;  // the entry was replaced meanwhile
      std::filesystem::remove(path, ec);
    }
    if (opt_.ram_bytes == 0 && e->state && current) {  // disk only
      e->state.reset();
      stats_.ram_bytes -= e->bytes;
      if (e->key.empty()) --stats_.ram_entries;
    }
    if (e->key.empty() && current && !e->state && e->file.empty()) remove_entry(e->node);
    ++written_;
    flushed_cv_.notify_all();
  }
}

Status PromptCache::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  if (opt_.dir.empty()) return Status::ok();
  const uint64_t target = queued_;
  flushed_cv_.wait(lock, [&] { return written_ >= target; });
  std::string err = std::move(write_error_);
  write_error_.clear();
  if (!err.empty()) return Status::error(err);
  return Status::ok();
}

namespace {
int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace


Status PromptCache::index_disk() {
  std::error_code ec;
  std::filesystem::create_directories(opt_.dir, ec);
  if (ec) return Status::error("[prompt_cache] cannot create " + opt_.dir + ": " + ec.message());
  std::vector<std::pair<std::filesystem::file_time_type, std::filesystem::path>> files;
  const auto now = std::filesystem::file_time_type::clock::now();
  for (const auto& de : std::filesystem::directory_iterator(opt_.dir, ec)) {
    const std::string name = de.path().filename().string();
    if (name.find(".spc.tmp.") != std::string::npos || name.find(".spg.tmp.") != std::string::npos) {
      // An interrupted write (no writer holds its lock) goes now: a SIGKILL mid-write must
      // not leave files the disk cap does not count. (On a file system without flock every
      // lock succeeds: a live writer then loses that one write, nothing is corrupt.) One
      // still locked is a live process's; after an hour it goes anyway.
      std::error_code tec;
      const auto t = de.last_write_time(tec);
      if ((!tec && now - t > std::chrono::hours(1)) || is_abandoned_temporary(de.path()))
        std::filesystem::remove(de.path(), tec);
      continue;
    }
    if (de.path().extension() == ".spc" || de.path().extension() == ".spg") {
      std::error_code sec;  // a file another process deletes meanwhile: skipped
      const auto t = de.last_write_time(sec);
      if (!sec) files.push_back({t, de.path()});
    }
  }
  if (ec) return Status::error("[prompt_cache] cannot list " + opt_.dir + ": " + ec.message());
  std::sort(files.begin(), files.end());  // oldest first: LRU order
  std::vector<std::filesystem::path> paths;
  for (auto& [t, path] : files) paths.push_back(std::move(path));
  last_scan_ms_ = steady_ms();
  index_files(std::move(paths), /*startup=*/true);
  std::lock_guard<std::mutex> lock(mu_);
  evict_disk_locked();
  return Status::ok();
}

void PromptCache::rescan_disk() {
  const int64_t now = steady_ms();
  int64_t last = last_scan_ms_.load();
  if (now - last < 1000 || !last_scan_ms_.compare_exchange_strong(last, now)) return;
  // (On the engine thread: nothing may escape; a folder that cannot be listed now is listed
  // again next time.)
  try {
    std::error_code ec;
    std::vector<std::filesystem::path> paths;
    std::filesystem::directory_iterator it(opt_.dir, ec), end;
    for (; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".spc") paths.push_back(it->path());  // (others' checkpoints: theirs)
    if (ec) return;
    index_files(std::move(paths), /*startup=*/false);
  } catch (...) {
  }
}

void PromptCache::index_files(std::vector<std::filesystem::path> paths, bool startup) {
  {
    // Each file once: claimed here, so a concurrent listing skips it.
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::filesystem::path> fresh;
    for (auto& p : paths)
      if (known_files_.insert(p.string()).second) fresh.push_back(std::move(p));
    paths = std::move(fresh);
  }
  for (const auto& path : paths) {
    std::error_code ec;
    std::ifstream in(path, std::ios::binary);
    if (!in) continue;  // gone meanwhile (another process evicted it)
    std::string head(1 << 16, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(in.gcount()));
    std::string_view v(head);
    FileHeader h;
    Status st = parse_header(v, h);
    if (st.is_ok() && h.fingerprint != opt_.fingerprint) st = Status::error("made for another model or cache layout");
    if (!st.is_ok() && v.size() == 0 && head.size() == (1u << 16)) {
      // A long token list: read the whole file's header part again.
      std::ifstream all(path, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(all)), std::istreambuf_iterator<char>());
      std::string_view w(bytes);
      st = parse_header(w, h);
      if (st.is_ok() && h.fingerprint != opt_.fingerprint) st = Status::error("made for another model or cache layout");
    }
    const int64_t file_bytes = static_cast<int64_t>(std::filesystem::file_size(path, ec));
    std::lock_guard<std::mutex> lock(mu_);
    if (!st.is_ok() || h.tokens.empty() || ec) {
      ++stats_.disk_rejected;
      std::fprintf(stderr, "[prompt_cache] skipping %s: %s\n", path.string().c_str(),
                   ec ? ec.message().c_str() : st.is_ok() ? "no tokens" : st.message().c_str());
      continue;
    }
    auto e = std::make_shared<Entry>();
    e->tokens = std::move(h.tokens);
    e->min_length = h.min_length;
    e->file = path.string();
    e->file_bytes = file_bytes;
    if (!h.key.empty()) {  // a generation checkpoint (at start only: later ones are other processes')
      if (!startup || checkpoints_.count(h.key)) continue;
      e->key = std::move(h.key);
      e->record = std::move(h.record);
      checkpoints_[e->key] = e;
      stats_.disk_bytes += e->file_bytes;
      ++stats_.disk_entries;
      stats_.checkpoints = static_cast<int64_t>(checkpoints_.size());
      continue;
    }
    const size_t node = node_for(e->tokens);
    e->node = node;
    e->last_use = ++clock_;
    if (nodes_[node].entry) continue;  // the same tokens already (ours, or a duplicate): keep it
    nodes_[node].entry = e;
    stats_.disk_bytes += e->file_bytes;
    ++stats_.disk_entries;
  }
}

std::optional<RowState> PromptCache::read_file(const std::string& path, std::span<const int32_t> tokens,
                                               const StateRows& group, bool owned) {
  // `damaged`: the file itself is bad (checksum, format) — ours then goes; a file of another
  // model, or a failure of this process, leaves it to whoever can use it.
  const auto reject = [&](const std::string& why, bool damaged = true) -> std::optional<RowState> {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.disk_rejected;
    std::fprintf(stderr, "[prompt_cache] not loading %s: %s\n", path.c_str(), why.c_str());
    std::error_code ec;
    if (owned && damaged) std::filesystem::remove(path, ec);  // ours and unusable: it would be rejected again
    forget_file_locked(path);
    return std::nullopt;
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec) && !ec) return std::nullopt;  // evicted by another process sharing the folder
    return reject("cannot open");
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bool damaged = true;
  auto d = decode_entry(bytes, opt_.fingerprint, group, &damaged);
  if (!d.is_ok()) return reject(d.message(), damaged);
  if (!std::equal(d->tokens.begin(), d->tokens.end(), tokens.begin(), tokens.end())) return reject("tokens differ from the index");
  return std::move(d->state);
}

Result<PromptCache::DecodedEntry> PromptCache::decode_entry(std::string_view bytes, const std::string& fingerprint,
                                                            const StateRows& group, bool* damaged) {
  bool scratch = true;
  bool& bad = damaged != nullptr ? *damaged : scratch;
  bad = true;
  if (bytes.size() < 12) return Status::error("truncated");
  uint32_t crc;
  std::memcpy(&crc, bytes.data() + bytes.size() - 4, 4);
  std::string_view body(bytes.data(), bytes.size() - 4);
  if (crc32_of(body) != crc) return Status::error("checksum mismatch (corrupted or truncated)");
  FileHeader h;
  SPECULA_RETURN_IF_ERROR(parse_header(body, h));
  if (h.fingerprint != fingerprint) {
    bad = false;
    return Status::error("made for another model or cache layout");
  }
  if (h.n_layers != static_cast<uint64_t>(group.n_layers())) return Status::error("layer count differs");
  auto row = group.new_row();
  if (!row) {
    bad = false;
    return row.status();
  }
  for (uint64_t il = 0; il < h.n_layers; ++il) {
    uint64_t n;
    if (!get_u64(body, n) || body.size() < n) return Status::error("truncated layer " + std::to_string(il));
    SPECULA_RETURN_IF_ERROR(row->layers[il]->load(body.substr(0, n)));
    body.remove_prefix(n);
  }
  if (!body.empty()) return Status::error("trailing bytes");
  row->length = static_cast<int64_t>(h.tokens.size());
  for (const auto& l : row->layers)
    if (l->length() != row->length) return Status::error("a layer's length differs from the tokens");
  DecodedEntry out;
  out.tokens = std::move(h.tokens);
  out.min_length = h.min_length;
  out.key = std::move(h.key);
  out.record = std::move(h.record);
  out.state = std::move(row).value();
  return out;
}

std::string PromptCache::encode_entry(const std::string& fingerprint, std::span<const int32_t> tokens, int64_t min_length,
                                      const RowState& state, const std::string& key, const std::string& record) {
  Entry e;
  e.tokens.assign(tokens.begin(), tokens.end());
  e.min_length = min_length;
  e.key = key;
  e.record = record;
  return serialize(fingerprint, e, state);
}

void PromptCache::put_checkpoint(const std::string& key, std::vector<int32_t> tokens, RowState state,
                                 std::string record) {
  if (key.empty() || static_cast<int64_t>(tokens.size()) != state.length) return;
  auto e = std::make_shared<Entry>();
  e->bytes = state.bytes();
  e->min_length = state.length;
  e->tokens = std::move(tokens);
  e->key = key;
  e->record = std::move(record);
  e->state = std::make_shared<const RowState>(std::move(state));
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = checkpoints_[key];
  if (slot) {
    if (slot->state) stats_.ram_bytes -= slot->bytes;
    if (!slot->file.empty()) {  // the new file replaces it (same name) once written
      stats_.disk_bytes -= slot->file_bytes;
      --stats_.disk_entries;
    }
  }
  slot = e;
  e->last_use = ++clock_;
  stats_.ram_bytes += e->bytes;
  stats_.checkpoints = static_cast<int64_t>(checkpoints_.size());
  if (!opt_.dir.empty()) {
    e->pending = true;
    write_queue_.push_back({e, e->state});
    ++queued_;
    stats_.disk_pending = static_cast<int64_t>(write_queue_.size());
    write_cv_.notify_all();
  }
}

std::optional<PromptCache::Checkpoint> PromptCache::find_checkpoint(const std::string& key, const StateRows& group) {
  std::shared_ptr<Entry> e;
  std::shared_ptr<const RowState> src;
  std::string file;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = checkpoints_.find(key);
    if (it == checkpoints_.end()) return std::nullopt;
    e = it->second;
    src = e->state;
    file = e->file;
  }
  std::optional<RowState> copy;
  if (src) {
    auto c = src->clone();
    if (c) copy = std::move(c).value();
  } else if (!file.empty()) {
    copy = read_file(file, e->tokens, group, true);
    if (copy) {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.disk_reads;
    }
  }
  if (!copy) return std::nullopt;
  return Checkpoint{e->tokens, std::move(*copy), e->record};
}

void PromptCache::drop_checkpoint(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = checkpoints_.find(key);
  if (it == checkpoints_.end()) return;
  const auto& e = it->second;
  if (e->state) stats_.ram_bytes -= e->bytes;
  if (!e->file.empty()) {
    std::error_code ec;
    std::filesystem::remove(e->file, ec);
    forget_file_locked(e->file);
    stats_.disk_bytes -= e->file_bytes;
    --stats_.disk_entries;
  }
  checkpoints_.erase(it);
  stats_.checkpoints = static_cast<int64_t>(checkpoints_.size());
}

PromptCacheStats PromptCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace specula
