// Tests for state/prompt_cache on small layouts (no model): the longest prefix a stored
// state can serve (any prefix of full K/V, only checkpoints of a ring that wrapped), copies
// independent of the cache, LRU leaf-only eviction under the RAM cap; the disk tier round
// trip and restart, its checks (a flipped byte, a truncated file, another fingerprint, an
// old version, a leftover temporary file — none loaded, all counted), its byte cap, flush,
// single-file export/import, and a folder shared by two caches (two replicas).
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "state/kv_layout.h"
#include "state/prompt_cache.h"

namespace specula {
namespace {

constexpr int64_t kDim = 32;

std::vector<LayerSpec> specs(int64_t window) {
  std::vector<LayerSpec> s(2);
  s[0].attention = attention_spec(1, kDim, 0);
  s[1].attention = attention_spec(1, kDim, window);  // window 0: full
  return s;
}

ThreadPool& pool() {
  static ThreadPool p(1);
  return p;
}

StateRows group(int64_t window = 0) {
  auto st = StateRows::create(specs(window), CacheOptions{}, kernels::active(), 4096);
  EXPECT_TRUE(st.is_ok());
  return std::move(st).value();
}

// A row holding `tokens` (K/V derived from each token and its position).
RowState row_for(const StateRows& g, const std::vector<int32_t>& tokens) {
  RowState r = g.new_row().value();
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<float> k(n * kDim), v(n * kDim);
  for (int64_t p = 0; p < n; ++p)
    for (int64_t c = 0; c < kDim; ++c) {
      k[p * kDim + c] = static_cast<float>((tokens[p] * 7 + p * 3 + c) % 23) - 11.0f;
      v[p * kDim + c] = static_cast<float>((tokens[p] * 5 + c) % 17) - 8.0f;
    }
  for (int64_t il = 0; il < g.n_layers(); ++il) {
    const KvLayout* L = g.layout_as<KvLayout>(il);
    KvStage stage;
    L->encode(pool(), k.data(), v.data(), n, stage);
    L->commit(*r.layers[il], stage, 0, n);
  }
  r.length = n;
  return r;
}

std::string bytes_of(const RowState& r) {
  std::string s;
  for (const auto& l : r.layers) l->save(s);
  return s;
}

std::vector<int32_t> seq(int n, int seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 1000);
  return t;
}

std::unique_ptr<PromptCache> make(int64_t ram, const std::string& dir = "", int64_t disk = 0,
                                  const std::string& fp = "fp-A") {
  PromptCacheOptions o;
  o.ram_bytes = ram;
  o.dir = dir;
  o.disk_bytes = disk;
  o.fingerprint = fp;
  auto c = PromptCache::create(o);
  EXPECT_TRUE(c.is_ok()) << c.message();
  return std::move(c).value();
}

std::string tmpdir(const std::string& name) {
  const auto p = std::filesystem::temp_directory_path() / ("specula_pc_" + name);
  std::filesystem::remove_all(p);
  return p.string();
}

TEST(PromptCache, LongestServablePrefix) {
  StateRows g = group();
  auto c = make(int64_t{1} << 30);
  const auto a = seq(100, 1);
  c->insert(a, row_for(g, a));
  // A request that continues a: the whole entry (but at most max_length).
  auto more = a;
  more.insert(more.end(), {5, 6, 7});
  auto hit = c->lookup(more, 102, g);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->length, 100);
  EXPECT_EQ(bytes_of(hit->state), bytes_of(row_for(g, a)));
  // A request that diverges at 60: the entry cut back to 60 (full K/V serve any prefix).
  auto div = a;
  div[60] = 999;
  hit = c->lookup(div, 99, g);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->length, 60);
  EXPECT_EQ(bytes_of(hit->state), bytes_of(row_for(g, std::vector<int32_t>(a.begin(), a.begin() + 60))));
  // The same prompt again: at most prompt - 1 (the last token is computed for its logits).
  hit = c->lookup(a, 99, g);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->length, 99);
  // Unrelated: nothing.
  EXPECT_FALSE(c->lookup(seq(50, 9), 49, g));
  const auto s = c->stats();
  EXPECT_EQ(s.hits, 3u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hit_tokens, 259u);
  // A hit is a copy: growing it leaves the cache alone.
  RowState copy = std::move(hit->state);
  EXPECT_TRUE(copy.truncate(10).is_ok());
  hit = c->lookup(more, 102, g);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->length, 100);
}

TEST(PromptCache, RingEntriesServeOnlyTheirCheckpoints) {
  StateRows g = group(16);  // layer 1 is a ring of 16: once wrapped, no shorter prefix
  auto c = make(int64_t{1} << 30);
  const auto a = seq(80, 2);
  c->insert(std::vector<int32_t>(a.begin(), a.begin() + 40), row_for(g, std::vector<int32_t>(a.begin(), a.begin() + 40)));
  c->insert(a, row_for(g, a));
  auto div = a;
  div[70] = 999;
  auto hit = c->lookup(div, 79, g);  // the 80-entry cannot be cut back to 70: the checkpoint at 40
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->length, 40);
  hit = c->lookup(a, 80, g);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->length, 80);
  EXPECT_EQ(bytes_of(hit->state), bytes_of(row_for(g, a)));
}

TEST(PromptCache, EvictsLeastRecentlyUsedLeavesFirst) {
  StateRows g = group();
  const int64_t one = row_for(g, seq(64, 3)).bytes();
  auto c = make(3 * one);
  const auto base = seq(64, 3);
  auto x = base, y = seq(64, 4), z = seq(64, 5);
  x.push_back(1);  // x extends base: base is x's ancestor
  c->insert(base, row_for(g, base));
  c->insert(x, row_for(g, x));
  c->insert(y, row_for(g, y));
  EXPECT_LE(c->stats().ram_bytes, 3 * one + one / 2);
  c->lookup(y, 64, g);  // y is recent now
  c->insert(z, row_for(g, z));
  // Over the cap: the least recently used leaf goes (x); base survives while... x was its
  // only child, so base is a leaf afterwards but more recent than nothing else.
  EXPECT_LE(c->stats().ram_bytes, 3 * one);
  EXPECT_GE(c->stats().evictions, 1u);
  EXPECT_TRUE(c->lookup(y, 64, g));
  EXPECT_TRUE(c->lookup(z, 64, g));
  auto hit = c->lookup(x, 64, g);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->length, 64);  // served by base (x itself was evicted)
}

TEST(PromptCache, DiskTierSurvivesARestartAndRejectsBadFiles) {
  const std::string dir = tmpdir("disk");
  StateRows g = group(16);
  const auto a = seq(90, 6), b = seq(70, 7);
  {
    auto c = make(int64_t{1} << 30, dir);
    c->insert(a, row_for(g, a));
    c->insert(b, row_for(g, b));
    ASSERT_TRUE(c->flush().is_ok());
    EXPECT_EQ(c->stats().disk_entries, 2);
    EXPECT_EQ(c->stats().disk_writes, 2u);
  }
  // Restart: the entries come back from disk, checked, equal to what was stored.
  {
    auto c = make(int64_t{1} << 30, dir);
    EXPECT_EQ(c->stats().disk_entries, 2);
    EXPECT_EQ(c->stats().ram_entries, 0);
    auto hit = c->lookup(a, 90, g);
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->length, 90);
    EXPECT_EQ(bytes_of(hit->state), bytes_of(row_for(g, a)));
    EXPECT_EQ(c->stats().disk_reads, 1u);
    EXPECT_EQ(c->stats().ram_entries, 1);  // read back into RAM
  }
  // Damage: flip a byte in one file, truncate the other, add a foreign file, an old
  // version and a leftover temporary file. Nothing damaged is loaded; all is counted.
  std::vector<std::filesystem::path> files;
  for (const auto& de : std::filesystem::directory_iterator(dir)) files.push_back(de.path());
  ASSERT_EQ(files.size(), 2u);
  {
    // (A byte of the K/V payload: the index still lists the entry; loading it fails.)
    const auto at = static_cast<std::streamoff>(std::filesystem::file_size(files[0]) - 50);
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at);
    char ch;
    f.read(&ch, 1);
    f.seekp(at);
    ch = static_cast<char>(ch ^ 0x10);
    f.write(&ch, 1);
  }
  std::filesystem::resize_file(files[1], std::filesystem::file_size(files[1]) - 100);
  const std::string other_dir = tmpdir("other");
  {
    auto other = make(int64_t{1} << 30, other_dir, 0, "fp-B");  // another model
    other->insert(a, row_for(g, a));
    ASSERT_TRUE(other->flush().is_ok());
  }
  for (const auto& de : std::filesystem::directory_iterator(other_dir))
    std::filesystem::copy_file(de.path(), std::filesystem::path(dir) / "foreign.spc");
  std::ofstream(std::filesystem::path(dir) / "old.spc", std::ios::binary) << std::string("SPCACHE1\x02\0\0\0\0\0\0\0", 16);
  // Leftover temporary files: one of an hour ago goes; a young one nobody holds (a writer
  // killed mid-write) goes too; one whose writer holds its flock (another process's write in
  // progress, in a shared folder) stays.
  const auto stale = std::filesystem::path(dir) / "x.spc.tmp.123", young = std::filesystem::path(dir) / "y.spc.tmp.456",
             held = std::filesystem::path(dir) / "z.spc.tmp.789";
  std::ofstream(stale, std::ios::binary) << "half a file";
  std::ofstream(young, std::ios::binary) << "half a file";
  std::ofstream(held, std::ios::binary) << "half a file";
  std::filesystem::last_write_time(stale, std::filesystem::file_time_type::clock::now() - std::chrono::hours(2));
  const int held_fd = ::open(held.c_str(), O_RDONLY);
  ASSERT_GE(held_fd, 0);
  ASSERT_EQ(::flock(held_fd, LOCK_EX | LOCK_NB), 0);
  {
    auto c = make(int64_t{1} << 30, dir);
    EXPECT_EQ(c->stats().disk_rejected, 2u);   // foreign + old version (found at start)
    EXPECT_FALSE(std::filesystem::exists(stale));
    EXPECT_FALSE(std::filesystem::exists(young));
    EXPECT_TRUE(std::filesystem::exists(held));
    ::close(held_fd);
    EXPECT_FALSE(c->lookup(a, 90, g));         // flipped byte: checksum
    EXPECT_FALSE(c->lookup(b, 70, g));         // truncated
    EXPECT_EQ(c->stats().disk_rejected, 4u);
    EXPECT_EQ(c->stats().hits, 0u);
  }
}

// Two caches on one folder, as two replicas sharing --cache-dir: each finds what the other
// wrote (after its next folder listing, at most a second later), equal to what was stored;
// two writers of the same entry leave one file; a file the other one deleted is a quiet
// miss; many concurrent writers leave no file a third reader rejects, each counted once.
TEST(PromptCache, SharedFolderBetweenTwoCaches) {
  const std::string dir = tmpdir("shared");
  StateRows g = group();
  auto c1 = make(int64_t{1} << 30, dir);
  auto c2 = make(int64_t{1} << 30, dir);
  const auto a = seq(80, 21), b = seq(60, 22), d = seq(50, 23);
  c1->insert(a, row_for(g, a));
  c1->insert(b, row_for(g, b));
  c2->insert(b, row_for(g, b));  // the same entry from both
  ASSERT_TRUE(c1->flush().is_ok());
  ASSERT_TRUE(c2->flush().is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto hit = c2->lookup(a, 80, g);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->length, 80);
  EXPECT_EQ(bytes_of(hit->state), bytes_of(row_for(g, a)));
  EXPECT_EQ(c2->stats().disk_reads, 1u);
  EXPECT_EQ(c2->stats().disk_entries, 2);  // a (c1's) and b (one file for both), each once
  int files = 0;
  for (const auto& de : std::filesystem::directory_iterator(dir)) files += de.path().extension() == ".spc";
  EXPECT_EQ(files, 2);
  // c1 writes d; c2 indexes it; the file goes (c1's eviction, say): c2 misses quietly.
  c1->insert(d, row_for(g, d));
  ASSERT_TRUE(c1->flush().is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_FALSE(c2->lookup(seq(5, 99), 5, g));  // (a lookup lists the folder)
  EXPECT_EQ(c2->stats().disk_entries, 3);
  for (const auto& de : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(de.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.find(std::string(reinterpret_cast<const char*>(d.data()), d.size() * 4)) != std::string::npos)
      std::filesystem::remove(de.path());
  }
  EXPECT_FALSE(c2->lookup(d, 50, g));
  EXPECT_EQ(c2->stats().disk_rejected, 0u);
  EXPECT_EQ(c2->stats().disk_entries, 2);
  // Concurrent writers of overlapping entries; a third cache then reads every one back.
  std::vector<std::vector<int32_t>> many;
  for (int i = 0; i < 24; ++i) many.push_back(seq(40 + i, 100 + i));
  std::thread w1([&] {
    for (size_t i = 0; i < many.size(); i += 1) c1->insert(many[i], row_for(g, many[i]));
  });
  std::thread w2([&] {
    for (size_t i = many.size(); i-- > 0;) c2->insert(many[i], row_for(g, many[i]));
  });
  w1.join();
  w2.join();
  ASSERT_TRUE(c1->flush().is_ok());
  ASSERT_TRUE(c2->flush().is_ok());
  auto c3 = make(int64_t{1} << 30, dir);
  EXPECT_EQ(c3->stats().disk_rejected, 0u);
  EXPECT_EQ(c3->stats().disk_entries, 2 + static_cast<int64_t>(many.size()));
  for (const auto& t : many) {
    auto h = c3->lookup(t, static_cast<int64_t>(t.size()), g);
    ASSERT_TRUE(h);
    EXPECT_EQ(bytes_of(h->state), bytes_of(row_for(g, t)));
  }
  EXPECT_EQ(c3->stats().disk_rejected, 0u);
}

TEST(PromptCache, DiskCapAndRamLessMode) {
  const std::string dir = tmpdir("cap");
  StateRows g = group();
  const int64_t one = static_cast<int64_t>(row_for(g, seq(64, 1)).bytes());
  auto c = make(0, dir, 2 * one);  // no RAM tier: disk only, room for about one file
  for (int i = 0; i < 4; ++i) {
    const auto t = seq(64, 10 + i);
    c->insert(t, row_for(g, t));
  }
  ASSERT_TRUE(c->flush().is_ok());
  const auto s = c->stats();
  EXPECT_EQ(s.ram_bytes, 0);
  EXPECT_LE(s.disk_bytes, 2 * one);
  EXPECT_GE(s.disk_evictions, 2u);
  int64_t on_disk = 0;
  for (const auto& de : std::filesystem::directory_iterator(dir)) on_disk += static_cast<int64_t>(de.file_size());
  EXPECT_EQ(on_disk, s.disk_bytes);
  const auto last = seq(64, 13);
  EXPECT_TRUE(c->lookup(last, 64, g));  // the newest survives, read from disk
}

TEST(PromptCache, ExportAndImportOneFile) {
  StateRows g = group();
  const auto a = seq(50, 21);
  const std::string file = tmpdir("one.spc");
  {
    auto c = make(int64_t{1} << 30);
    EXPECT_FALSE(c->export_file(a, file).is_ok());  // nothing cached yet
    c->insert(a, row_for(g, a));
    ASSERT_TRUE(c->export_file(a, file).is_ok());
  }
  auto c = make(int64_t{1} << 30);
  ASSERT_TRUE(c->import_file(file).is_ok());
  auto hit = c->lookup(a, 49, g);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->length, 49);
  EXPECT_TRUE(std::filesystem::exists(file));  // imported files are never deleted
  auto wrong = make(int64_t{1} << 30, "", 0, "fp-other");
  EXPECT_FALSE(wrong->import_file(file).is_ok());
}

}  // namespace
}  // namespace specula
