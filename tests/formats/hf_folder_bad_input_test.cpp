// tests/model/hf_folder_bad_input_test.cpp — a corruption sweep over Hugging Face model folders
// (formats/hf_folder.h, formats/safetensors.h, tokenizer/hf_tokenizer.h): bad input must never
// crash and must give a clear error naming the file and the field or tensor.
//
// Each case copies a valid tiny folder written by tools/make_hf_folders.py (qwen2_t: config.json
// + model.safetensors; llama_b: two shards + model.safetensors.index.json) to a fresh temp dir,
// damages one thing, and checks load_model (or load_tokenizer) fails with the expected fragments:
// missing / truncated shards, safetensors headers that lie (offsets, dtype, shape, length, JSON),
// config.json keys of the wrong type or range, tensors of the wrong shape or dtype or unknown
// names, broken tokenizer.json / tokenizer_config.json / generation_config.json, then seeded
// random byte damage of config.json, the safetensors header and the shard index.
// Errors an architecture reports about the converted file carry the folder's names too
// ("tensor 'blk.0.attn_q.weight' ('model.layers.0.self_attn.q_proj.weight' in the folder)";
// shapes as GGUF lists them, contiguous dimension first).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "formats/hf_folder.h"
#include "model/model.h"
#include "tokenizer/hf_tokenizer.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

const std::string kBase =
    fs::temp_directory_path().string() + "/specula_hf_bad_input_" + std::to_string(::getpid());
constexpr const char* kLoaded = "<loaded>";
constexpr const char* kShard1 = "model-00001-of-00002.safetensors";
constexpr const char* kShard2 = "model-00002-of-00002.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

// Removes this process's folders after the last test.
class CleanupEnv : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(kBase, ec);
  }
};
::testing::Environment* const kCleanup = ::testing::AddGlobalTestEnvironment(new CleanupEnv);

// Writes kBase/src/hf_qwen2_t and hf_llama_b once per process; "" or the script's output.
const std::string& prepare() {
  static std::once_flag once;
  static std::string err;
  std::call_once(once, [] {
    const std::string src = fs::path(SPECULA_FIXTURES_DIR).parent_path().parent_path().string();
    fs::create_directories(kBase + "/src");
    const std::string log = kBase + "/make.log";
    const std::string cmd = "python3 '" + src + "/tools/make_hf_folders.py' --only qwen2_t,llama_b --out '" + kBase +
                            "/src' > '" + log + "' 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      std::ifstream in(log);
      std::stringstream ss;
      ss << in.rdbuf();
      err = "tools/make_hf_folders.py failed: " + ss.str();
    }
  });
  return err;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes(const std::string& path, const std::string& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
}

// A safetensors file split into its header (JSON, key order kept) and data buffer.
struct St {
  ojson header;
  std::string data;
};

St read_st(const std::string& path) {
  const std::string b = read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  St s;
  s.header = ojson::parse(b.substr(8, n));
  s.data = b.substr(8 + n);
  return s;
}

void write_st(const std::string& path, const St& s) {
  const std::string h = s.header.dump();
  std::string b(8, '\0');
  const uint64_t n = h.size();
  std::memcpy(b.data(), &n, 8);
  write_bytes(path, b + h + s.data);
}

// A fresh copy of a valid folder ("qwen2_t" or "llama_b"), removed at the end of the case.
class Case {
 public:
  explicit Case(const std::string& model) : dir_(kBase + "/case_" + std::to_string(counter_++)) {
    fs::copy(kBase + "/src/hf_" + model, dir_, fs::copy_options::recursive);
  }
  ~Case() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  Case(const Case&) = delete;
  Case& operator=(const Case&) = delete;

  const std::string& dir() const { return dir_; }
  std::string path(const std::string& file) const { return dir_ + "/" + file; }
  std::string read(const std::string& file) const { return read_bytes(path(file)); }
  void write(const std::string& file, const std::string& b) const { write_bytes(path(file), b); }
  void remove(const std::string& file) const { fs::remove(path(file)); }

  ojson json(const std::string& file) const { return ojson::parse(read(file)); }
  void write_json(const std::string& file, const ojson& j) const { write(file, j.dump(1)); }
  // config.json with one key set (or erased when `v` is discarded).
  void config(const std::string& key, const ojson& v) const {
    ojson c = json("config.json");
    if (v.is_discarded()) c.erase(key);
    else c[key] = v;
    write_json("config.json", c);
  }
  St st(const std::string& file = "model.safetensors") const { return read_st(path(file)); }
  void write_st(const St& s, const std::string& file = "model.safetensors") const {
    ::specula::write_st(path(file), s);
  }

 private:
  std::string dir_;
  static inline int counter_ = 0;
};

ModelOptions opts() {
  ModelOptions o;
  o.n_threads = 1;
  return o;
}

std::string load_error(const std::string& dir) {
  auto m = load_model(dir, opts());
  return m.is_ok() ? std::string(kLoaded) : m.message();
}

std::string tokenizer_error(const std::string& dir) {
  auto f = open_model_file(dir);
  if (!f) return f.message();
  auto t = tokenizer::load_tokenizer(*f);
  return t.is_ok() ? std::string(kLoaded) : t.message();
}

// A clear error: non-empty, "[module] ..." and every fragment present.
::testing::AssertionResult Clear(const std::string& msg, const std::vector<std::string>& parts) {
  if (msg.empty() || msg[0] != '[') return ::testing::AssertionFailure() << "not a \"[module] ...\" error: " << msg;
  for (const std::string& p : parts)
    if (msg.find(p) == std::string::npos) return ::testing::AssertionFailure() << "missing '" << p << "' in: " << msg;
  return ::testing::AssertionSuccess();
}

#define PREPARE() ASSERT_EQ(prepare(), "")

// ---------------------------------------------------------------------------------------------
// The valid folders load (the baseline every case damages).

TEST(HfBadInput, ValidFoldersLoad) {
  PREPARE();
  for (const char* m : {"qwen2_t", "llama_b"}) {
    Case c(m);
    EXPECT_EQ(load_error(c.dir()), kLoaded) << m;
  }
}

// ---------------------------------------------------------------------------------------------
// 1. Shards of a sharded folder.

TEST(HfBadInput, MissingShardNamesTheShardAndATensorMappedToIt) {
  PREPARE();
  Case c("llama_b");
  c.remove(kShard2);
  const std::string e = load_error(c.dir());
  EXPECT_TRUE(Clear(e, {"[safetensors]", c.path(kIndex), std::string("shard '") + kShard2 + "' not found",
                        "it holds tensor '"}));
  // The tensor named is one the index maps to the missing shard.
  const size_t at = e.find("it holds tensor '");
  ASSERT_NE(at, std::string::npos) << e;
  const size_t b = at + std::strlen("it holds tensor '"), end = e.find('\'', b);
  const std::string tensor = e.substr(b, end - b);
  const ojson index = c.json(kIndex);
  ASSERT_TRUE(index["weight_map"].contains(tensor)) << e;
  EXPECT_EQ(index["weight_map"][tensor], kShard2) << e;
}

TEST(HfBadInput, DamagedShardAndIndex) {
  PREPARE();
  {
    Case c("llama_b");  // a truncated second shard names that shard
    const std::string b = c.read(kShard2);
    c.write(kShard2, b.substr(0, b.size() - 100));
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[safetensors]", c.path(kShard2), "tensor '", "past the end"}));
  }
  {
    Case c("llama_b");  // the index is not JSON
    c.write(kIndex, c.read(kIndex).substr(0, 200));
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[safetensors]", c.path(kIndex), "not valid JSON"}));
  }
  {
    Case c("llama_b");  // the index maps a tensor to the wrong shard
    ojson j = c.json(kIndex);
    j["weight_map"]["model.norm.weight"] = kShard1;
    c.write_json(kIndex, j);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[safetensors]", c.path(kIndex), "tensor 'model.norm.weight'", kShard1}));
  }
  {
    Case c("llama_b");  // the index names a tensor no shard holds
    ojson j = c.json(kIndex);
    j["weight_map"]["model.layers.9.mlp.up_proj.weight"] = kShard2;
    c.write_json(kIndex, j);
    EXPECT_TRUE(Clear(load_error(c.dir()),
                      {"[safetensors]", c.path(kIndex), "tensor 'model.layers.9.mlp.up_proj.weight'", kShard2}));
  }
  {
    Case c("llama_b");  // neither model.safetensors nor the index
    c.remove(kIndex);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[safetensors]", c.dir(), "model.safetensors", kIndex}));
  }
}

// ---------------------------------------------------------------------------------------------
// 2. A truncated model.safetensors.

TEST(HfBadInput, TruncatedSafetensors) {
  PREPARE();
  Case ref("qwen2_t");
  const std::string orig = ref.read("model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, orig.data(), 8);
  const size_t data0 = 8 + n;
  struct Cut {
    size_t size;
    std::vector<std::string> want;
  };
  const std::vector<Cut> cuts = {
      {0, {"model.safetensors"}},  // an empty file
      {3, {"file of 3 bytes is too short for the 8-byte header length"}},
      {7, {"file of 7 bytes is too short for the 8-byte header length"}},
      {8, {"header length " + std::to_string(n) + " past end of file"}},
      {8 + 100, {"header length " + std::to_string(n) + " past end of file"}},
      {data0 - 1, {"header length " + std::to_string(n) + " past end of file"}},
      {data0, {"tensor '", "data_offsets", "past the end of the data buffer"}},
      {data0 + 1000, {"tensor '", "data_offsets", "past the end of the data buffer"}},
      {data0 + (orig.size() - data0) / 2, {"tensor '", "data_offsets", "past the end of the data buffer"}},
      {orig.size() - 1, {"tensor 'model.norm.weight'", "past the end of the data buffer"}},
  };
  for (const Cut& cut : cuts) {
    Case c("qwen2_t");
    c.write("model.safetensors", orig.substr(0, cut.size));
    std::vector<std::string> want = cut.want;
    want.push_back(c.path("model.safetensors"));
    EXPECT_TRUE(Clear(load_error(c.dir()), want)) << "cut at " << cut.size << " of " << orig.size();
  }
  {
    Case c("qwen2_t");  // one byte too many: trailing data
    c.write("model.safetensors", orig + std::string(1, '\0'));
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[safetensors]", c.path("model.safetensors"), "trailing"}));
  }
}

// ---------------------------------------------------------------------------------------------
// 3. Headers that lie.

constexpr const char* kQ0 = "model.layers.0.self_attn.q_proj.weight";
constexpr const char* kK0 = "model.layers.0.self_attn.k_proj.weight";

TEST(HfBadInput, HeaderLiesAboutOffsets) {
  PREPARE();
  {
    Case c("qwen2_t");  // past the end of the data buffer
    St s = c.st();
    const uint64_t size = s.data.size();
    s.header[kQ0]["data_offsets"] = {size, size + 16384};
    c.write_st(s);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[safetensors]", c.path("model.safetensors"), std::string("tensor '") + kQ0,
                                            "past the end of the data buffer"}));
  }
  {
    Case c("qwen2_t");  // overlapping: q_proj moved onto o_proj (same size)
    St s = c.st();
    s.header[kQ0]["data_offsets"] = s.header["model.layers.0.self_attn.o_proj.weight"]["data_offsets"];
    c.write_st(s);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[safetensors]", c.path("model.safetensors"), "overlap", "tensor '"}));
  }
  {
    Case c("qwen2_t");  // overlapping by one element
    St s = c.st();
    auto& off = s.header[kQ0]["data_offsets"];
    off = {off[0].get<uint64_t>() - 4, off[1].get<uint64_t>() - 4};
    c.write_st(s);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[safetensors]", c.path("model.safetensors"), "overlap", kQ0}));
  }
  {
    Case c("qwen2_t");  // a hole: a tensor's entry removed, its bytes left
    St s = c.st();
    s.header.erase("model.layers.0.self_attn.q_proj.bias");
    c.write_st(s);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[safetensors]", c.path("model.safetensors"), "belong to no tensor",
                                            std::string("a hole before tensor '") + kQ0 + "'"}));
  }
  {
    Case c("qwen2_t");  // begin > end
    St s = c.st();
    auto& off = s.header[kQ0]["data_offsets"];
    off = {off[1], off[0]};
    c.write_st(s);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[safetensors]", c.path("model.safetensors"), kQ0, "not ordered"}));
  }
  {
    Case c("qwen2_t");  // offsets of the wrong type
    St s = c.st();
    s.header[kQ0]["data_offsets"] = "0-16384";
    c.write_st(s);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[safetensors]", c.path("model.safetensors"), kQ0, "'data_offsets'"}));
  }
}

TEST(HfBadInput, HeaderLiesAboutDtypeAndShape) {
  PREPARE();
  const auto check = [](const std::function<void(St&)>& damage, const std::vector<std::string>& want) {
    Case c("qwen2_t");
    St s = c.st();
    damage(s);
    c.write_st(s);
    std::vector<std::string> w = want;
    w.push_back("[safetensors] " + c.path("model.safetensors") + ": ");
    EXPECT_TRUE(Clear(load_error(c.dir()), w));
  };
  const std::string t = std::string("tensor '") + kQ0 + "'";
  // An unknown dtype string.
  for (const char* d : {"F33", "f32", "Q4_0", "", "FLOAT"})
    check([&](St& s) { s.header[kQ0]["dtype"] = d; }, {t, std::string("unknown dtype '") + d + "'"});
  check([&](St& s) { s.header[kQ0]["dtype"] = 32; }, {t, "'dtype'"});
  check([&](St& s) { s.header[kQ0].erase("dtype"); }, {t, "missing field 'dtype'"});
  // A dtype whose size does not match the offsets.
  check([&](St& s) { s.header[kQ0]["dtype"] = "F16"; }, {t, "span 16384 bytes, but shape [64, 64] of F16 needs 8192"});
  check([&](St& s) { s.header[kQ0]["dtype"] = "F64"; }, {t, "span 16384 bytes, but shape [64, 64] of F64 needs 32768"});
  // A shape that does not match the offsets.
  check([&](St& s) { s.header[kQ0]["shape"] = {64, 65}; }, {t, "span 16384 bytes, but shape [64, 65] of F32 needs 16640"});
  check([&](St& s) { s.header[kQ0]["shape"] = {64}; }, {t, "span 16384 bytes, but shape [64] of F32 needs 256"});
  check([&](St& s) { s.header[kQ0]["shape"] = {64, -64}; }, {t, "shape[1] = -64 is negative"});
  check([&](St& s) { s.header[kQ0]["shape"] = "64x64"; }, {t, "'shape'"});
  check([&](St& s) { s.header[kQ0].erase("shape"); }, {t, "missing field 'shape'"});
  check([&](St& s) { s.header[kQ0] = 7; }, {t, "expected an object"});
  check([&](St& s) { s.header["__metadata__"] = {{"format", 1}}; }, {"\"__metadata__\"", "'format'"});
}

TEST(HfBadInput, HeaderLengthAndJson) {
  PREPARE();
  Case ref("qwen2_t");
  const std::string orig = ref.read("model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, orig.data(), 8);
  const auto with_length = [&](uint64_t len) {
    std::string b = orig;
    std::memcpy(b.data(), &len, 8);
    return b;
  };
  const auto check = [](const std::string& bytes, const std::vector<std::string>& want) {
    Case c("qwen2_t");
    c.write("model.safetensors", bytes);
    std::vector<std::string> w = want;
    w.push_back("[safetensors] " + c.path("model.safetensors") + ": ");
    EXPECT_TRUE(Clear(load_error(c.dir()), w));
  };
  // A header length larger than the file, and huge.
  check(with_length(orig.size()), {"header length " + std::to_string(orig.size()) + " past end of file"});
  check(with_length(orig.size() - 7), {"past end of file"});
  check(with_length(~uint64_t{0}), {"header length 18446744073709551615 exceeds the limit"});
  check(with_length(0), {"header is empty"});
  // A shorter length cuts the JSON; a longer one takes data bytes into it.
  const size_t last_brace = orig.rfind('}', 8 + n - 1);
  check(with_length(last_brace - 8), {"header is not valid JSON"});  // the closing '}' cut off
  check(with_length(n + 1), {"header is not valid JSON"});
  // Invalid JSON inside the header.
  const auto replace = [&](const std::string& from, const std::string& to) {
    std::string b = orig;
    const size_t at = b.find(from, 8);
    EXPECT_LT(at, 8 + n) << from;
    b.replace(at, from.size(), to);  // same length: the data stays where it is
    return b;
  };
  check(replace("\"dtype\":\"F32\"", "\"dtype\":\"F32'"), {"header is not valid JSON"});
  check(replace("{\"__metadata__\"", "[\"__metadata__\""), {"header does not start with '{'"});
  check(replace("\"shape\":[64,64]", "\"shape\":[64,64}"), {"header is not valid JSON"});
  check(replace("\"format\":\"pt\"", "\"format\":\"\xff\xfe\""), {"header is not valid JSON"});
  {  // a duplicate tensor name (k_proj.bias renamed k_proj.weight in the header text)
    const std::string bias = "model.layers.0.self_attn.k_proj.bias";
    St s = read_st(ref.path("model.safetensors"));
    std::string h = s.header.dump();
    const size_t k = h.find("\"" + bias + "\"");
    h.replace(k, bias.size() + 2, "\"model.layers.0.self_attn.k_proj.weight\"");
    std::string out(8, '\0');
    const uint64_t len = h.size();
    std::memcpy(out.data(), &len, 8);
    check(out + h + s.data, {"duplicate tensor name 'model.layers.0.self_attn.k_proj.weight'"});
  }
}

// ---------------------------------------------------------------------------------------------
// 4. config.json.

TEST(HfBadInput, ConfigKeysOfTheWrongTypeOrRange) {
  PREPARE();
  struct KeyCase {
    std::string key;
    ojson value;
    std::string want;  // besides config.json and 'key'
  };
  const std::vector<KeyCase> cases = {
      {"num_attention_heads", "8", "must be an integer in [1, 4096], got \"8\""},
      {"num_attention_heads", 0, "must be an integer in [1, 4096], got 0"},
      {"num_attention_heads", 4.5, "got 4.5"},
      {"num_key_value_heads", -2, "got -2"},
      {"hidden_size", -64, "must be an integer in [1, 1048576], got -64"},
      {"hidden_size", "64", "got \"64\""},
      {"hidden_size", ojson::array({64}), "got [64]"},
      {"num_hidden_layers", 0, "got 0"},
      {"num_hidden_layers", true, "got true"},
      {"intermediate_size", -1, "got -1"},
      {"max_position_embeddings", "4096", "got \"4096\""},
      {"head_dim", 0, "got 0"},
      {"rms_norm_eps", ojson::array({1e-6}), "must be a number in"},
      {"rms_norm_eps", -1e-6, "must be a number in"},
      {"rms_norm_eps", "1e-6", "got \"1e-6\""},
      {"rope_theta", "1e6", "got \"1e6\""},
      {"rope_theta", -1.0, "got -1.0"},
      {"tie_word_embeddings", "yes", "must be a boolean, got \"yes\""},
      {"tie_word_embeddings", 1, "must be a boolean, got 1"},
      {"use_sliding_window", "no", "must be a boolean"},
      {"rope_scaling", 2.0, "must be an object, got 2.0"},
      {"rope_scaling", ojson::array({1, 2}), "must be an object"},
      {"rope_parameters", "x", "must be an object"},
      {"text_config", 3, "must be an object, got 3"},
      {"partial_rotary_factor", 2.0, "must be a number in [0, 1]"},
      {"quantization", 4, "must be an object, got 4"},
  };
  for (const KeyCase& k : cases) {
    Case c("qwen2_t");
    c.config(k.key, k.value);
    const std::string e = load_error(c.dir());
    EXPECT_TRUE(Clear(e, {"[hf] " + c.path("config.json") + ": ", "'" + k.key + "'", k.want}))
        << k.key << " = " << k.value.dump();
  }
  {
    Case c("qwen2_t");  // a missing required key
    c.config("num_attention_heads", ojson(ojson::value_t::discarded));
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.path("config.json"), "missing 'num_attention_heads'"}));
  }
  {
    Case c("qwen2_t");  // rope_scaling of an unknown type names the type
    c.config("rope_scaling", {{"rope_type", "warp"}, {"factor", 2.0}});
    EXPECT_TRUE(Clear(load_error(c.dir()),
                      {"[hf] " + c.path("config.json"), "rope_scaling type 'warp' is not supported"}));
  }
  {
    Case c("qwen2_t");  // a rope_scaling factor of the wrong type names rope_scaling.factor
    c.config("rope_scaling", {{"rope_type", "linear"}, {"factor", "2"}});
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.path("config.json"), "'rope_scaling.factor'", "got \"2\""}));
  }
  {
    Case c("qwen2_t");  // use_sliding_window on is refused by name
    c.config("use_sliding_window", true);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.path("config.json"), "'use_sliding_window'"}));
  }
}

TEST(HfBadInput, ConfigArchitectures) {
  PREPARE();
  const auto err_with = [](const ojson& archs, Case& c) {
    c.config("architectures", archs);
    return load_error(c.dir());
  };
  {
    Case c("qwen2_t");
    c.config("architectures", ojson(ojson::value_t::discarded));
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.path("config.json"), "missing 'architectures'"}));
  }
  {
    Case c("qwen2_t");
    EXPECT_TRUE(Clear(err_with(ojson::array(), c), {"[hf] " + c.path("config.json"), "missing 'architectures'"}));
  }
  {
    Case c("qwen2_t");
    EXPECT_TRUE(Clear(err_with("Qwen2ForCausalLM", c),
                      {"[hf] " + c.path("config.json"), "'architectures' must be an array of strings",
                       "got \"Qwen2ForCausalLM\""}));
  }
  {
    Case c("qwen2_t");
    EXPECT_TRUE(Clear(err_with(ojson::array({5}), c),
                      {"[hf] " + c.path("config.json"), "'architectures' must be an array of strings"}));
  }
  {
    Case c("qwen2_t");
    EXPECT_TRUE(Clear(err_with(ojson::object({{"a", 1}}), c),
                      {"[hf] " + c.path("config.json"), "'architectures' must be an array of strings"}));
  }
  {
    Case c("qwen2_t");
    EXPECT_TRUE(Clear(err_with(ojson::array({"NonsenseForCausalLM"}), c),
                      {"[hf] " + c.path("config.json"), "architecture 'NonsenseForCausalLM' is not supported",
                       "supported: ", "Qwen2ForCausalLM"}));
  }
}

TEST(HfBadInput, ConfigFileItself) {
  PREPARE();
  {
    Case c("qwen2_t");  // invalid JSON
    c.write("config.json", c.read("config.json").substr(0, 50));
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.path("config.json"), "not valid JSON"}));
  }
  {
    Case c("qwen2_t");
    c.write("config.json", "{\"architectures\": [\"Qwen2ForCausalLM\"],}");
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.path("config.json"), "not valid JSON"}));
  }
  {
    Case c("qwen2_t");  // not an object
    c.write("config.json", "[1, 2]");
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.path("config.json"), "not a JSON object"}));
  }
  {
    Case c("qwen2_t");  // empty
    c.write("config.json", "");
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.path("config.json"), "not valid JSON"}));
  }
  {
    Case c("qwen2_t");  // config.json missing: the folder is then not recognised as one
    c.remove("config.json");
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.dir(), "no config.json"}));
    // Through a .safetensors file of the folder the message is the clear one.
    EXPECT_TRUE(Clear(load_error(c.path("model.safetensors")), {"[hf] " + c.dir(), "no config.json"}));
  }
  {
    Case c("qwen2_t");  // config.json a directory
    c.remove("config.json");
    fs::create_directory(c.path("config.json"));
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.path("config.json"), "not a regular file"}));
  }
}

// Values that pass config.json's checks but contradict the tensors or each other.
TEST(HfBadInput, ConfigContradictsTheTensors) {
  PREPARE();
  {
    Case c("qwen2_t");  // hidden_size 128 where the tensors are 64 wide
    c.config("hidden_size", 128);
    // (shapes as GGUF lists them, contiguous dimension first)
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.dir(), "'model.embed_tokens.weight' in the folder",
                                            "shape [64, 256], expected [128, 256]"}));
  }
  {
    Case c("qwen2_t");  // 4 layers declared, 3 present
    c.config("num_hidden_layers", 4);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.dir(), "missing tensor",
                                            "'model.layers.3.input_layernorm.weight' in the folder"}));
  }
  {
    Case c("qwen2_t");  // 2 layers declared, 3 present
    c.config("num_hidden_layers", 2);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.dir(), "'model.layers.2.input_layernorm.weight' in the folder",
                                            "config.json: num_hidden_layers", "declares 2 blocks"}));
  }
  {
    Case c("qwen2_t");  // 4 heads over 3 kv heads
    c.config("num_key_value_heads", 3);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.path("config.json"),
                                            "'num_key_value_heads' 3 must divide 'num_attention_heads' 4"}));
  }
  {
    Case c("qwen2_t");  // intermediate_size absent (optional in config.json, required by qwen2)
    c.config("intermediate_size", ojson(ojson::value_t::discarded));
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.path("config.json"), "missing 'intermediate_size'"}));
  }
  {
    Case c("qwen2_t");  // untied: lm_head.weight is then required
    c.config("tie_word_embeddings", false);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.dir(), "missing tensor 'lm_head.weight'",
                                            "tie_word_embeddings is false"}));
  }
}

// ---------------------------------------------------------------------------------------------
// 5. Tensors of the wrong shape for the architecture.

TEST(HfBadInput, TensorOfTheWrongShape) {
  PREPARE();
  {
    Case c("qwen2_t");  // q_proj [64, 64] relabelled [32, 128]: consistent with its bytes
    St s = c.st();
    s.header[kQ0]["shape"] = {32, 128};
    c.write_st(s);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.dir(), std::string("'") + kQ0 + "' in the folder",
                                            "shape [128, 32], expected [64, 64]"}));
  }
  {
    Case c("qwen2_t");  // q_proj's entry swapped with k_proj's: the data of another tensor
    St s = c.st();
    std::swap(s.header[kQ0], s.header[kK0]);
    c.write_st(s);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.dir(), std::string("'") + kQ0 + "' in the folder"}));
  }
  {
    Case c("qwen2_t");  // a 1-D norm gain swapped with a shorter bias
    St s = c.st();
    std::swap(s.header["model.layers.1.input_layernorm.weight"], s.header["model.layers.1.self_attn.k_proj.bias"]);
    c.write_st(s);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.dir(), "'model.layers.1.input_layernorm.weight' in the folder"}));
  }
  {
    Case c("qwen2_t");  // a 4-D weight is refused by the folder reader, naming it
    St s = c.st();
    s.header[kQ0]["shape"] = {4, 16, 8, 8};
    c.write_st(s);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.dir(), std::string("tensor '") + kQ0 + "'", "4 dimensions"}));
  }
  {
    Case c("llama_b");  // Llama Q rows that cannot be permuted over the heads (32 rows, 6 heads)
    const std::string q1 = "model.layers.1.self_attn.q_proj.weight";
    St s = c.st(kShard1);
    ASSERT_EQ(s.header[q1]["shape"], ojson({96, 96}));
    s.header[q1]["shape"] = {32, 288};
    c.write_st(s, kShard1);
    EXPECT_TRUE(Clear(load_error(c.dir()),
                      {"[hf] " + c.dir(), "tensor '" + q1 + "'", "32 rows cannot be permuted over 6 heads"}));
  }
}

// ---------------------------------------------------------------------------------------------
// 6. Unsupported dtypes, unknown and missing tensors.

TEST(HfBadInput, TensorOfAnUnsupportedDtype) {
  PREPARE();
  // q_proj is 16384 bytes: relabel it with each other dtype, the shape fitted to the bytes.
  const std::vector<std::pair<std::string, ojson>> cases = {
      {"I32", {64, 64}},  {"U32", {64, 64}},  {"I64", {64, 32}},     {"U64", {64, 32}},
      {"F64", {64, 32}},  {"I16", {64, 128}}, {"U16", {64, 128}},    {"I8", {64, 256}},
      {"U8", {64, 256}},  {"BOOL", {64, 256}}, {"F8_E4M3", {64, 256}}, {"F8_E5M2", {64, 256}},
  };
  for (const auto& [dtype, shape] : cases) {
    Case c("qwen2_t");
    St s = c.st();
    s.header[kQ0]["dtype"] = dtype;
    s.header[kQ0]["shape"] = shape;
    c.write_st(s);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.dir(), std::string("tensor '") + kQ0 + "'",
                                            "dtype " + dtype + " is not supported"}))
        << dtype;
  }
  {
    Case c("qwen2_t");  // F16 of the right byte size loads (a supported dtype, half the elements)...
    St s = c.st();
    s.header["model.layers.0.self_attn.q_proj.bias"]["dtype"] = "F16";
    s.header["model.layers.0.self_attn.q_proj.bias"]["shape"] = {128};
    c.write_st(s);
    // ... and then has the wrong shape for the architecture.
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.dir(), "'model.layers.0.self_attn.q_proj.bias' in the folder"}));
  }
}

TEST(HfBadInput, UnknownAndMissingTensors) {
  PREPARE();
  const auto renamed = [](St& s, const std::string& from, const std::string& to) {
    ojson h;
    for (auto it = s.header.begin(); it != s.header.end(); ++it) h[it.key() == from ? to : it.key()] = it.value();
    s.header = h;
  };
  for (const std::string& extra : {std::string("model.extra.weight"), std::string("model.layers.0.self_attn.q_proj.scales"),
                                   std::string("model.layers.0.mlp.experts.0.up_proj.weight"),
                                   std::string("transformer.h.0.attn.weight"), std::string("model.layers.x.mlp.up_proj.weight"),
                                   std::string("lm_head.weight.extra")}) {
    Case c("qwen2_t");
    St s = c.st();
    renamed(s, "model.layers.0.self_attn.q_proj.bias", extra);
    c.write_st(s);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.dir(), "tensor '" + extra + "' has no place in a 'qwen2' model",
                                            "Qwen2ForCausalLM"}))
        << extra;
  }
  {
    Case c("qwen2_t");  // a tensor of a layer past num_hidden_layers
    St s = c.st();
    renamed(s, "model.layers.2.mlp.up_proj.weight", "model.layers.7.mlp.up_proj.weight");
    c.write_st(s);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.dir(), "'model.layers.7.mlp.up_proj.weight' in the folder",
                                            "config.json: num_hidden_layers", "declares 3 blocks"}));
  }
  {
    Case c("qwen2_t");  // a required tensor absent (model.norm.weight, the last: its bytes cut too)
    St s = c.st();
    const uint64_t begin = s.header["model.norm.weight"]["data_offsets"][0];
    s.header.erase("model.norm.weight");
    s.data.resize(begin);
    c.write_st(s);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.dir(), "missing tensor", "'model.norm.weight' in the folder"}));
  }
  {
    Case c("llama_b");  // untied llama_b without lm_head (dropped from shard and index)
    St s = c.st(kShard1);
    const uint64_t b0 = s.header["lm_head.weight"]["data_offsets"][0], b1 = s.header["lm_head.weight"]["data_offsets"][1];
    s.header.erase("lm_head.weight");  // its bytes dropped, the tensors after them moved down
    for (auto it = s.header.begin(); it != s.header.end(); ++it) {
      if (it.key() == "__metadata__") continue;
      auto& off = it.value()["data_offsets"];
      if (off[0].get<uint64_t>() >= b1) off = {off[0].get<uint64_t>() - (b1 - b0), off[1].get<uint64_t>() - (b1 - b0)};
    }
    s.data.erase(b0, b1 - b0);
    c.write_st(s, kShard1);
    ojson j = c.json(kIndex);
    j["weight_map"].erase("lm_head.weight");
    c.write_json(kIndex, j);
    EXPECT_TRUE(Clear(load_error(c.dir()), {"[hf] " + c.dir(), "missing tensor 'lm_head.weight'"}));
  }
}

// ---------------------------------------------------------------------------------------------
// 7. tokenizer.json, tokenizer_config.json, generation_config.json.

const char* const kTokenizer = R"({
  "version": "1.0",
  "added_tokens": [
    {"id": 6, "content": "<|endoftext|>", "single_word": false, "lstrip": false, "rstrip": false,
     "normalized": false, "special": true}
  ],
  "normalizer": null,
  "pre_tokenizer": null,
  "post_processor": null,
  "decoder": null,
  "model": {
    "type": "BPE",
    "dropout": null,
    "unk_token": null,
    "fuse_unk": false,
    "byte_fallback": false,
    "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4, "ca": 5, "<|endoftext|>": 6},
    "merges": ["a b", "ab c", "c a"]
  }
})";

// A folder with a valid tokenizer.json, tokenizer_config.json and generation_config.json.
void add_tokenizer(const Case& c) {
  c.write("tokenizer.json", kTokenizer);
  c.write("tokenizer_config.json",
          R"({"add_bos_token": false, "eos_token": "<|endoftext|>", "chat_template": "{{ messages[0]['content'] }}"})");
  c.write("generation_config.json", R"({"eos_token_id": 6, "temperature": 0.7, "top_k": 20})");
}

TEST(HfBadInput, ValidTokenizerLoads) {
  PREPARE();
  Case c("qwen2_t");
  add_tokenizer(c);
  ASSERT_EQ(load_error(c.dir()), kLoaded);
  auto f = open_model_file(c.dir());
  ASSERT_TRUE(f.is_ok()) << f.message();
  auto t = tokenizer::load_tokenizer(*f);
  ASSERT_TRUE(t.is_ok()) << t.message();
  EXPECT_EQ((*t)->encode("abcab", false, true), (std::vector<int32_t>{4, 3}));
  EXPECT_EQ((*t)->encode("cab<|endoftext|>", false, true), (std::vector<int32_t>{2, 3, 6}));  // "a b" ranks first
  auto h = tokenizer::HfTokenizer::create(kTokenizer, {});
  ASSERT_TRUE(h.is_ok()) << h.message();
}

TEST(HfBadInput, BadTokenizerJson) {
  PREPARE();
  const auto with_model = [](const std::function<void(ojson&)>& f) {
    ojson j = ojson::parse(kTokenizer);
    f(j);
    return j.dump();
  };
  struct TokCase {
    std::string text;
    std::vector<std::string> want;
  };
  const std::vector<TokCase> cases = {
      {with_model([](ojson& j) { j["model"]["type"] = "Unigram"; }), {"model.type 'Unigram' is not supported (supported: BPE)"}},
      {with_model([](ojson& j) { j["model"]["type"] = "WordPiece"; }), {"model.type 'WordPiece' is not supported"}},
      {with_model([](ojson& j) { j["model"]["type"] = "Nonsense"; }), {"model.type 'Nonsense' is not supported"}},
      {with_model([](ojson& j) { j["model"]["merges"].push_back("a z"); }),
       {"model.merges[3]", "'az' or a part of it is not in model.vocab"}},
      {with_model([](ojson& j) { j["model"]["merges"].push_back("b c"); }),  // "bc" is not a token
       {"model.merges[3]", "not in model.vocab"}},
      {with_model([](ojson& j) { j["model"]["merges"].push_back("abc"); }), {"model.merges[3] 'abc' is not 'a b'"}},
      {with_model([](ojson& j) { j["model"]["merges"] = 3; }), {"model.merges"}},
      {with_model([](ojson& j) { j["model"]["vocab"]["b"] = "one"; }), {"model.vocab['b']"}},
      {with_model([](ojson& j) { j["model"]["vocab"] = ojson::object(); }), {"model.vocab"}},
      {with_model([](ojson& j) { j["model"]["unk_token"] = "<unk>"; }), {"model.unk_token '<unk>' is not in model.vocab"}},
      {with_model([](ojson& j) { j.erase("model"); }), {"model: missing"}},
      {with_model([](ojson& j) { j["added_tokens"] = 1; }), {"added_tokens"}},
      {with_model([](ojson& j) { j["added_tokens"][0]["id"] = "six"; }), {"added_tokens[0]"}},
      {with_model([](ojson& j) { j["pre_tokenizer"] = {{"type", "Nonsense"}}; }), {"pre_tokenizer", "'Nonsense'"}},
      {with_model([](ojson& j) { j["normalizer"] = {{"type", "Precompiled"}}; }), {"normalizer", "'Precompiled'"}},
      {with_model([](ojson& j) { j["decoder"] = {{"type", "WordPiece"}}; }), {"decoder", "'WordPiece'"}},
      {std::string(kTokenizer).substr(0, 100), {"not valid JSON"}},
      {"", {"not valid JSON"}},
      {"[]", {"not a JSON object"}},
  };
  for (const TokCase& k : cases) {
    Case c("qwen2_t");
    add_tokenizer(c);
    c.write("tokenizer.json", k.text);
    // load_model does not parse tokenizer.json (it is carried as text); the tokenizer does.
    EXPECT_EQ(load_error(c.dir()), kLoaded);
    std::vector<std::string> want = k.want;
    want.push_back("[tokenizer.json] " + c.path("tokenizer.json") + ": ");
    EXPECT_TRUE(Clear(tokenizer_error(c.dir()), want)) << k.text.substr(0, 200);
    // HfTokenizer::create names its origin.
    tokenizer::HfTokenizer::Options o;
    o.origin = "/x/tokenizer.json";
    auto h = tokenizer::HfTokenizer::create(k.text, o);
    ASSERT_FALSE(h.is_ok());
    want.back() = "[tokenizer.json] /x/tokenizer.json: ";
    EXPECT_TRUE(Clear(h.message(), want));
  }
  {
    Case c("qwen2_t");  // no tokenizer.json at all
    EXPECT_TRUE(Clear(tokenizer_error(c.dir()), {"[tokenizer] " + c.dir(), "tokenizer.json"}));
  }
}

TEST(HfBadInput, BadTokenizerConfigAndGenerationConfig) {
  PREPARE();
  struct SideCase {
    std::string file, text;
    std::vector<std::string> want;  // besides "[hf] DIR/file: "
  };
  const std::vector<SideCase> cases = {
      {"tokenizer_config.json", R"({"chat_template": 42})", {"'chat_template' must be a string or a list, got 42"}},
      {"tokenizer_config.json", R"({"chat_template": {"default": "x"}})", {"'chat_template' must be a string or a list"}},
      {"tokenizer_config.json", R"({"chat_template": [{"name": "default"}]})", {"'chat_template' list entries"}},
      {"tokenizer_config.json", R"({"chat_template": [7]})", {"'chat_template' list entries"}},
      {"tokenizer_config.json", R"({"add_bos_token": "yes"})", {"'add_bos_token' must be a boolean, got \"yes\""}},
      {"tokenizer_config.json", R"({"add_eos_token": 1})", {"'add_eos_token' must be a boolean, got 1"}},
      {"tokenizer_config.json", R"({"eos_token": 6})", {"'eos_token' must be a string or {\"content\": ...}, got 6"}},
      {"tokenizer_config.json", R"({"bos_token": {"content": 1}})", {"'bos_token'"}},
      {"tokenizer_config.json", R"({"chat_template": )", {"not valid JSON"}},
      {"tokenizer_config.json", R"("a string")", {"not a JSON object"}},
      {"generation_config.json", R"({"eos_token_id": "6"})", {"'eos_token_id' must be a token id or a list of token ids, got \"6\""}},
      {"generation_config.json", R"({"eos_token_id": [6, "7"]})", {"'eos_token_id'", "got [6,\"7\"]"}},
      {"generation_config.json", R"({"eos_token_id": -1})", {"'eos_token_id'", "got -1"}},
      {"generation_config.json", R"({"eos_token_id": 4294967296})", {"'eos_token_id'", "got 4294967296"}},
      {"generation_config.json", R"({"eos_token_id": 6.5})", {"'eos_token_id' must be a token id or a list of token ids, got 6.5"}},
      {"generation_config.json", R"({"temperature": "hot"})", {"'temperature' must be a number in", "got \"hot\""}},
      {"generation_config.json", R"({"temperature": -1})", {"'temperature'", "got -1"}},
      {"generation_config.json", R"({"top_p": 2})", {"'top_p'", "got 2"}},
      {"generation_config.json", R"({"top_k": 1.5})", {"'top_k'", "got 1.5"}},
      {"generation_config.json", R"({"min_p": [0.1]})", {"'min_p'"}},
      {"generation_config.json", R"({"do_sample": "no"})", {"'do_sample' must be a boolean"}},
      {"generation_config.json", R"({"eos_token_id": )", {"not valid JSON"}},
      {"generation_config.json", R"([6])", {"not a JSON object"}},
  };
  for (const SideCase& k : cases) {
    Case c("qwen2_t");
    add_tokenizer(c);
    c.write(k.file, k.text);
    std::vector<std::string> want = k.want;
    want.push_back("[hf] " + c.path(k.file) + ": ");
    EXPECT_TRUE(Clear(load_error(c.dir()), want)) << k.file << ": " << k.text;
  }
}

// ---------------------------------------------------------------------------------------------
// 8. Seeded random byte damage: load_model returns (ok or a "[module] ..." error), never crashes.

struct FuzzStats {
  int ok = 0, err = 0;
};

// Damages bytes [lo, hi) of `file` in `n` seeded ways (one to six bytes each), loading each.
FuzzStats fuzz_file(const std::string& model, const std::string& file, size_t lo, size_t hi, int n, uint64_t seed) {
  FuzzStats st;
  Case c(model);
  const std::string orig = c.read(file);
  hi = std::min(hi, orig.size());
  std::mt19937_64 rng(seed);
  const char kJsonBytes[] = "{}[]\",:-0123456789.eE \\tnulfase";
  for (int it = 0; it < n; ++it) {
    std::string b = orig;
    const int n_bytes = it % 2 == 0 ? 1 : 1 + static_cast<int>(rng() % 6);
    for (int k = 0; k < n_bytes; ++k) {
      const size_t pos = lo + rng() % (hi - lo);
      switch (rng() % 3) {
        case 0: b[pos] = static_cast<char>(rng()); break;
        case 1: b[pos] = kJsonBytes[rng() % (sizeof(kJsonBytes) - 1)]; break;
        default: b[pos] = static_cast<char>(b[pos] ^ (1u << (rng() % 8))); break;
      }
    }
    c.write(file, b);
    const std::string e = load_error(c.dir());
    if (e == kLoaded) {
      ++st.ok;
      continue;
    }
    ++st.err;
    EXPECT_FALSE(e.empty()) << file << " iteration " << it;
    EXPECT_EQ(e.substr(0, 1), "[") << file << " iteration " << it << ": " << e;
    if (::testing::Test::HasFailure()) break;
  }
  return st;
}

TEST(HfBadInput, FuzzConfigJson) {
  PREPARE();
  Case ref("qwen2_t");
  const size_t size = ref.read("config.json").size();
  const FuzzStats st = fuzz_file("qwen2_t", "config.json", 0, size, 300, 20240601);
  EXPECT_GT(st.err, 0);
  EXPECT_EQ(st.ok + st.err, 300);
  RecordProperty("loaded", st.ok);
}

TEST(HfBadInput, FuzzSafetensorsHeader) {
  PREPARE();
  Case ref("qwen2_t");
  const std::string b = ref.read("model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  const FuzzStats st = fuzz_file("qwen2_t", "model.safetensors", 0, 8 + n, 300, 77);
  EXPECT_GT(st.err, 0);
  EXPECT_EQ(st.ok + st.err, 300);
}

TEST(HfBadInput, FuzzShardHeaderAndIndex) {
  PREPARE();
  Case ref("llama_b");
  const std::string b = ref.read(kShard2);
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  FuzzStats st = fuzz_file("llama_b", kShard2, 0, 8 + n, 150, 5);
  EXPECT_EQ(st.ok + st.err, 150);
  st = fuzz_file("llama_b", kIndex, 0, ref.read(kIndex).size(), 150, 6);
  EXPECT_GT(st.err, 0);
  EXPECT_EQ(st.ok + st.err, 150);
}

TEST(HfBadInput, FuzzSideFiles) {
  PREPARE();
  // tokenizer_config.json / generation_config.json damage must also give ok or a "[...]" error.
  for (const char* file : {"tokenizer_config.json", "generation_config.json"}) {
    Case c("qwen2_t");
    add_tokenizer(c);
    const std::string orig = c.read(file);
    std::mt19937_64 rng(std::strlen(file));
    for (int it = 0; it < 100; ++it) {
      std::string b = orig;
      for (int k = 0, m = 1 + static_cast<int>(rng() % 4); k < m; ++k) b[rng() % b.size()] = static_cast<char>(rng());
      c.write(file, b);
      const std::string e = load_error(c.dir());
      if (e != kLoaded) {
        ASSERT_EQ(e.substr(0, 1), "[") << file << ": " << e;
      }
      const std::string t = tokenizer_error(c.dir());
      if (t != kLoaded) {
        ASSERT_EQ(t.substr(0, 1), "[") << file << ": " << t;
      }
    }
  }
}

}  // namespace
}  // namespace specula
