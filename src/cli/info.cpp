// cli/info.cpp — `specula info`: a GGUF file's metadata and tensor table and, for a
// supported architecture, the KV bytes per token of its layers per cache type; or a
// .safetensors file's / Hugging Face / MLX folder's config essentials, tokenizer kind, end
// ids and tensor table.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/hub.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "kernels/kernels.h"

namespace specula::cli {
namespace {

// A JSON file of a model folder, or null when absent; a file that is not JSON is an error.
Result<nlohmann::json> folder_json(const std::filesystem::path& p) {
  std::error_code ec;
  if (!std::filesystem::exists(p, ec)) return nlohmann::json();
  std::ifstream in(p);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) return Status::error("[info] " + p.string() + ": not valid JSON");
  return j;
}

// `specula info` on a Hugging Face / MLX model folder or a .safetensors file: the folder's
// config.json (architecture, sizes, dtype, MLX quantization), tokenizer kind, end ids, and
// the tensor table. (Running such a folder is not implemented yet: the loader reads GGUF.)
int run_info_safetensors(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<const safetensors::TensorInfo*> tensors;
  std::optional<safetensors::Folder> folder;
  std::optional<safetensors::File> file;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    auto f = safetensors::Folder::open(path);
    if (!f) return fail(f.message());
    folder.emplace(std::move(f).value());
    tensors = folder->tensors();
    std::printf("folder %s: %s\n", path.c_str(),
                folder->sharded() ? ("model.safetensors.index.json, " + std::to_string(folder->shards().size()) + " shards").c_str()
                                  : "model.safetensors");
    for (const char* name : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
      auto j = folder_json(fs::path(path) / name);
      if (!j) return fail(j.message());
      if (j->is_null()) {
        std::printf("  %s: absent\n", name);
        continue;
      }
      nlohmann::json shown = nlohmann::json::object();
      const auto pick = [&](const nlohmann::json& from, std::initializer_list<const char*> keys) {
        if (!from.is_object()) return;
        for (const char* k : keys)
          if (from.contains(k)) shown[k] = from[k];
      };
      const std::string n = name;
      if (n == "config.json") {
        pick(*j, {"architectures", "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
                  "rope_theta", "rope_scaling", "tie_word_embeddings", "torch_dtype", "quantization",
                  "quantization_config"});
      } else if (n == "generation_config.json") {
        pick(*j, {"eos_token_id", "bos_token_id", "temperature", "top_p", "top_k", "do_sample"});
      } else if (n == "tokenizer.json") {
        if (j->is_object() && j->contains("model") && (*j)["model"].is_object()) pick((*j)["model"], {"type"});
        if (j->is_object() && j->contains("added_tokens") && (*j)["added_tokens"].is_array())
          shown["added_tokens"] = (*j)["added_tokens"].size();
      } else {
        pick(*j, {"tokenizer_class", "bos_token", "eos_token"});
        if (j->is_object() && j->contains("chat_template")) shown["chat_template"] = "present";
      }
      std::printf("  %s: %s\n", name, shown.dump().c_str());
    }
    for (const auto& [k, v] : folder->index_metadata()) std::printf("  index metadata %s = %s\n", k.c_str(), v.c_str());
  } else {
    auto f = safetensors::File::open(path);
    if (!f) return fail(f.message());
    file.emplace(std::move(f).value());
    for (const safetensors::TensorInfo& t : file->tensors()) tensors.push_back(&t);
    std::printf("file %s: header %llu bytes\n", path.c_str(), static_cast<unsigned long long>(file->header_size()));
    for (const auto& [k, v] : file->metadata()) std::printf("  metadata %s = %s\n", k.c_str(), v.c_str());
  }
  std::printf("\ntensors (%zu):\n  %-52s %-6s %-22s %s\n", tensors.size(), "name", "dtype", "shape (row-major)",
              folder && folder->sharded() ? "bytes  shard" : "bytes");
  std::map<std::string, std::pair<int64_t, uint64_t>> by_type;
  for (const safetensors::TensorInfo* t : tensors) {
    std::string shape = "[";
    for (size_t i = 0; i < t->shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(t->shape[i]);
    shape += "]";
    const std::string type(safetensors::element_type_name(t->type));
    std::printf("  %-52s %-6s %-22s %zu", t->name.c_str(), type.c_str(), shape.c_str(), t->n_bytes);
    if (folder && folder->sharded())
      std::printf("  %s", fs::path(folder->shard_of(t->name)->path()).filename().string().c_str());
    std::printf("\n");
    by_type[type].first += 1;
    by_type[type].second += t->n_bytes;
  }
  std::printf("totals:\n");
  for (const auto& [type, n] : by_type)
    std::printf("  %-6s %lld tensors, %.1f MiB\n", type.c_str(), static_cast<long long>(n.first),
                static_cast<double>(n.second) / (1 << 20));
  return 0;
}

int run_info(const std::string& file, const CacheArgs& cache) {
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec) ||
      (file.size() > 12 && file.compare(file.size() - 12, 12, ".safetensors") == 0))
    return run_info_safetensors(file);
  auto f = gguf::GgufFile::open(file);
  if (!f) return fail(f.message());
  std::fputs(gguf::describe(*f).c_str(), stdout);
  // KV bytes per token of the model's layers (when its architecture is supported).
  auto model = load_model(file, ModelOptions{1, nullptr});
  if (!model) {
    std::printf("KV cache: (model not loadable: %s)\n", model.message().c_str());
    return 0;
  }
  std::printf("kernels: %s (CPU features: %s)\n%s\n", kernels::active().isa, kernels::cpu_features(),
              describe_packed((*model)->info()).c_str());
  std::vector<std::pair<std::string, std::string>> types = {{"f16", "f16"}, {"q8_0", "q8_0"}, {"q4_0", "q4_0"}};
  if (cache.type_k != "f16" || cache.type_v != "f16" || cache.delay > 0) types.insert(types.begin(), {cache.type_k, cache.type_v});
  std::printf("KV cache (per request; -ctk/-ctv/--kv-delay choose):\n");
  for (const auto& [k, v] : types) {
    CacheOptions o;
    o.type_k = k;
    o.type_v = v;
    if (k == cache.type_k && v == cache.type_v) o.delay = cache.delay;
    auto st = new_state(**model, o, 4096);
    if (!st) {
      std::printf("  %s/%s: %s\n", k.c_str(), v.c_str(), st.message().c_str());
      continue;
    }
    std::printf("  %s/%s: %.0f bytes per token, %lld fixed bytes; 4096 tokens: %.1f MiB; layers: %s\n", k.c_str(),
                v.c_str(), st->bytes_per_token(), static_cast<long long>(st->fixed_bytes_per_row()),
                static_cast<double>(st->bytes_for(4096)) / (1 << 20), st->describe().c_str());
  }
  return 0;
}

}  // namespace

Verb add_info(CLI::App& app, const RuntimeConfig& config) {
  struct InfoArgs {
    std::string file;
    CacheArgs cache;
  };
  auto a = std::make_shared<InfoArgs>();
  CLI::App* cmd = app.add_subcommand("info",
                                     "Print a GGUF file's metadata, tensor table and KV bytes per token, or a "
                                     "safetensors file's / model folder's config, tokenizer kind and tensors");
  cmd->add_option("file", a->file, "GGUF file, .safetensors file or Hugging Face / MLX model folder")->required();
  add_cache_options(cmd, a->cache, false);
  (void)config;
  return Verb{cmd, [a] {
                std::string file = a->file;
                std::error_code ec;
                if (!std::filesystem::exists(file, ec))
                  if (auto snap = hub::cached_snapshot(file); snap) file = *snap;
                return run_info(file, a->cache);
              }};
}

}  // namespace specula::cli
