// state/prompt_cache.h — reuse of computed model state across requests: a radix tree over
// token ids whose entries are row states (RAM tier) and, optionally, files (disk tier).
//
// An entry is the state of one row after `tokens` (RowState, every layer). A new request
// takes the longest prefix of its prompt that some entry can serve, as a copy of that
// entry cut back to the prefix length, and prefills only the rest. An entry can serve a
// prefix of length L when the request's tokens agree with the entry's on [0, L) and every
// layer can be cut back to L (L >= RowState::min_length(): any L for full K/V, only the
// whole entry for recurrent state or a wrapped ring — which is why the engine also stores
// checkpoints, e.g. at the end of each prompt; SGLang's RadixCache for the tree).
// Eviction: least recently used entries at the leaves of the tree go first (an entry with
// entries below it stays while they do), until the RAM tier fits its byte cap.
//
// Disk tier (optional, `dir`): every inserted entry is also written to DIR in the
// background (never on the caller's thread) in a versioned format — magic, format version,
// the cache fingerprint (model file, layouts, precision), tokens, one blob per layer
// (LayerRow::save), CRC-32 of everything — to a temporary file that is fsync'ed and renamed
// (atomic). At start the folder is indexed (headers and tokens only); an entry evicted from
// RAM or found only on disk is read back when a request can use it, its checksum checked.
// Files that are truncated, corrupted, of another version or another model/layout are
// skipped, counted and named in the log; they are never loaded. The disk tier has its own
// byte cap (oldest-used files deleted first). flush() waits until every entry queued so far
// is durable — the only durability point.
// Shared folder: several processes (replicas, on one machine or a shared file system) may
// use one DIR. A file's name follows from its tokens, so two writers of the same entry
// rename onto one file (both whole: the rename is atomic); lookups list the folder again
// at most once a second and index the files others wrote since (each file once); a file
// another process evicted is a quiet miss (not a rejection); at start only temporary files
// older than an hour are removed (a younger one may be another process's write in
// progress); names begin with a hash of the fingerprint, so different models may share a
// folder too. Each process counts and caps the files it knows of; other processes'
// generation checkpoints are left to them.
// Thread-safety: all methods may be called from any thread (one mutex; disk I/O happens
// outside it, on the writer thread or for a read-back).
// Does not decide when to insert (engine/) or how a layer serialises (state/ layouts).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "state/state_rows.h"

namespace specula {

struct PromptCacheOptions {
  int64_t ram_bytes = 0;     // RAM tier cap (0 = no RAM tier: entries go to disk only)
  std::string dir;           // disk tier folder ("" = none); created if missing
  int64_t disk_bytes = 0;    // disk tier cap (0 = 4 x ram_bytes, at least 1 GiB)
  // Identifies what the entries were computed with: model file identity, layouts and
  // precision, method. Entries (files) with another fingerprint are never used.
  std::string fingerprint;
};

struct PromptCacheStats {
  uint64_t lookups = 0, hits = 0, misses = 0;  // lookups that found a prefix of >= 1 token
  uint64_t hit_tokens = 0;                     // tokens served from the cache
  uint64_t inserts = 0, evictions = 0;         // RAM tier
  int64_t ram_bytes = 0, ram_entries = 0;
  int64_t disk_bytes = 0, disk_entries = 0;
  uint64_t disk_writes = 0, disk_reads = 0, disk_evictions = 0;
  uint64_t disk_rejected = 0;                  // files skipped: corrupt, truncated, foreign, old version
  int64_t checkpoints = 0;                     // generation checkpoints held
  int64_t disk_pending = 0;                    // entries queued for writing
};

class PromptCache {
 public:
  // Errors: the disk folder cannot be created or listed.
  static Result<std::unique_ptr<PromptCache>> create(PromptCacheOptions options);
  ~PromptCache();  // finishes queued disk writes
  PromptCache(const PromptCache&) = delete;
  PromptCache& operator=(const PromptCache&) = delete;

  struct Hit {
    int64_t length = 0;  // prefix length served (<= max_length)
    RowState state;      // a copy, already cut back to `length`
  };
  // The longest prefix of tokens[0, max_length) an entry can serve (nothing for 0 tokens),
  // as a state for `group` (whose layouts must be the ones the entries were made with).
  // Errors never escape: a failed copy or an unreadable file is a miss (the file counted).
  std::optional<Hit> lookup(std::span<const int32_t> tokens, int64_t max_length, const StateRows& group);

  // Stores a row's state after `tokens` (tokens.size() == state.length). Takes ownership;
  // an entry for the same tokens is replaced. Evicts to the caps.
  void insert(std::vector<int32_t> tokens, RowState state);

  // One entry as a file of the disk tier's format (llama.cpp's --prompt-cache FILE): the
  // entry that serves the longest prefix of `tokens` is written to `path` (atomically,
  // synchronously). Errors: no entry serves any prefix, or the write failed.
  Status export_file(std::span<const int32_t> tokens, const std::string& path);
  // Adds the entry stored in `path` (read back when a request can use it; the file is not
  // moved or deleted). Errors: unreadable file, another fingerprint or version.
  Status import_file(const std::string& path);

  // Generation checkpoints, to resume an interrupted generation after a restart: the state
  // of an in-flight request under `key` (the engine derives it from everything that
  // determines the request's output). `tokens` are the positions in `state` (prompt and
  // emitted tokens but the pending one); `record` is the engine's own description (pending
  // token, sampler position, emitted tokens' logprobs, ...), stored as is. A newer
  // checkpoint for the key replaces the older one; the disk tier writes it in the
  // background like entries (and indexes it at start).
  void put_checkpoint(const std::string& key, std::vector<int32_t> tokens, RowState state, std::string record);
  struct Checkpoint {
    std::vector<int32_t> tokens;
    RowState state;
    std::string record;
  };
  // A copy of the key's checkpoint, read back from disk when needed (checked like entries).
  std::optional<Checkpoint> find_checkpoint(const std::string& key, const StateRows& group);
  // The generation finished: forget its checkpoint (and delete its file).
  void drop_checkpoint(const std::string& key);

  // Waits until every entry inserted so far is on disk (fsync'ed), or the writer failed.
  // Errors: a write failed (named).
  Status flush();

  PromptCacheStats stats() const;
  const PromptCacheOptions& options() const { return opt_; }

  // The disk tier's file format, for tests and fuzzing (fuzz/prompt_cache_fuzz.cpp): an
  // entry's (or a checkpoint's, with key and record) bytes as written — magic, version,
  // fingerprint, key, record, min_length, tokens, each layer's LayerRow::save, CRC-32.
  static std::string encode_entry(const std::string& fingerprint, std::span<const int32_t> tokens, int64_t min_length,
                                  const RowState& state, const std::string& key = "", const std::string& record = "");
  struct DecodedEntry {
    std::vector<int32_t> tokens;
    int64_t min_length = 0;
    std::string key, record;
    RowState state;  // a row of the group, length = tokens.size()
  };
  // What a read-back checks before a file serves anyone: size, checksum, magic and version,
  // the fingerprint (another one: an error with *damaged = false — the file may be another
  // model's), the layer count of `group`, each layer's state (LayerRow::load), no trailing
  // bytes, every layer's length equal to the token count. Errors name the part.
  static Result<DecodedEntry> decode_entry(std::string_view bytes, const std::string& fingerprint, const StateRows& group,
                                           bool* damaged = nullptr);

 private:
  struct Entry;
  struct Node {
    std::vector<int32_t> edge;          // tokens from the parent to this node
    std::map<int32_t, size_t> children; // first edge token -> node index
    size_t parent = 0;
    int64_t depth = 0;                  // tokens from the root to this node
    std::shared_ptr<Entry> entry;       // the state after depth tokens, if any
  };
  explicit PromptCache(PromptCacheOptions options) : opt_(std::move(options)) {}
  size_t node_for(std::span<const int32_t> tokens);  // creates (splitting edges) as needed
  void remove_entry(size_t node);
  void evict_ram_locked();
  void evict_disk_locked();
  bool is_leaf_entry(size_t node) const;
  void writer_loop();
  Status index_disk();
  // Indexes the files of `paths` not indexed yet (reads their headers outside the lock).
  // startup: also generation checkpoints (later listings leave other processes' alone).
  void index_files(std::vector<std::filesystem::path> paths, bool startup);
  // At most once a second: the files other processes wrote to the folder since.
  void rescan_disk();
  // Forgets `path` as a file of this cache (deleted or never to be used).
  void forget_file_locked(const std::string& path) { known_files_.erase(path); }
  std::optional<RowState> read_file(const std::string& path, std::span<const int32_t> tokens, const StateRows& group,
                                    bool owned);
  static std::string serialize(const std::string& fingerprint, const Entry& e, const RowState& state);
  std::map<std::string, std::shared_ptr<Entry>> checkpoints_;  // generation checkpoints by key
  std::set<std::string> foreign_;  // imported files: never deleted by this cache
  std::set<std::string> known_files_;  // files of the folder indexed or written (shared folders)
  std::atomic<int64_t> last_scan_ms_{0};  // steady-clock ms of the last folder listing

  PromptCacheOptions opt_;
  mutable std::mutex mu_;
  std::vector<Node> nodes_{Node{}};   // nodes_[0] is the root; freed nodes are reused
  std::vector<size_t> free_nodes_;
  uint64_t clock_ = 0;
  PromptCacheStats stats_;
  // Disk tier.
  // Entries to write, each with its state (held here even if the RAM tier drops it first).
  std::deque<std::pair<std::shared_ptr<Entry>, std::shared_ptr<const RowState>>> write_queue_;
  std::condition_variable write_cv_, flushed_cv_;
  uint64_t queued_ = 0, written_ = 0;  // entries queued / done (written or failed)
  std::string write_error_;
  bool stopping_ = false;
  std::thread writer_;
};

}  // namespace specula
