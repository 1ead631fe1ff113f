// model/lora.cpp — loading llama.cpp's GGUF LoRA adapters against a transformer's
// configuration (model/lora.h).
#include "model/lora.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "kernels/kernels.h"
#include "formats/hf_folder.h"
#include "formats/safetensors.h"
#include "model/blocks.h"
#include "model/model.h"

namespace specula {

namespace {

// The base model's adaptable weights: GGUF name -> (layer, target, n_in, n_out).
struct Adaptable {
  int64_t il = 0;
  LoraTarget target = LoraTarget::kQ;
  int64_t n_in = 0, n_out = 0;
};

std::map<std::string, Adaptable> adaptable_weights(const TransformerConfig& c) {
  std::map<std::string, Adaptable> out;
  for (int64_t il = 0; il < static_cast<int64_t>(c.layers.size()); ++il) {
    LayerWeights L;
    const std::pair<TensorView*, LoraTarget> members[] = {
        {&L.wq, LoraTarget::kQ},     {&L.wk, LoraTarget::kK},       {&L.wv, LoraTarget::kV},
        {&L.wqkv, LoraTarget::kQKV}, {&L.wo, LoraTarget::kO},       {&L.w_gate, LoraTarget::kGate},
        {&L.w_up, LoraTarget::kUp},  {&L.w_down, LoraTarget::kDown},
    };
    for (const WeightRef& r : layer_weights(c, il, L)) {
      if (r.mat == nullptr) continue;
      for (const auto& [member, target] : members)
        if (r.mat == member) out[r.name] = Adaptable{il, target, r.dims[0], r.dims[1]};
    }
  }
  return out;
}

}  // namespace

Result<std::shared_ptr<const LoraAdapter>> LoraAdapter::load_gguf(const std::string& path, const TransformerConfig& base,
                                                                  const kernels::KernelTable& kt, const Model* model) {
  const std::string who = "[lora] " + path + ": ";
  auto opened = gguf::GgufFile::open(path);
  if (!opened) return Status::error(who + opened.message());
  auto file = std::make_shared<const gguf::GgufFile>(std::move(opened).value());
  auto loaded = from_file(std::move(file), who, base, kt, model);
  if (!loaded) return loaded.status();
  return std::shared_ptr<const LoraAdapter>(std::move(loaded).value());
}

Result<std::shared_ptr<LoraAdapter>> LoraAdapter::from_file(std::shared_ptr<const gguf::GgufFile> file,
                                                           const std::string& who, const TransformerConfig& base,
                                                           const kernels::KernelTable& kt, const Model* model) {
  const gguf::GgufFile& f = *file;
  // Errors name the tensors as the user's file does (a PEFT folder's names).
  const auto shown = [&](const std::string& name) {
    auto it = f.source_names().find(name);
    return it != f.source_names().end() ? it->second : name;
  };
  auto type = f.get_string("general.type");
  auto kind = f.get_string("adapter.type");
  if (!type || *type != "adapter" || !kind || *kind != "lora")
    return Status::error(who + "not a LoRA adapter (general.type must be 'adapter' and adapter.type 'lora', as "
                               "llama.cpp's convert_lora_to_gguf.py writes)");
  auto arch = f.get_string("general.architecture");
  if (!arch) return Status::error(who + arch.message());
  if (*arch != base.arch)
    return Status::error(who + "an adapter for '" + *arch + "', but the model is '" + base.arch + "'");
  float alpha = 0.0f;
  if (f.find("adapter.lora.alpha") != nullptr) {
    auto a = f.get_float("adapter.lora.alpha");
    if (!a) return Status::error(who + a.message());
    if (!std::isfinite(*a)) return Status::error(who + "adapter.lora.alpha is not a finite number");
    alpha = static_cast<float>(*a);
  }

  auto adapter = std::shared_ptr<LoraAdapter>(new LoraAdapter());
  adapter->path_ = f.path();
  adapter->format_ = f.source_names().empty() ? "gguf" : "peft";
  adapter->base_id_ = model != nullptr ? model->instance_id() : 0;
  static std::atomic<uint64_t> next_id{1};
  adapter->id_ = next_id.fetch_add(1);
  adapter->alpha_ = alpha;
  adapter->layers_.resize(base.layers.size());
  const std::map<std::string, Adaptable> weights = adaptable_weights(base);
  static const std::string kA = ".lora_a", kB = ".lora_b";
  const auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() > tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (const gguf::TensorInfo& t : f.tensors()) {
    const bool is_a = ends_with(t.name, kA);
    if (!is_a && !ends_with(t.name, kB))
      return Status::error(who + "tensor '" + shown(t.name) + "' is neither a .lora_a nor a .lora_b");
    const std::string target = t.name.substr(0, t.name.size() - kA.size());
    const std::string other = target + (is_a ? kB : kA);
    const gguf::TensorInfo* pair = f.find_tensor(other);
    if (pair == nullptr) return Status::error(who + "'" + shown(t.name) + "' has no '" + shown(other) + "'");
    if (!is_a) continue;  // each pair once, from its A
    const auto w = weights.find(target);
    if (w == weights.end())
      return Status::error(who + "'" + shown(t.name) + "' adapts '" + target +
                           "', which is not an adaptable weight of this model (attention q/k/v/qkv/output and "
                           "dense feed-forward gate/up/down projections)");
    const Adaptable& aw = w->second;
    const gguf::TensorInfo& tb = *pair;
    if (t.shape.size() != 2 || tb.shape.size() != 2 || t.shape[0] != aw.n_in || tb.shape[1] != aw.n_out ||
        t.shape[1] != tb.shape[0] || t.shape[1] < 1)
      return Status::error(who + "'" + shown(t.name) + "': '" + target + "' is [" + std::to_string(aw.n_in) + ", " + std::to_string(aw.n_out) +
                           "] (GGUF order), so lora_a must be [" + std::to_string(aw.n_in) +
                           ", rank] and lora_b [rank, " + std::to_string(aw.n_out) + "] with one rank >= 1; got " +
                           shape_str(t.shape) + " and " + shape_str(tb.shape));
    const int64_t rank = t.shape[1];
    auto a = weight_2d(f, kt, t.name, aw.n_in, rank);
    if (!a) return Status::error(who + a.message());
    auto b = weight_2d(f, kt, tb.name, rank, aw.n_out);
    if (!b) return Status::error(who + b.message());
    LoraPair& p = adapter->layers_[static_cast<size_t>(aw.il)][static_cast<size_t>(aw.target)];
    p.a = *a;
    p.b = *b;
    p.rank = rank;
    // llama.cpp: alpha / rank when the file sets alpha, else 1.
    p.scale = alpha != 0.0f ? alpha / static_cast<float>(rank) : 1.0f;
    ++adapter->n_pairs_;
    adapter->max_rank_ = std::max(adapter->max_rank_, rank);
    adapter->bytes_ += t.n_bytes + tb.n_bytes;
  }
  if (adapter->n_pairs_ == 0) return Status::error(who + "no .lora_a / .lora_b tensors");
  adapter->file_ = std::move(file);
  return adapter;
}

// --- PEFT folders ---------------------------------------------------------------------------
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// An error of the config reader (formats/hf_folder.h, "[hf] PATH: ...") as this loader's.
Status as_lora(const Status& st) {
  const std::string& m = st.message();
  return Status::error("[lora] " + m.substr(m.rfind("[hf] ", 0) == 0 ? 5 : 0));
}

// PEFT module (the Hugging Face name of the adapted nn.Linear within a layer) -> the GGUF
// weight it becomes (the converter's names), and whether its rows follow Q or K heads.
struct PeftModule {
  const char* hf;
  const char* gguf;
  char heads;  // 'q' / 'k': B's rows are permuted like the weight's in Llama-style models
};
constexpr PeftModule kPeftModules[] = {
    {"self_attn.q_proj", "attn_q", 'q'},    {"self_attn.k_proj", "attn_k", 'k'},
    {"self_attn.v_proj", "attn_v", 0},      {"self_attn.o_proj", "attn_output", 0},
    {"self_attn.qkv_proj", "attn_qkv", 0},  {"mlp.gate_proj", "ffn_gate", 0},
    {"mlp.up_proj", "ffn_up", 0},           {"mlp.down_proj", "ffn_down", 0},
    {"mlp.gate_up_proj", "ffn_up", 0},
};
const char* kPeftModuleList = "q_proj, k_proj, v_proj, o_proj, qkv_proj, gate_proj, up_proj, down_proj, gate_up_proj";

struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};
// What the assembled adapter file points into.
struct PeftOwner {
  std::shared_ptr<const safetensors::File> weights;
  std::vector<std::unique_ptr<uint8_t, AlignedFree>> buffers;
  uint8_t* buffer(size_t n) {
    const size_t bytes = (std::max<size_t>(n, 64) + 63) / 64 * 64;
    buffers.emplace_back(static_cast<uint8_t*>(std::aligned_alloc(64, bytes)));
    SPECULA_CHECK(buffers.back() != nullptr);
    return buffers.back().get();
  }
};

// PEFT's pattern lookup (rank_pattern / alpha_pattern): the first key K, in the file's order,
// such that the module's name matches the regular expression (^|.*\.)K$. Keys are capped (256
// bytes, 16 groups) so that a crafted one cannot exhaust the regex engine's stack.
struct Pattern {
  std::string key;
  std::regex re;
  double value = 0;
};
Result<std::vector<Pattern>> patterns(const nlohmann::ordered_json* obj, const std::string& field, bool integer) {
  std::vector<Pattern> out;
  if (obj == nullptr || obj->is_null()) return out;
  if (!obj->is_object()) return Status::error("'" + field + "' must be an object {module pattern: value}");
  for (const auto& [key, v] : obj->items()) {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || (integer && (!v.is_number_integer() || v.get<int64_t>() < 1)))
      return Status::error("'" + field + "' gives '" + key + "' the value " + v.dump() +
                           (integer ? "; ranks must be integers >= 1" : "; alphas must be finite numbers"));
    if (key.size() > 256 || std::count(key.begin(), key.end(), '(') > 16)
      return Status::error("'" + field + "' key '" + key.substr(0, 64) + "...' is longer than 256 bytes or 16 groups");
    Pattern p;
    p.key = key;
    p.value = v.get<double>();
    try {
      p.re = std::regex("(^|.*\\.)(" + key + ")$");
    } catch (const std::regex_error&) {
      return Status::error("'" + field + "' key '" + key + "' is not a valid regular expression");
    }
    out.push_back(std::move(p));
  }
  return out;
}
const Pattern* match(const std::vector<Pattern>& ps, const std::string& module) {
  for (const Pattern& p : ps)
    if (std::regex_match(module, p.re)) return &p;
  return nullptr;
}

}  // namespace

Result<std::shared_ptr<const LoraAdapter>> LoraAdapter::load_peft(const std::string& path, const TransformerConfig& base,
                                                                  const kernels::KernelTable& kt, const Model* model) {
  std::error_code ec;
  fs::path dir = path;
  if (!fs::is_directory(dir, ec)) dir = dir.parent_path();
  const std::string who = "[lora] " + dir.string() + ": ";
  const fs::path config_path = dir / "adapter_config.json", weights_path = dir / "adapter_model.safetensors";
  if (!fs::is_regular_file(config_path, ec))
    return Status::error(who + "no adapter_config.json (a PEFT adapter folder holds adapter_config.json and "
                               "adapter_model.safetensors)");
  if (!fs::is_regular_file(weights_path, ec))
    return Status::error(who + (fs::exists(dir / "adapter_model.bin", ec)
                                    ? "adapter_model.bin (a PyTorch pickle) is not read; save the adapter as "
                                      "adapter_model.safetensors (PEFT's save_pretrained does by default)"
                                    : "no adapter_model.safetensors"));
  auto text = hf::read_text(config_path.string(), size_t{1} << 22);
  if (!text) return as_lora(text.status());
  auto parsed = hf::Config::parse(*text, config_path.string());
  if (!parsed) return as_lora(parsed.status());
  hf::Config& cfg = *parsed;
  const std::string peft_type = cfg.s("peft_type", std::string("LORA"));
  const int64_t r = cfg.i("r", 1, 1 << 16, 8);
  const double lora_alpha = cfg.f("lora_alpha", -1e9, 1e9, 8.0);
  const bool rslora = cfg.b("use_rslora", false);
  const bool dora = cfg.b("use_dora", false);
  const bool fan_in_fan_out = cfg.b("fan_in_fan_out", false);
  const std::string bias = cfg.s("bias", std::string("none"));
  if (!cfg.status().is_ok()) return as_lora(cfg.status());
  const std::string cfg_who = who + "adapter_config.json: ";
  if (peft_type != "LORA") return Status::error(cfg_who + "peft_type '" + peft_type + "' is not supported (LORA only)");
  if (dora) return Status::error(cfg_who + "'use_dora': true (DoRA) is not supported");
  if (fan_in_fan_out)
    return Status::error(cfg_who + "'fan_in_fan_out': true (GPT-2 style Conv1D weights) is not supported");
  if (bias != "none") return Status::error(cfg_who + "'bias': '" + bias + "' is not supported (trained biases); only 'none'");
  if (const json* m = cfg.find("modules_to_save"); m != nullptr && !(m->is_array() && m->empty()))
    return Status::error(cfg_who + "'modules_to_save' " + m->dump() +
                         ": fully trained modules (e.g. an embedding or lm_head) are not supported, only LoRA pairs");
  // The patterns in the file's order (hf::Config's JSON sorts keys; PEFT takes the first match).
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(*text, nullptr, false);
  const auto field = [&](const char* k) -> const nlohmann::ordered_json* {
    auto it = ordered.find(k);
    return it == ordered.end() ? nullptr : &*it;
  };
  auto rank_pattern = patterns(field("rank_pattern"), "rank_pattern", true);
  if (!rank_pattern) return Status::error(cfg_who + rank_pattern.message());
  auto alpha_pattern = patterns(field("alpha_pattern"), "alpha_pattern", false);
  if (!alpha_pattern) return Status::error(cfg_who + alpha_pattern.message());

  auto opened = safetensors::File::open(weights_path.string());
  if (!opened) return Status::error("[lora] " + opened.message());
  auto owner = std::make_shared<PeftOwner>();
  owner->weights = std::make_shared<const safetensors::File>(std::move(opened).value());
  const safetensors::File& st = *owner->weights;

  const std::map<std::string, Adaptable> weights = adaptable_weights(base);
  const bool permute = hf::permutes_qk(base.arch);
  static const std::regex kName(R"(^base_model\.model\.((?:model\.language_model\.|language_model\.model\.|language_model\.|model\.)?layers\.([0-9]{1,5})\.(.+))\.lora_([AB])\.weight$)");
  struct Pending {
    std::string module;  // e.g. model.layers.0.self_attn.q_proj
    const safetensors::TensorInfo* a = nullptr;
    const safetensors::TensorInfo* b = nullptr;
    const PeftModule* kind = nullptr;
    int64_t il = 0;
  };
  std::map<std::string, Pending> pending;  // by GGUF weight name
  std::map<std::string, std::string> source_names;
  for (const safetensors::TensorInfo& t : st.tensors()) {
    std::smatch m;
    if (!std::regex_match(t.name, m, kName))
      return Status::error(who + "tensor '" + t.name + "' is not a LoRA pair member of a transformer layer " +
                           "(base_model.model.[model.]layers.N.<module>.lora_A.weight / lora_B.weight); " +
                           "embedding adapters, trained modules and DoRA magnitudes are not supported");
    const std::string module = m[1].str(), rest = m[3].str();
    const PeftModule* kind = nullptr;
    for (const PeftModule& pm : kPeftModules)
      if (rest == pm.hf) kind = &pm;
    if (kind == nullptr)
      return Status::error(who + "tensor '" + t.name + "' adapts '" + rest + "', not a module specula can adapt (" +
                           kPeftModuleList + ")");
    const int64_t il = std::stoll(m[2].str());
    const std::string gguf_name = "blk." + std::to_string(il) + "." + kind->gguf + ".weight";
    Pending& p = pending[gguf_name];
    p.module = module;
    p.kind = kind;
    p.il = il;
    (m[4].str() == "A" ? p.a : p.b) = &t;
    source_names[gguf_name + (m[4].str() == "A" ? ".lora_a" : ".lora_b")] = t.name;
  }
  if (pending.empty()) return Status::error(who + "adapter_model.safetensors holds no lora_A / lora_B tensors");

  std::vector<gguf::TensorInfo> tensors;
  std::map<std::pair<int64_t, int>, float> scales;
  const auto view = [&](const safetensors::TensorInfo& t, const std::string& name, std::vector<int64_t> shape,
                        int64_t permute_heads) -> Status {
    gguf::TensorInfo g;
    g.name = name;
    g.shape = std::move(shape);
    g.type = *t.dtype;
    g.n_bytes = t.n_bytes;
    if (permute_heads > 0) {
      uint8_t* d = owner->buffer(t.n_bytes);
      if (Status s = hf::permute_qk_rows(t, permute_heads, d, who + "'" + t.name + "'"); !s.is_ok()) return s;
      g.data = d;
    } else if (t.alignment < safetensors::element_size(t.type)) {
      uint8_t* d = owner->buffer(t.n_bytes);
      std::memcpy(d, t.data, t.n_bytes);
      g.data = d;
    } else {
      g.data = t.data;
    }
    tensors.push_back(std::move(g));
    return Status::ok();
  };
  for (const auto& [gguf_name, p] : pending) {
    const safetensors::TensorInfo* present = p.a != nullptr ? p.a : p.b;
    if (p.a == nullptr || p.b == nullptr)
      return Status::error(who + "'" + present->name + "' has no " + (p.a == nullptr ? "lora_A" : "lora_B") + " beside it");
    for (const safetensors::TensorInfo* t : {p.a, p.b})
      if (!t->dtype)
        return Status::error(who + "'" + t->name + "' is " + std::string(safetensors::element_type_name(t->type)) +
                             "; LoRA weights must be F32, F16 or BF16");
    const auto w = weights.find(gguf_name);
    if (w == weights.end())
      return Status::error(who + "'" + p.a->name + "' adapts " + p.module + ", which this " + base.arch + " model " +
                           (p.il >= static_cast<int64_t>(base.layers.size())
                                ? "does not have (it has " + std::to_string(base.layers.size()) + " layers)"
                                : "does not have as an adaptable projection (a PEFT adapter for another architecture?)"));
    const Adaptable& aw = w->second;
    const auto& sa = p.a->shape;
    const auto& sb = p.b->shape;
    if (sa.size() != 2 || sb.size() != 2 || sa[1] != aw.n_in || sb[0] != aw.n_out || sa[0] != sb[1] || sa[0] < 1)
      return Status::error(who + p.module + " of this model is [" + std::to_string(aw.n_out) + ", " +
                           std::to_string(aw.n_in) + "] (out, in), so lora_A must be [rank, " + std::to_string(aw.n_in) +
                           "] and lora_B [" + std::to_string(aw.n_out) + ", rank]; got " + shape_str(sa) + " and " +
                           shape_str(sb) + " (a PEFT adapter for another model?)");
    const int64_t rank = sa[0];
    const Pattern* rp = match(*rank_pattern, p.module);
    const int64_t want = rp != nullptr ? static_cast<int64_t>(rp->value) : r;
    if (rank != want)
      return Status::error(who + "'" + p.a->name + "' has rank " + std::to_string(rank) + ", but adapter_config.json gives " +
                           (rp != nullptr ? "rank_pattern '" + rp->key + "' " : std::string("'r' ")) + std::to_string(want));
    const Pattern* ap = match(*alpha_pattern, p.module);
    const double alpha = ap != nullptr ? ap->value : lora_alpha;
    // PEFT's LoraLayer.update_layer: scaling = alpha / r, or alpha / sqrt(r) with use_rslora.
    scales[{p.il, static_cast<int>(aw.target)}] =
        static_cast<float>(alpha / (rslora ? std::sqrt(static_cast<double>(rank)) : static_cast<double>(rank)));
    int64_t heads = 0;
    if (permute && p.kind->heads != 0) {
      const LayerConfig& lc = base.layers[static_cast<size_t>(p.il)];
      heads = p.kind->heads == 'q' ? lc.n_heads : lc.n_kv_heads;
    }
    if (Status s = view(*p.a, gguf_name + ".lora_a", {aw.n_in, rank}, 0); !s.is_ok()) return s;
    if (Status s = view(*p.b, gguf_name + ".lora_b", {rank, aw.n_out}, heads); !s.is_ok()) return s;
  }
  std::map<std::string, gguf::Value> kv;
  const auto str = [](std::string v) {
    gguf::Value x;
    x.type = gguf::ValueType::STRING;
    x.str = std::move(v);
    return x;
  };
  kv["general.type"] = str("adapter");
  kv["adapter.type"] = str("lora");
  kv["general.architecture"] = str(base.arch);
  auto file = gguf::GgufFile::assemble(dir.string(), std::move(kv), {"general.architecture", "general.type", "adapter.type"},
                                       std::move(tensors), std::shared_ptr<const void>(owner, owner.get()));
  if (!file) return Status::error(who + file.message());
  file->set_source_names(std::move(source_names));
  auto loaded = from_file(std::make_shared<const gguf::GgufFile>(std::move(file).value()), who, base, kt, model);
  if (!loaded) return loaded.status();
  std::shared_ptr<LoraAdapter> adapter = std::move(loaded).value();
  adapter->alpha_ = static_cast<float>(lora_alpha);
  for (const auto& [key, scale] : scales)
    adapter->layers_[static_cast<size_t>(key.first)][static_cast<size_t>(key.second)].scale = scale;
  return std::shared_ptr<const LoraAdapter>(std::move(adapter));
}

Result<std::shared_ptr<const LoraAdapter>> LoraAdapter::load(const std::string& path, const TransformerConfig& base,
                                                             const kernels::KernelTable& kt, const Model* model) {
  std::error_code ec;
  const fs::path p = path;
  const std::string leaf = p.filename().string();
  if (fs::is_directory(p, ec) || leaf == "adapter_config.json" || leaf == "adapter_model.safetensors")
    return load_peft(path, base, kt, model);
  return load_gguf(path, base, kt, model);
}

namespace {

template <typename T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// The tokens of one adapter pair in one slot: sc.tokens / sc.scales [t0, t1).
struct Group {
  const LoraPair* p = nullptr;
  size_t t0 = 0, t1 = 0;
  const float* xs = nullptr;  // their inputs: x itself (one contiguous run) or gathered
  bool run = true;            // the tokens are one contiguous run
  size_t mid = 0;             // offset of their A x rows in sc.mid
};

}  // namespace

void apply_lora(ThreadPool& pool, const kernels::KernelTable& kt, const LoraSet* const* rows, const int64_t* offset,
                int32_t n_rows, int64_t il, LoraTarget t, const float* x, int64_t n_in, float* y, int64_t n_out,
                LoraScratch& sc) {
  // Slot by slot (a row's first adapter, then its second, ...), so that each token gets its
  // adapters' deltas in the row's order; within a slot, one group per distinct pair.
  size_t slots = 0;
  for (int32_t b = 0; b < n_rows; ++b)
    if (rows[b] != nullptr) slots = std::max(slots, rows[b]->adapters.size());
  thread_local std::vector<Group> groups;  // (per thread: no allocation per projection)
  groups.clear();
  sc.tokens.clear();
  sc.scales.clear();
  size_t mid_rows = 0;
  int64_t max_rank = 0;
  for (size_t slot = 0; slot < slots; ++slot) {
    const size_t first = groups.size();
    for (int32_t b = 0; b < n_rows; ++b) {
      if (rows[b] == nullptr || slot >= rows[b]->adapters.size()) continue;
      const LoraWeight& w = rows[b]->adapters[slot];
      const LoraPair* p = w.adapter != nullptr ? w.adapter->find(il, t) : nullptr;
      if (p == nullptr || std::any_of(groups.begin() + static_cast<std::ptrdiff_t>(first), groups.end(),
                                      [&](const Group& g) { return g.p == p; }))
        continue;
      Group g;
      g.p = p;
      g.t0 = sc.tokens.size();
      for (int32_t c = b; c < n_rows; ++c) {
        if (rows[c] == nullptr || slot >= rows[c]->adapters.size()) continue;
        const LoraWeight& wc = rows[c]->adapters[slot];
        if (wc.adapter == nullptr || wc.adapter->find(il, t) != p) continue;
        for (int64_t tok = offset[c]; tok < offset[c + 1]; ++tok) {
          sc.tokens.push_back(tok);
          sc.scales.push_back(wc.scale * p->scale);
        }
      }
      g.t1 = sc.tokens.size();
      if (g.t1 == g.t0) continue;
      mid_rows += g.t1 - g.t0;
      max_rank = std::max(max_rank, p->rank);
      groups.push_back(g);
    }
  }
  if (groups.empty()) return;
  // Inputs: a group whose tokens are one run reads x in place; the others are gathered.
  size_t gathered = 0, at = 0;
  for (Group& g : groups) {
    for (size_t i = g.t0 + 1; i < g.t1 && g.run; ++i) g.run = sc.tokens[i] == sc.tokens[i - 1] + 1;
    if (!g.run) gathered += g.t1 - g.t0;
    g.mid = at * static_cast<size_t>(max_rank);
    at += g.t1 - g.t0;
  }
  float* gx = grow(sc.x, gathered * static_cast<size_t>(n_in));
  gathered = 0;
  size_t max_t = 0;
  for (Group& g : groups) {
    const size_t T = g.t1 - g.t0;
    max_t = std::max(max_t, T);
    if (g.run) {
      g.xs = x + sc.tokens[g.t0] * n_in;
      continue;
    }
    g.xs = gx + gathered * static_cast<size_t>(n_in);
    for (size_t i = 0; i < T; ++i)
      std::memcpy(gx + (gathered + i) * static_cast<size_t>(n_in), x + sc.tokens[g.t0 + i] * n_in, sizeof(float) * n_in);
    gathered += T;
  }
  float* mid = grow(sc.mid, mid_rows * static_cast<size_t>(max_rank));
  float* delta = grow(sc.delta, max_t * static_cast<size_t>(n_out));
  size_t xq_bytes = 0, mq_bytes = 0;
  for (const Group& g : groups) {
    const kernels::TypeKernels& ka = kt.of(g.p->a.dtype);
    const kernels::TypeKernels& kb = kt.of(g.p->b.dtype);
    if (ka.vec_dot_type != DType::F32) xq_bytes = std::max(xq_bytes, row_bytes(ka.vec_dot_type, n_in) * (g.t1 - g.t0));
    if (kb.vec_dot_type != DType::F32) mq_bytes = std::max(mq_bytes, row_bytes(kb.vec_dot_type, g.p->rank) * (g.t1 - g.t0));
  }
  uint8_t* xq = xq_bytes > 0 ? grow(sc.xq, xq_bytes) : nullptr;
  uint8_t* midq = mq_bytes > 0 ? grow(sc.midq, mq_bytes) : nullptr;
  // One dispatch for every group. Per group: A's rank rows split between threads, a barrier,
  // then B's output rows split between threads (the same columns for every group, so a
  // token's deltas reach y in group order from one thread). Each group has its own A x rows,
  // so a thread may start the next group while another still reads the last one's; the
  // shared activation buffers are only rewritten after a barrier that follows their reads.
  SpinBarrier barrier;
  // (A reference: inside the job, `groups` would name each worker thread's own, empty vector.)
  const std::vector<Group>& all = groups;
  pool.run([&](int ith, int nth) {
    auto [j0, j1] = ThreadPool::split(n_out, ith, nth, 16);
    for (const Group& g : all) {
      const LoraPair& p = *g.p;
      const int64_t T = static_cast<int64_t>(g.t1 - g.t0), R = p.rank;
      const kernels::TypeKernels& ka = kt.of(p.a.dtype);
      const kernels::TypeKernels& kb = kt.of(p.b.dtype);
      const bool x_f32 = ka.vec_dot_type == DType::F32, mid_f32 = kb.vec_dot_type == DType::F32;
      const size_t xq_stride = row_bytes(ka.vec_dot_type, n_in), mq_stride = row_bytes(kb.vec_dot_type, R);
      float* gm = mid + g.mid;
      if (!x_f32) {
        auto [m0, m1] = ThreadPool::split(T, ith, nth);
        const kernels::TypeKernels& q = kt.of(ka.vec_dot_type);
        for (int64_t i = m0; i < m1; ++i) q.quantize_row(g.xs + i * n_in, xq + static_cast<size_t>(i) * xq_stride, n_in);
        barrier.wait(nth);
      }
      auto [r0, r1] = ThreadPool::split(R, ith, nth);
      if (r1 > r0)
        ka.gemm(n_in, static_cast<const uint8_t*>(p.a.data) + static_cast<size_t>(r0) * p.a.row_stride, p.a.row_stride,
                r1 - r0, x_f32 ? static_cast<const void*>(g.xs) : xq, x_f32 ? sizeof(float) * n_in : xq_stride, T,
                gm + r0, R);
      barrier.wait(nth);
      if (!mid_f32) {
        auto [m0, m1] = ThreadPool::split(T, ith, nth);
        const kernels::TypeKernels& q = kt.of(kb.vec_dot_type);
        for (int64_t i = m0; i < m1; ++i) q.quantize_row(gm + i * R, midq + static_cast<size_t>(i) * mq_stride, R);
        barrier.wait(nth);
      }
      if (j1 <= j0) continue;
      kb.gemm(R, static_cast<const uint8_t*>(p.b.data) + static_cast<size_t>(j0) * p.b.row_stride, p.b.row_stride,
              j1 - j0, mid_f32 ? static_cast<const void*>(gm) : midq, mid_f32 ? sizeof(float) * R : mq_stride, T,
              delta + j0, n_out);
      for (int64_t i = 0; i < T; ++i) {
        const float s = sc.scales[g.t0 + static_cast<size_t>(i)];
        float* dst = y + sc.tokens[g.t0 + static_cast<size_t>(i)] * n_out;
        const float* d = delta + i * n_out;
        for (int64_t j = j0; j < j1; ++j) dst[j] += s * d[j];
      }
    }
  });
}

bool any_lora(const Batch& batch) {
  if (batch.lora == nullptr) return false;
  for (int32_t b = 0; b < batch.B; ++b)
    if (batch.lora[b] != nullptr && !batch.lora[b]->empty()) return true;
  return false;
}

const LoraPair* LoraAdapter::find(int64_t il, LoraTarget t) const {
  if (il < 0 || il >= static_cast<int64_t>(layers_.size())) return nullptr;
  const LoraPair& p = layers_[static_cast<size_t>(il)][static_cast<size_t>(t)];
  return p.rank > 0 ? &p : nullptr;
}

}  // namespace specula
