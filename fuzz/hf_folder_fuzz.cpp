// fuzz/hf_folder_fuzz.cpp — libFuzzer target for a Hugging Face / MLX model folder
// (formats/hf_folder.h over formats/safetensors.h's Folder): config.json's mapping to GGUF
// metadata, the safetensors shards and their index, tokenizer_config.json and
// generation_config.json, the tensor-name rules and transforms (permutes, MLX affine codes).
// Input: parts separated by "\x00\x01" (fuzz_util.h) — config.json, model.safetensors,
// tokenizer_config.json, generation_config.json, model.safetensors.index.json; a selector
// byte first: bit 0 writes the index and the shard as model-00001-of-00001.safetensors
// instead of the single file. They are written to a private folder (under $TMPDIR, /dev/shm
// when there) and opened with hf::open_folder.
// Property: open_folder returns a folder or an error naming "[hf]", "[safetensors]" or
// "[mmap]"; a folder it returns is walked (metadata, every tensor's first and last byte).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "formats/gguf.h"
#include "formats/hf_folder.h"
#include "fuzz_util.h"

namespace {
namespace fs = std::filesystem;

fs::path folder_path() {
  const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
  return base / ("specula_hf_fuzz." + std::to_string(getpid()));
}

const fs::path& folder() {
  static const fs::path dir = [] {
    fs::path d = folder_path();
    fs::create_directories(d);
    std::atexit([] {  // the folder goes with the process (a crash leaves it: it holds the input)
      std::error_code ec;
      fs::remove_all(folder_path(), ec);
    });
    return d;
  }();
  return dir;
}

void put(const std::string& name, std::string_view bytes) {
  std::ofstream(folder() / name, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace specula;
  fuzz::Input in(data, size);
  const uint8_t mode = in.byte();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder(), ec)) fs::remove(e.path(), ec);
  put("config.json", in.part());
  const std::string_view shard = in.part();
  put((mode & 1) ? "model-00001-of-00001.safetensors" : "model.safetensors", shard);
  if (auto t = in.part(); !t.empty()) put("tokenizer_config.json", t);
  if (auto g = in.part(); !g.empty()) put("generation_config.json", g);
  if (mode & 1) put("model.safetensors.index.json", in.part());
  auto r = hf::open_folder(folder().string());
  if (!r.is_ok()) {
    const std::string& m = r.message();
    if (!fuzz::starts_with(m, "[hf]") && !fuzz::starts_with(m, "[safetensors]") && !fuzz::starts_with(m, "[mmap]"))
      fuzz::fail("an error that names no reader", m);
    return 0;
  }
  volatile size_t sink = gguf::describe(*r).size();
  for (const gguf::TensorInfo& t : r->tensors())
    if (t.n_bytes > 0) sink = sink + t.data[0] + t.data[t.n_bytes - 1];
  return 0;
}
