// Model loading errors on small synthetic GGUF files: unsupported architecture, a
// missing hyperparameter key (named in the error), a missing tensor, a wrong shape.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "model/model.h"
#include "../test_util.h"

namespace specula {
namespace {

// Minimal GGUF v3 writer: u32 and string metadata, F32 tensors.
class TinyGguf {
 public:
  void u32(const std::string& k, uint32_t v) { kv_.push_back({k, 4, pack(v)}); }
  void f32(const std::string& k, float v) { kv_.push_back({k, 6, pack(v)}); }
  void str(const std::string& k, const std::string& v) { kv_.push_back({k, 8, pack_str(v)}); }
  void tensor(const std::string& name, std::vector<uint64_t> shape) { tensors_.push_back({name, std::move(shape)}); }
  std::string write(const std::string& file) {
    std::string b = "GGUF";
    b += pack(uint32_t{3});
    b += pack(uint64_t{tensors_.size()});
    b += pack(uint64_t{kv_.size()});
    for (const auto& e : kv_) {
      b += pack_str(e.key);
      b += pack(e.type);
      b += e.bytes;
    }
    uint64_t off = 0;
    std::vector<uint64_t> sizes;
    for (const auto& t : tensors_) {
      b += pack_str(t.name);
      b += pack(static_cast<uint32_t>(t.shape.size()));
      uint64_t n = 1;
      for (uint64_t d : t.shape) {
        b += pack(d);
        n *= d;
      }
      b += pack(uint32_t{0});  // F32
      b += pack(off);
      sizes.push_back(n * 4);
      off += (n * 4 + 31) / 32 * 32;
    }
    while (b.size() % 32 != 0) b += '\0';
    for (uint64_t s : sizes) {
      b += std::string(s, '\0');
      while (b.size() % 32 != 0) b += '\0';
    }
    const auto path = std::filesystem::temp_directory_path() / file;
    std::ofstream(path, std::ios::binary) << b;
    return path.string();
  }

 private:
  struct Kv {
    std::string key;
    uint32_t type;
    std::string bytes;
  };
  struct T {
    std::string name;
    std::vector<uint64_t> shape;
  };
  template <class V>
  static std::string pack(V v) {
    std::string s(sizeof(V), '\0');
    std::memcpy(s.data(), &v, sizeof(V));
    return s;
  }
  static std::string pack_str(const std::string& v) { return pack(uint64_t{v.size()}) + v; }
  std::vector<Kv> kv_;
  std::vector<T> tensors_;
};

TinyGguf tiny_gemma3() {
  TinyGguf g;
  g.str("general.architecture", "gemma3");
  g.u32("gemma3.embedding_length", 64);
  g.u32("gemma3.block_count", 1);
  g.u32("gemma3.feed_forward_length", 128);
  g.u32("gemma3.attention.head_count", 2);
  g.u32("gemma3.attention.head_count_kv", 1);
  g.u32("gemma3.attention.key_length", 32);
  g.u32("gemma3.context_length", 256);
  g.u32("gemma3.attention.sliding_window", 16);
  g.f32("gemma3.attention.layer_norm_rms_epsilon", 1e-6f);
  g.tensor("token_embd.weight", {64, 100});
  g.tensor("output_norm.weight", {64});
  for (const char* n : {"attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"})
    g.tensor(std::string("blk.0.") + n + ".weight", {64});
  g.tensor("blk.0.attn_q_norm.weight", {32});
  g.tensor("blk.0.attn_k_norm.weight", {32});
  g.tensor("blk.0.attn_q.weight", {64, 64});
  g.tensor("blk.0.attn_k.weight", {64, 32});
  g.tensor("blk.0.attn_v.weight", {64, 32});
  g.tensor("blk.0.attn_output.weight", {64, 64});
  g.tensor("blk.0.ffn_gate.weight", {64, 128});
  g.tensor("blk.0.ffn_up.weight", {64, 128});
  g.tensor("blk.0.ffn_down.weight", {128, 64});
  return g;
}

TEST(ModelLoad, TinyGemma3LoadsAndRuns) {
  auto m = load_model(tiny_gemma3().write("specula_tiny_gemma3.gguf"));
  ASSERT_TRUE(m.is_ok()) << m.message();
  EXPECT_EQ((*m)->info().n_vocab, 100);
  auto cache = testing::make_state(**m, 1, 32);
  ASSERT_TRUE(cache.is_ok());
  Tensor hidden;
  const int32_t ids[3] = {1, 2, 3}, rows[1] = {0};
  ASSERT_TRUE((*m)->forward(Batch{1, 3, ids, rows}, *cache, hidden).is_ok());
  EXPECT_EQ(hidden.dim(0), 3);
}

TEST(ModelLoad, UnsupportedArchitectureIsNamed) {
  TinyGguf g;
  g.str("general.architecture", "mamba9");
  auto m = load_model(g.write("specula_tiny_arch.gguf"));
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.message().find("unsupported architecture 'mamba9'"), std::string::npos) << m.message();
  EXPECT_NE(m.message().find("gemma3"), std::string::npos) << m.message();  // lists what is supported
}

TEST(ModelLoad, MissingKeyIsNamed) {
  TinyGguf g;
  g.str("general.architecture", "gemma3");
  g.u32("gemma3.embedding_length", 64);
  auto m = load_model(g.write("specula_tiny_key.gguf"));
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.message().find("gemma3.block_count"), std::string::npos) << m.message();
}

TEST(ModelLoad, MissingTensorAndWrongShapeAreNamed) {
  TinyGguf g = tiny_gemma3();
  g.tensor("blk.0.extra.weight", {4});
  auto ok = load_model(g.write("specula_tiny_extra.gguf"));
  EXPECT_TRUE(ok.is_ok()) << ok.message();  // extra tensors are ignored

  TinyGguf bad;
  bad.str("general.architecture", "gemma3");
  for (const auto& [k, v] : std::vector<std::pair<std::string, uint32_t>>{
           {"gemma3.embedding_length", 64}, {"gemma3.block_count", 1}, {"gemma3.feed_forward_length", 128},
           {"gemma3.attention.head_count", 2}, {"gemma3.attention.head_count_kv", 1},
           {"gemma3.attention.key_length", 32}, {"gemma3.context_length", 256},
           {"gemma3.attention.sliding_window", 16}})
    bad.u32(k, v);
  bad.f32("gemma3.attention.layer_norm_rms_epsilon", 1e-6f);
  bad.tensor("token_embd.weight", {64, 100});
  bad.tensor("output_norm.weight", {63});
  auto m = load_model(bad.write("specula_tiny_shape.gguf"));
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.message().find("output_norm.weight"), std::string::npos) << m.message();
  EXPECT_NE(m.message().find("expected [64]"), std::string::npos) << m.message();
}

}  // namespace
}  // namespace specula
