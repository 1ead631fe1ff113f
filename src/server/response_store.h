// server/response_store.h — the Responses API's stored responses (POST /v1/responses with
// "store": true, the default): each response's object (GET /v1/responses/{id}) and its
// conversation — the items a follow-up with previous_response_id continues from (the
// earlier input, then this response's output). A follow-up sends only its new items; the
// prompt it renders starts with the stored conversation, whose tokens the prompt cache
// (engine/prompt_cache.h) still holds, so they are not prefilled again.
//
// Bounded: at most `max_responses` (least recently used first out). With a directory (the
// server's --cache-dir, under responses/) every stored response is also a file
// <id>.json, written atomically (temporary file + rename), so the store survives a restart
// as the prompt cache's disk tier does; an evicted or deleted response's file goes too.
// Evicted ids are remembered (the last 4096) so a lookup can say "evicted" rather than
// "not found".
// Thread-safe (one mutex; files are read and written under it — responses are small). Each
// stored response holds its whole conversation, so memory grows with conversation length
// times --responses-max (without a directory all of them stay in memory).
// Does not: generate, or parse requests (server/responses_api.h).
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

namespace specula::server {

struct StoredResponse {
  std::string id;
  std::string model;                  // the served model's id
  nlohmann::ordered_json response;    // the Response object as answered
  nlohmann::ordered_json conversation;  // input + output items, in order (a follow-up's history)
};

class ResponseStore {
 public:
  // dir: "" keeps responses in memory only; else created when missing.
  explicit ResponseStore(std::string dir = "", size_t max_responses = 1024);

  // persist false: in memory only (a response that is running: nothing of it survives a
  // restart until its answer replaces it).
  void put(StoredResponse r, bool persist = true);
  // put(), only when `r.id` is stored now (an answer finishing a response registered when it
  // started: one deleted or evicted meanwhile stays gone); false when it is not.
  bool replace(StoredResponse r);
  enum class Lookup { kFound, kNotFound, kEvicted };
  Lookup get(const std::string& id, StoredResponse* out);
  // Removes a response; false when it was not stored.
  bool remove(const std::string& id);
  size_t size();
  const std::string& dir() const { return dir_; }

  // A fresh id "<prefix><24 hex digits>" (random; unique across restarts).
  static std::string new_id(const std::string& prefix);

 private:
  std::string path_of(const std::string& id) const;
  bool load_file(const std::string& id, StoredResponse* out) const;
  bool write_file(const StoredResponse& r) const;  // false: not written (memory keeps it)
  void touch(const std::string& id);  // most recently used; mu_ held
  void evict_over_bound();            // mu_ held

  std::string dir_;
  size_t max_;
  std::mutex mu_;
  std::list<std::string> lru_;  // front: most recent
  struct Entry {
    std::optional<StoredResponse> value;  // nullopt: on disk only (loaded at first use)
    std::list<std::string>::iterator pos;
    bool on_disk = false;                 // its file is written (memory may let it go)
  };
  // With a directory, only the most recent responses stay in memory too (conversations
  // repeat their history: 1024 long ones would be a lot of RAM); the rest load at use.
  void trim_memory();  // mu_ held
  static constexpr size_t kInMemory = 64;
  std::unordered_map<std::string, Entry> entries_;
  std::deque<std::string> evicted_order_;
  std::unordered_set<std::string> evicted_;
};

}  // namespace specula::server
