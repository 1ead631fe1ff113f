// tests/server/response_store_test.cpp — server/response_store.h: lookups, the LRU bound
// and "evicted" answers, files that survive a new store on the same folder (a restart),
// deletion, damaged files, and ids that are never file names.
#include "server/response_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace specula::server {
namespace {

namespace fs = std::filesystem;

StoredResponse make(const std::string& id, const std::string& text) {
  StoredResponse r;
  r.id = id;
  r.model = "m";
  r.response = {{"id", id}, {"status", "completed"}};
  r.conversation = nlohmann::ordered_json::array({{{"type", "message"}, {"role", "user"}, {"content", text}}});
  return r;
}

fs::path temp_dir() {
  fs::path d = fs::temp_directory_path() / ResponseStore::new_id("response_store_test_");
  fs::create_directories(d);
  return d;
}

TEST(ResponseStore, PutGetEvict) {
  ResponseStore s("", 2);
  s.put(make("resp_a", "1"));
  s.put(make("resp_b", "2"));
  StoredResponse out;
  ASSERT_EQ(s.get("resp_a", &out), ResponseStore::Lookup::kFound);  // a is now the most recent
  EXPECT_EQ(out.conversation[0]["content"], "1");
  s.put(make("resp_c", "3"));
  EXPECT_EQ(s.get("resp_b", &out), ResponseStore::Lookup::kEvicted);
  EXPECT_EQ(s.get("resp_a", &out), ResponseStore::Lookup::kFound);
  EXPECT_EQ(s.get("resp_zzz", &out), ResponseStore::Lookup::kNotFound);
  EXPECT_TRUE(s.remove("resp_a"));
  EXPECT_FALSE(s.remove("resp_a"));
  EXPECT_EQ(s.get("resp_a", &out), ResponseStore::Lookup::kNotFound);
  EXPECT_EQ(s.size(), 1u);
  // replace() only updates what is stored (an answer for a response deleted meanwhile is dropped).
  EXPECT_TRUE(s.replace(make("resp_c", "3b")));
  ASSERT_EQ(s.get("resp_c", &out), ResponseStore::Lookup::kFound);
  EXPECT_EQ(out.conversation[0]["content"], "3b");
  EXPECT_FALSE(s.replace(make("resp_gone", "x")));
  EXPECT_EQ(s.get("resp_gone", &out), ResponseStore::Lookup::kNotFound);
}

TEST(ResponseStore, SurvivesARestart) {
  const fs::path d = temp_dir();
  {
    ResponseStore s(d.string(), 8);
    s.put(make("resp_1", "first"));
    s.put(make("resp_2", "second"));
    EXPECT_TRUE(s.remove("resp_2"));
    EXPECT_FALSE(fs::exists(d / "resp_2.json"));
  }
  ResponseStore t(d.string(), 8);
  StoredResponse out;
  ASSERT_EQ(t.get("resp_1", &out), ResponseStore::Lookup::kFound);
  EXPECT_EQ(out.model, "m");
  EXPECT_EQ(out.conversation[0]["content"], "first");
  EXPECT_EQ(t.get("resp_2", &out), ResponseStore::Lookup::kNotFound);
  // A damaged file is not a response.
  { std::ofstream(d / "resp_bad.json") << "{not json"; }
  ResponseStore u(d.string(), 8);
  EXPECT_EQ(u.get("resp_bad", &out), ResponseStore::Lookup::kNotFound);
  // The bound applies to what is on disk too: the oldest file goes.
  ResponseStore v(d.string(), 1);
  v.put(make("resp_3", "third"));
  EXPECT_FALSE(fs::exists(d / "resp_1.json"));
  EXPECT_TRUE(fs::exists(d / "resp_3.json"));
  fs::remove_all(d);
}

TEST(ResponseStore, IdsAreNeverPaths) {
  const fs::path d = temp_dir();
  ResponseStore s(d.string(), 8);
  StoredResponse out;
  EXPECT_EQ(s.get("../../etc/passwd", &out), ResponseStore::Lookup::kNotFound);
  EXPECT_EQ(s.get("", &out), ResponseStore::Lookup::kNotFound);
  const std::string id = ResponseStore::new_id("resp_");
  EXPECT_EQ(id.size(), 5u + 24u);
  EXPECT_NE(id, ResponseStore::new_id("resp_"));
  fs::remove_all(d);
}

}  // namespace
}  // namespace specula::server
