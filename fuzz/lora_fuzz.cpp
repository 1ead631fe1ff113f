// fuzz/lora_fuzz.cpp — libFuzzer target for LoRA adapters (model/lora.h): llama.cpp's GGUF
// LoRA files and PEFT folders (adapter_config.json + adapter_model.safetensors), loaded
// against a tiny Llama model, then applied in a forward.
// The base model: a Hugging Face folder written once per process (config.json +
// model.safetensors, F32, hidden 32, 2 layers, 2 heads, 1 KV head, intermediate 32, vocabulary
// 32: the shapes fuzz/make_seeds.py's lora seeds fit), loaded with load_model.
// Input: a selector byte, then parts separated by "\x00\x01" (fuzz_util.h): bit 0 clear —
// part 0 is a GGUF adapter file; set — parts 0 and 1 are adapter_config.json and
// adapter_model.safetensors of a PEFT folder. Files go to a private folder (/dev/shm when
// there).
// Property: load_lora returns an adapter or an error naming "[lora]" (or "[mmap]",
// "[safetensors]", "[gguf]" for the container); a loaded adapter runs a 2-row forward (one row
// with it at the scale of bits 1-2 of the selector, one without) that returns a status
// without crashing.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/lora.h"
#include "model/model.h"
#include "state/state_rows.h"
#include "fuzz_util.h"

namespace {
namespace fs = std::filesystem;

constexpr int kHidden = 32, kInter = 32, kVocab = 32, kHeads = 2, kKvHeads = 1, kLayers = 2;

fs::path dir_path() {
  const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
  return base / ("specula_lora_fuzz." + std::to_string(getpid()));
}

const fs::path& dir() {
  static const fs::path d = [] {
    fs::path p = dir_path();
    fs::create_directories(p / "base");
    fs::create_directories(p / "peft");
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(dir_path(), ec);
    });
    return p;
  }();
  return d;
}

void put(const fs::path& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The tiny Llama folder: every weight a small deterministic pattern.
std::unique_ptr<specula::Model> base_model() {
  struct T {
    std::string name;
    std::vector<int64_t> shape;
  };
  const int hd = kHidden / kHeads;
  std::vector<T> ts = {{"model.embed_tokens.weight", {kVocab, kHidden}}, {"model.norm.weight", {kHidden}},
                       {"lm_head.weight", {kVocab, kHidden}}};
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    ts.push_back({p + "input_layernorm.weight", {kHidden}});
    ts.push_back({p + "post_attention_layernorm.weight", {kHidden}});
    ts.push_back({p + "self_attn.q_proj.weight", {kHeads * hd, kHidden}});
    ts.push_back({p + "self_attn.k_proj.weight", {kKvHeads * hd, kHidden}});
    ts.push_back({p + "self_attn.v_proj.weight", {kKvHeads * hd, kHidden}});
    ts.push_back({p + "self_attn.o_proj.weight", {kHidden, kHeads * hd}});
    ts.push_back({p + "mlp.gate_proj.weight", {kInter, kHidden}});
    ts.push_back({p + "mlp.up_proj.weight", {kInter, kHidden}});
    ts.push_back({p + "mlp.down_proj.weight", {kHidden, kInter}});
  }
  std::string header = "{", data;
  uint32_t state = 12345;
  for (const T& t : ts) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const size_t begin = data.size();
    for (int64_t i = 0; i < n; ++i) {
      state = state * 1664525u + 1013904223u;
      const float v = t.shape.size() == 1 ? 1.0f : (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 0.2f;
      data.append(reinterpret_cast<const char*>(&v), sizeof v);
    }
    std::string shape;
    for (int64_t d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") + std::string("\"") + t.name + "\":{\"dtype\":\"F32\",\"shape\":[" + shape +
              "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(data.size()) + "]}";
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  std::string file(8, '\0');
  const uint64_t hlen = header.size();
  std::memcpy(file.data(), &hlen, 8);
  file += header + data;
  put(dir() / "base" / "model.safetensors", file);
  put(dir() / "base" / "config.json",
      "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":" + std::to_string(kHidden) +
          ",\"intermediate_size\":" + std::to_string(kInter) + ",\"vocab_size\":" + std::to_string(kVocab) +
          ",\"num_attention_heads\":" + std::to_string(kHeads) + ",\"num_key_value_heads\":" + std::to_string(kKvHeads) +
          ",\"num_hidden_layers\":" + std::to_string(kLayers) +
          ",\"max_position_embeddings\":64,\"rms_norm_eps\":1e-6,\"rope_theta\":10000.0,\"tie_word_embeddings\":false}");
  auto m = specula::load_model((dir() / "base").string());
  if (!m) specula::fuzz::fail("the base model does not load", m.message());
  return std::move(m).value();
}

specula::Model& model() {
  static std::unique_ptr<specula::Model> m = base_model();
  return *m;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace specula;
  fuzz::Input in(data, size);
  const uint8_t mode = in.byte();
  Model& m = model();
  std::string path;
  if (mode & 1) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir() / "peft", ec)) fs::remove(e.path(), ec);
    put(dir() / "peft" / "adapter_config.json", in.part());
    put(dir() / "peft" / "adapter_model.safetensors", in.part());
    path = (dir() / "peft").string();
  } else {
    path = (dir() / "adapter.gguf").string();
    put(path, in.part());
  }
  auto a = m.load_lora(path);
  if (!a.is_ok()) {
    const std::string& msg = a.message();
    if (!fuzz::starts_with(msg, "[lora]") && !fuzz::starts_with(msg, "[mmap]") && !fuzz::starts_with(msg, "[safetensors]") &&
        !fuzz::starts_with(msg, "[gguf]"))
      fuzz::fail("an error that names no reader", msg);
    return 0;
  }
  static const float kScales[] = {1.0f, 0.5f, -2.0f, 0.0f};
  const LoraSet set{{LoraWeight{*a, kScales[(mode >> 1) & 3]}}};
  auto st = new_state(m, CacheOptions{}, 16);
  if (!st || !st->reserve(2).is_ok()) return 0;
  for (int r = 0; r < 2; ++r) {
    auto row = st->new_row();
    if (!row) return 0;
    st->insert(std::move(row).value());
  }
  Tensor hidden;
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5};
  const int32_t rows[2] = {0, 1};
  const int64_t n_tokens[2] = {3, 2};
  const LoraSet* sets[2] = {&set, nullptr};
  Batch b{2, 0, tokens.data(), rows};
  b.n_tokens = n_tokens;
  b.lora = sets;
  (void)m.forward(b, *st, hidden);
  return 0;
}
