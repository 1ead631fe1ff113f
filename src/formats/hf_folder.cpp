// formats/hf_folder.cpp — config.json reader, the architecture mapping registry, the tensor
// transforms and the folder -> GgufFile assembly (see hf_folder.h).
#include "formats/hf_folder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "core/tensor.h"
#include "formats/safetensors.h"

namespace specula::hf {

using json = nlohmann::json;
namespace fs = std::filesystem;

// --- Config ---------------------------------------------------------------------------------
struct Config::Impl {
  json root;
};

Config::Config() : impl_(std::make_unique<Impl>()) {}
Config::Config(Config&&) noexcept = default;
Config& Config::operator=(Config&&) noexcept = default;
Config::~Config() = default;

Result<std::string> read_text(const std::string& path, size_t limit) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return Status::error("[hf] " + path + ": " + ec.message());
  if (size > limit)
    return Status::error("[hf] " + path + ": " + std::to_string(size) + " bytes, more than the " +
                         std::to_string(limit) + " this reader accepts");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error("[hf] " + path + ": cannot open");
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (static_cast<size_t>(in.gcount()) != size) return Status::error("[hf] " + path + ": short read");
  return text;
}

namespace {

std::string shown(const json& v) {
  std::string s = v.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

Result<json> parse_json_file(const std::string& path, size_t limit) {
  auto text = read_text(path, limit);
  if (!text) return text.status();
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded()) return Status::error("[hf] " + path + ": not valid JSON");
  return j;
}

}  // namespace

Result<Config> Config::parse(const std::string& text, std::string path) {
  Config c;
  c.path_ = std::move(path);
  c.impl_->root = json::parse(text, nullptr, false);
  if (c.impl_->root.is_discarded()) return Status::error("[hf] " + c.path_ + ": not valid JSON");
  if (!c.impl_->root.is_object()) return Status::error("[hf] " + c.path_ + ": not a JSON object");
  if (const json* tc = c.find("text_config"); tc != nullptr && !tc->is_object())
    return Status::error("[hf] " + c.path_ + ": 'text_config' must be an object, got " + shown(*tc));
  return c;
}

const json* Config::find(const std::string& key) const {
  const json& r = impl_->root;
  if (auto it = r.find(key); it != r.end() && !it->is_null()) return &*it;
  if (auto tc = r.find("text_config"); tc != r.end() && tc->is_object() && key != "text_config")
    if (auto it = tc->find(key); it != tc->end() && !it->is_null()) return &*it;
  return nullptr;
}

bool Config::explicit_null(const std::string& key) const {
  const json& r = impl_->root;
  if (auto it = r.find(key); it != r.end()) return it->is_null();
  if (auto tc = r.find("text_config"); tc != r.end() && tc->is_object())
    if (auto it = tc->find(key); it != tc->end()) return it->is_null();
  return false;
}

void Config::fail(const std::string& message) {
  if (status_.is_ok()) status_ = Status::error("[hf] " + path_ + ": " + message);
}

void Config::bad(const std::string& key, const std::string& what, const json& got) {
  fail("'" + key + "' must be " + what + ", got " + shown(got));
}

int64_t Config::i(const std::string& key, int64_t lo, int64_t hi, std::optional<int64_t> fallback) {
  const json* v = find(key);
  const std::string what = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (v == nullptr) {
    if (!fallback) fail("missing '" + key + "' (" + what + ")");
    return fallback.value_or(0);
  }
  if (!v->is_number_integer() || (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) ||
      v->get<int64_t>() < lo || v->get<int64_t>() > hi) {
    bad(key, what, *v);
    return fallback.value_or(0);
  }
  return v->get<int64_t>();
}

double Config::f(const std::string& key, double lo, double hi, std::optional<double> fallback) {
  const json* v = find(key);
  std::ostringstream what;
  what << "a number in [" << lo << ", " << hi << "]";
  if (v == nullptr) {
    if (!fallback) fail("missing '" + key + "' (" + what.str() + ")");
    return fallback.value_or(0.0);
  }
  if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < lo || v->get<double>() > hi) {
    bad(key, what.str(), *v);
    return fallback.value_or(0.0);
  }
  return v->get<double>();
}

bool Config::b(const std::string& key, std::optional<bool> fallback) {
  const json* v = find(key);
  if (v == nullptr) {
    if (!fallback) fail("missing '" + key + "' (a boolean)");
    return fallback.value_or(false);
  }
  if (!v->is_boolean()) {
    bad(key, "a boolean", *v);
    return fallback.value_or(false);
  }
  return v->get<bool>();
}

std::string Config::s(const std::string& key, std::optional<std::string> fallback) {
  const json* v = find(key);
  if (v == nullptr) {
    if (!fallback) fail("missing '" + key + "' (a string)");
    return fallback.value_or("");
  }
  if (!v->is_string()) {
    bad(key, "a string", *v);
    return fallback.value_or("");
  }
  return v->get<std::string>();
}

std::optional<std::vector<int64_t>> Config::ints(const std::string& key) {
  const json* v = find(key);
  if (v == nullptr) return std::nullopt;
  std::vector<int64_t> out;
  if (v->is_array()) {
    for (const json& e : *v) {
      if (e.is_boolean()) out.push_back(e.get<bool>() ? 1 : 0);
      else if (e.is_number_integer()) out.push_back(e.get<int64_t>());
      else {
        bad(key, "an array of integers", *v);
        return std::nullopt;
      }
    }
    return out;
  }
  bad(key, "an array of integers", *v);
  return std::nullopt;
}

std::optional<std::vector<std::string>> Config::strings(const std::string& key) {
  const json* v = find(key);
  if (v == nullptr) return std::nullopt;
  std::vector<std::string> out;
  if (v->is_array() && std::all_of(v->begin(), v->end(), [](const json& e) { return e.is_string(); })) {
    for (const json& e : *v) out.push_back(e.get<std::string>());
    return out;
  }
  bad(key, "an array of strings", *v);
  return std::nullopt;
}

std::optional<std::vector<double>> Config::floats(const std::string& key) {
  const json* v = find(key);
  if (v == nullptr) return std::nullopt;
  std::vector<double> out;
  if (v->is_array() && std::all_of(v->begin(), v->end(), [](const json& e) { return e.is_number(); })) {
    for (const json& e : *v) out.push_back(e.get<double>());
    return out;
  }
  bad(key, "an array of numbers", *v);
  return std::nullopt;
}

const json* Config::object(const std::string& key) {
  const json* v = find(key);
  if (v == nullptr) return nullptr;
  if (!v->is_object()) {
    bad(key, "an object", *v);
    return nullptr;
  }
  return v;
}

const json* Config::rope_scaling() {
  const json* r = object("rope_scaling");
  if (r == nullptr) r = object("rope_parameters");
  if (r == nullptr) return nullptr;
  const json* type = nullptr;
  for (const char* k : {"rope_type", "type"})
    if (auto it = r->find(k); it != r->end() && !it->is_null()) type = &*it;
  if (type != nullptr && type->is_string() && type->get<std::string>() == "default") return nullptr;
  if (type == nullptr && r->size() <= 1 && r->contains("rope_theta")) return nullptr;
  return r;
}

std::optional<std::vector<double>> Config::rope_list(const std::string& field) {
  const json* rs = rope_scaling();
  const json* v = nullptr;
  if (rs != nullptr)
    if (auto it = rs->find(field); it != rs->end()) v = &*it;
  if (v == nullptr) {
    fail("rope_scaling: missing '" + field + "' (a list of numbers)");
    return std::nullopt;
  }
  std::vector<double> out;
  if (v->is_array() && std::all_of(v->begin(), v->end(), [](const json& e) { return e.is_number(); })) {
    for (const json& e : *v) out.push_back(e.get<double>());
    return out;
  }
  bad("rope_scaling." + field, "a list of numbers", *v);
  return std::nullopt;
}

// --- Conversion -----------------------------------------------------------------------------
void Conversion::put(const std::string& key, gguf::Value v) {
  const std::string full = key.rfind('.', 0) == 0 ? key.substr(1) : arch_ + "." + key;
  if (kv_.find(full) == kv_.end()) keys_.push_back(full);
  kv_[full] = std::move(v);
}

void Conversion::u32(const std::string& key, int64_t v) {
  gguf::Value x;
  x.type = gguf::ValueType::U32;
  x.u = static_cast<uint64_t>(v);
  put(key, std::move(x));
}

void Conversion::f32(const std::string& key, double v) {
  gguf::Value x;
  x.type = gguf::ValueType::F32;
  x.f = static_cast<double>(static_cast<float>(v));
  put(key, std::move(x));
}

void Conversion::str(const std::string& key, const std::string& v) {
  gguf::Value x;
  x.type = gguf::ValueType::STRING;
  x.str = v;
  put(key, std::move(x));
}

void Conversion::boolean(const std::string& key, bool v) {
  gguf::Value x;
  x.type = gguf::ValueType::BOOL;
  x.u = v ? 1 : 0;
  put(key, std::move(x));
}

void Conversion::bools(const std::string& key, const std::vector<bool>& v) {
  gguf::Value x;
  x.type = gguf::ValueType::ARRAY;
  x.elem_type = gguf::ValueType::BOOL;
  x.count = v.size();
  for (bool b : v) x.raw.push_back(b ? 1 : 0);
  put(key, std::move(x));
}

void Conversion::i32s(const std::string& key, const std::vector<int64_t>& v) {
  gguf::Value x;
  x.type = gguf::ValueType::ARRAY;
  x.elem_type = gguf::ValueType::I32;
  x.count = v.size();
  x.raw.resize(v.size() * 4);
  for (size_t k = 0; k < v.size(); ++k) {
    const auto e = static_cast<int32_t>(v[k]);
    std::memcpy(x.raw.data() + 4 * k, &e, 4);
  }
  put(key, std::move(x));
}

void Conversion::add_f32_tensor(const std::string& name, std::vector<float> data) {
  extra_.emplace_back(name, std::move(data));
}

// --- registry ---------------------------------------------------------------------------------
namespace {
std::map<std::string, Architecture>& registry() {
  static std::map<std::string, Architecture> r;
  return r;
}
}  // namespace

bool register_hf_architecture(const std::string& hf_name, Architecture a) {
  registry()[hf_name] = std::move(a);
  return true;
}

bool permutes_qk(const std::string& gguf_arch) {
  for (const auto& [k, v] : registry())
    if (v.gguf_arch == gguf_arch && v.permute_qk) return true;
  return false;
}

std::vector<std::string> hf_architectures() {
  std::vector<std::string> names;
  for (const auto& [k, v] : registry()) names.push_back(k);
  return names;
}

// --- helpers for mappings -------------------------------------------------------------------
namespace {

// rope_freqs.weight for rope_type "llama3" (Meta's Llama 3.1 reference, apply_scaling;
// the converter's generate_extra_tensors), in float32 arithmetic as its torch code.
std::vector<float> llama3_rope_factors(float base, int64_t dim, float factor, float low, float high, float old_ctx) {
  std::vector<float> out;
  const float low_wavelen = old_ctx / low;
  const float high_wavelen = old_ctx / high;
  for (int64_t i = 0; i < dim; i += 2) {
    const float freq = 1.0f / std::pow(base, static_cast<float>(i) / static_cast<float>(dim));
    const float wavelen = static_cast<float>(2 * M_PI) / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(factor);
    } else {
      const float smooth = (old_ctx / wavelen - low) / (high - low);
      out.push_back(1.0f / ((1.0f - smooth) / factor + smooth));
    }
  }
  return out;
}

}  // namespace

void standard_config(Config& cfg, Conversion& c) {
  const int64_t n_embd = cfg.i("hidden_size", 1, int64_t{1} << 20);
  const int64_t n_heads = cfg.i("num_attention_heads", 1, 4096);
  const int64_t n_kv = cfg.i("num_key_value_heads", 1, 4096, n_heads);
  c.u32("context_length", cfg.i("max_position_embeddings", 1, int64_t{1} << 26, 4096));
  c.u32("embedding_length", n_embd);
  c.u32("block_count", cfg.i("num_hidden_layers", 1, 4096));
  c.u32("feed_forward_length", cfg.i("intermediate_size", 1, int64_t{1} << 24));
  if (n_heads > 0 && n_kv > 0 && n_heads % n_kv != 0)
    cfg.fail("'num_key_value_heads' " + std::to_string(n_kv) + " must divide 'num_attention_heads' " +
             std::to_string(n_heads));
  c.u32("attention.head_count", n_heads);
  c.u32("attention.head_count_kv", n_kv);
  int64_t head_dim = n_heads > 0 ? n_embd / n_heads : 0;
  if (cfg.has("head_dim")) {
    head_dim = cfg.i("head_dim", 1, 4096);
    c.u32("attention.key_length", head_dim);
    c.u32("attention.value_length", head_dim);
  }
  c.f32("attention.layer_norm_rms_epsilon", cfg.f("rms_norm_eps", 1e-12, 1.0, 1e-6));
  const json* rp = cfg.object("rope_parameters");
  double theta = 10000.0;
  if (rp != nullptr && rp->contains("rope_theta")) {
    const json& t = (*rp)["rope_theta"];
    if (!t.is_number() || t.get<double>() <= 0) cfg.bad("rope_parameters.rope_theta", "a positive number", t);
    else theta = t.get<double>();
  } else {
    theta = cfg.f("rope_theta", 1e-3, 1e12, 10000.0);
  }
  c.f32("rope.freq_base", theta);
  if (cfg.has("partial_rotary_factor")) {
    const double p = cfg.f("partial_rotary_factor", 0.0, 1.0);
    c.u32("rope.dimension_count", static_cast<int64_t>(static_cast<double>(head_dim) * p));
  } else if (cfg.has("head_dim")) {
    c.u32("rope.dimension_count", head_dim);
  }
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv;
  if (const json* rs = cfg.rope_scaling()) {
    std::string type;
    for (const char* k : {"rope_type", "type"})
      if (auto it = rs->find(k); it != rs->end() && it->is_string()) type = it->get<std::string>();
    const auto num = [&](const char* k, double fallback) {
      auto it = rs->find(k);
      if (it == rs->end() || it->is_null()) return fallback;
      if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() <= 0) {
        cfg.bad(std::string("rope_scaling.") + k, "a positive number", *it);
        return fallback;
      }
      return it->get<double>();
    };
    if (type == "linear") {
      c.str("rope.scaling.type", "linear");
      c.f32("rope.scaling.factor", num("factor", 1.0));
    } else if (type == "llama3") {
      const float factor = static_cast<float>(num("factor", 8.0));
      const float low = static_cast<float>(num("low_freq_factor", 1.0));
      const float high = static_cast<float>(num("high_freq_factor", 4.0));
      const float old_ctx = static_cast<float>(num("original_max_position_embeddings", 8192.0));
      if (high <= low) cfg.fail("rope_scaling: high_freq_factor must be greater than low_freq_factor");
      else c.add_f32_tensor("rope_freqs.weight", llama3_rope_factors(static_cast<float>(theta), head_dim, factor, low, high, old_ctx));
    } else if (type != "longrope") {  // longrope: the architecture reads it (phi3)
      cfg.fail("rope_scaling type '" + type + "' is not supported (supported: default, linear, llama3" +
               std::string(c.arch() == "phi3" ? ", longrope" : "") + ")");
    }
  }
}

std::optional<std::pair<int64_t, std::string>> split_layer_name(const std::string& name) {
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return std::nullopt;
  const std::string num = name.substr(prefix.size(), dot - prefix.size());
  if (num.empty() || num.size() > 5 || !std::all_of(num.begin(), num.end(), ::isdigit)) return std::nullopt;
  return std::pair{static_cast<int64_t>(std::stoll(num)), name.substr(dot + 1)};
}

std::function<std::optional<Target>(const std::string&)> llama_tensor_rule(bool permute_qk, int64_t n_experts) {
  return [permute_qk, n_experts](const std::string& name) -> std::optional<Target> {
    static const std::map<std::string, std::string> kGlobal = {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"},
        {"lm_head.bias", "output.bias"},
    };
    if (auto it = kGlobal.find(name); it != kGlobal.end()) return Target{it->second};
    const auto layer = split_layer_name(name);
    if (!layer) return std::nullopt;
    const std::string blk = "blk." + std::to_string(layer->first) + ".";
    const std::string& rest = layer->second;
    if (rest.find("rotary_emb.inv_freq") != std::string::npos) return Target{};  // a buffer, not a weight
    static const std::map<std::string, std::string> kLayer = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},
        {"self_attn.v_proj.bias", "attn_v.bias"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.o_proj.bias", "attn_output.bias"},
        {"self_attn.q_norm.weight", "attn_q_norm.weight"},
        {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
        {"mlp.gate.weight", "ffn_gate_inp.weight"},
        {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
    };
    if (auto it = kLayer.find(rest); it != kLayer.end()) return Target{blk + it->second};
    for (const char* qk : {"q", "k"}) {
      for (const char* kind : {"weight", "bias"}) {
        if (rest == std::string("self_attn.") + qk + "_proj." + kind) {
          Target t{blk + "attn_" + qk + "." + kind};
          if (permute_qk) t.transform = qk[0] == 'q' ? Transform::kPermuteQ : Transform::kPermuteK;
          return t;
        }
      }
    }
    if (n_experts > 0) {
      // mlp.experts.E.gate_proj.weight (Qwen MoE) / block_sparse_moe.experts.E.w1.weight (Mixtral)
      for (const std::string& head : {std::string("mlp.experts."), std::string("block_sparse_moe.experts.")}) {
        if (rest.rfind(head, 0) != 0) continue;
        const size_t d = rest.find('.', head.size());
        if (d == std::string::npos) return std::nullopt;
        const std::string e = rest.substr(head.size(), d - head.size());
        if (e.empty() || e.size() > 5 || !std::all_of(e.begin(), e.end(), ::isdigit)) return std::nullopt;
        static const std::map<std::string, std::string> kExpert = {
            {"gate_proj.weight", "ffn_gate_exps.weight"}, {"up_proj.weight", "ffn_up_exps.weight"},
            {"down_proj.weight", "ffn_down_exps.weight"}, {"w1.weight", "ffn_gate_exps.weight"},
            {"w3.weight", "ffn_up_exps.weight"},          {"w2.weight", "ffn_down_exps.weight"},
        };
        auto it = kExpert.find(rest.substr(d + 1));
        if (it == kExpert.end()) return std::nullopt;
        return Target{blk + it->second, Transform::kNone, std::stoll(e), n_experts};
      }
    }
    return std::nullopt;
  };
}

std::function<std::optional<Target>(const std::string&)> gemma_tensor_rule() {
  auto base = llama_tensor_rule(false, 0);
  return [base](const std::string& name) -> std::optional<Target> {
    static const std::pair<const char*, const char*> kNorms[] = {
        {"post_attention_layernorm.weight", "post_attention_norm.weight"},
        {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
        {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    };
    if (const auto layer = split_layer_name(name))
      for (const auto& [hf, gg] : kNorms)
        if (layer->second == hf) return Target{"blk." + std::to_string(layer->first) + "." + gg, Transform::kAddOne};
    std::optional<Target> t = base(name);
    if (t && !t->name.empty()) {
      const std::string& n = t->name;
      for (const char* norm : {"attn_norm.weight", "attn_q_norm.weight", "attn_k_norm.weight", "output_norm.weight"})
        if (n.size() >= std::strlen(norm) && n.compare(n.size() - std::strlen(norm), std::strlen(norm), norm) == 0 &&
            (n == norm || n[n.size() - std::strlen(norm) - 1] == '.'))
          t->transform = Transform::kAddOne;
    }
    return t;
  };
}

int64_t gemma_attention(Config& cfg, Conversion& c, int64_t layers_27b) {
  const int64_t n_layers = cfg.i("num_hidden_layers", 1, 4096);
  const int64_t head_dim = cfg.i("head_dim", 1, 4096, 256);
  c.u32("attention.key_length", head_dim);
  c.u32("attention.value_length", head_dim);
  c.u32("attention.sliding_window", cfg.i("sliding_window", 1, int64_t{1} << 30, 4096));
  const int64_t q_scalar = n_layers == layers_27b
                               ? cfg.i("hidden_size", 1, int64_t{1} << 20) / std::max<int64_t>(cfg.i("num_attention_heads", 1, 4096), 1)
                               : head_dim;
  if (cfg.i("query_pre_attn_scalar", 1, int64_t{1} << 20, q_scalar) != q_scalar)
    cfg.fail("'query_pre_attn_scalar' must be " + std::to_string(q_scalar) + " for this model");
  return head_dim;
}

void expect_layers(Config& cfg, const std::string& key, const std::vector<int64_t>& expected) {
  auto v = cfg.ints(key);
  if (!v) return;
  if (*v != expected) {
    std::string want;
    for (int64_t e : expected) want += (want.empty() ? "" : ", ") + std::to_string(e);
    cfg.bad(key, "[" + want + "] (the layer pattern this architecture supports)", *cfg.find(key));
  }
}

// --- the folder -------------------------------------------------------------------------------
bool is_model_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "config.json", ec);
}

namespace {

constexpr size_t kMaxConfigBytes = size_t{16} << 20;
constexpr size_t kMaxTokenizerBytes = size_t{256} << 20;

struct Owned {
  safetensors::Folder folder;
  std::vector<std::unique_ptr<uint8_t, AlignedFree>> buffers;
  explicit Owned(safetensors::Folder f) : folder(std::move(f)) {}
};

uint8_t* new_buffer(Owned& o, size_t n) {
  const size_t bytes = (std::max<size_t>(n, 64) + 63) / 64 * 64;
  o.buffers.emplace_back(static_cast<uint8_t*>(std::aligned_alloc(64, bytes)));
  SPECULA_CHECK(o.buffers.back() != nullptr);
  return o.buffers.back().get();
}

float element_f32(const uint8_t* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case DType::F16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return fp16_to_fp32(h);
    }
    default: {  // BF16
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return bf16_to_fp32(h);
    }
  }
}

// Adds the tokenizer / chat template / generation defaults to the metadata.
Status read_side_files(const fs::path& dir, Conversion& c) {
  std::error_code ec;
  if (fs::is_regular_file(dir / "tokenizer.json", ec)) {
    auto text = read_text((dir / "tokenizer.json").string(), kMaxTokenizerBytes);
    if (!text) return text.status();
    c.str(".tokenizer.huggingface.json", *text);
  }
  std::optional<std::string> chat_template;
  if (fs::is_regular_file(dir / "tokenizer_config.json", ec)) {
    const std::string path = (dir / "tokenizer_config.json").string();
    auto tc = parse_json_file(path, kMaxConfigBytes);
    if (!tc) return tc.status();
    if (!tc->is_object()) return Status::error("[hf] " + path + ": not a JSON object");
    if (auto it = tc->find("chat_template"); it != tc->end() && !it->is_null()) {
      if (it->is_string()) {
        chat_template = it->get<std::string>();
      } else if (it->is_array()) {
        for (const json& e : *it) {
          if (!e.is_object() || !e.contains("name") || !e.contains("template") || !e["name"].is_string() ||
              !e["template"].is_string())
            return Status::error("[hf] " + path + ": 'chat_template' list entries must be {\"name\", \"template\"} strings");
          if (e["name"] == "default") chat_template = e["template"].get<std::string>();
        }
      } else {
        return Status::error("[hf] " + path + ": 'chat_template' must be a string or a list, got " + shown(*it));
      }
    }
    for (const char* k : {"add_bos_token", "add_eos_token"}) {
      if (auto it = tc->find(k); it != tc->end() && !it->is_null()) {
        if (!it->is_boolean()) return Status::error("[hf] " + path + ": '" + k + "' must be a boolean, got " + shown(*it));
        c.boolean(std::string(".tokenizer.ggml.") + k, it->get<bool>());
      }
    }
    for (const char* k : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
      auto it = tc->find(k);
      if (it == tc->end() || it->is_null()) continue;
      std::string text;
      if (it->is_string()) text = it->get<std::string>();
      else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) text = (*it)["content"];
      else return Status::error("[hf] " + path + ": '" + k + "' must be a string or {\"content\": ...}, got " + shown(*it));
      c.str(std::string(".specula.tokenizer.") + k, text);
    }
  }
  if (fs::is_regular_file(dir / "chat_template.jinja", ec)) {
    auto text = read_text((dir / "chat_template.jinja").string(), kMaxConfigBytes);
    if (!text) return text.status();
    chat_template = *text;
  }
  if (chat_template) c.str(".tokenizer.chat_template", *chat_template);
  if (fs::is_regular_file(dir / "generation_config.json", ec)) {
    const std::string path = (dir / "generation_config.json").string();
    auto text = read_text(path, kMaxConfigBytes);
    if (!text) return text.status();
    auto g = Config::parse(*text, path);
    if (!g) return g.status();
    if (const json* e = g->find("eos_token_id")) {
      std::vector<int64_t> ids;
      const bool list = e->is_array() && std::all_of(e->begin(), e->end(), [](const json& x) { return x.is_number_integer(); });
      if (e->is_number_integer()) ids.push_back(e->get<int64_t>());
      else if (list) ids = e->get<std::vector<int64_t>>();
      if (!e->is_number_integer() && !list) g->bad("eos_token_id", "a token id or a list of token ids", *e);
      for (int64_t id : ids)
        if (id < 0 || id > INT32_MAX) g->bad("eos_token_id", "token ids in [0, 2^31)", *e);
      if (g->status().is_ok()) c.i32s(".specula.generation.eos_token_ids", ids);
    }
    const bool sample = g->b("do_sample", true);
    if (g->has("temperature") || !sample) c.f32(".general.sampling.temp", sample ? g->f("temperature", 0.0, 100.0) : 0.0);
    if (g->has("top_p")) c.f32(".general.sampling.top_p", g->f("top_p", 0.0, 1.0));
    if (g->has("top_k")) c.u32(".general.sampling.top_k", g->i("top_k", 0, int64_t{1} << 31));
    if (g->has("min_p")) c.f32(".general.sampling.min_p", g->f("min_p", 0.0, 1.0));
    if (!g->status().is_ok()) return g->status();
  }
  return Status::ok();
}

// Copies `t` (row-major [rows, cols]) permuting rows within each head from the half-split
// order [2, hd/2] to the interleaved [hd/2, 2] (llama.cpp's LlamaModel.permute).
Status permute_rows(const safetensors::TensorInfo& t, int64_t n_heads, uint8_t* dst, const std::string& who) {
  const int64_t rows = t.shape.empty() ? 0 : t.shape[0];
  const int64_t cols = t.shape.size() >= 2 ? t.n_elements() / std::max<int64_t>(rows, 1) : 1;
  if (n_heads <= 0 || rows % (2 * n_heads) != 0)
    return Status::error(who + ": " + std::to_string(rows) + " rows cannot be permuted over " +
                         std::to_string(n_heads) + " heads (rows must be a multiple of 2 * heads)");
  const int64_t hd = rows / n_heads, half = hd / 2;
  const size_t row_bytes = static_cast<size_t>(cols) * safetensors::element_size(t.type);
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::memcpy(dst + static_cast<size_t>(h * hd + 2 * i + j) * row_bytes,
                    t.data + static_cast<size_t>(h * hd + j * half + i) * row_bytes, row_bytes);
  return Status::ok();
}

// Copies `t` with the span of its first dimension (or, r.columns, the last of a 2-D tensor)
// [offset, offset + groups * per_group * unit) reordered from [groups, per_group, unit] to
// [per_group, groups, unit] (the converter's _reorder_v_heads; hf_folder.h HeadReorder).
Status reorder_heads(const safetensors::TensorInfo& t, const HeadReorder& r, uint8_t* dst, const std::string& who) {
  const int64_t n = t.shape.empty() ? 0 : (r.columns ? t.shape.back() : t.shape[0]);
  const int64_t span = r.groups * r.per_group * r.unit;
  if ((r.columns && t.shape.size() != 2) || r.groups <= 0 || r.per_group <= 0 || r.unit <= 0 || r.offset < 0 ||
      r.offset + span != n)
    return Status::error(who + ": " + std::to_string(n) + (r.columns ? " columns" : " rows") +
                         " cannot hold " + std::to_string(r.offset) + " + " + std::to_string(r.groups) + " x " +
                         std::to_string(r.per_group) + " heads of " + std::to_string(r.unit) + " (head reorder)");
  std::memcpy(dst, t.data, t.n_bytes);
  const int64_t outer = r.columns ? t.shape[0] : 1;  // rows, each reordered (columns)
  const size_t piece = r.columns ? safetensors::element_size(t.type) : t.n_bytes / static_cast<size_t>(n);
  const size_t line = piece * static_cast<size_t>(n);  // bytes of one reordered line
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t g = 0; g < r.groups; ++g)
      for (int64_t j = 0; j < r.per_group; ++j)
        std::memcpy(dst + static_cast<size_t>(o) * line + static_cast<size_t>(r.offset + (j * r.groups + g) * r.unit) * piece,
                    t.data + static_cast<size_t>(o) * line + static_cast<size_t>(r.offset + (g * r.per_group + j) * r.unit) * piece,
                    static_cast<size_t>(r.unit) * piece);
  return Status::ok();
}

// MLX affine quantization (mlx-lm's config.json "quantization": {"group_size", "bits"} plus
// per-module overrides {"group_size", "bits"} or false for a module left in floats).
struct MlxQuant {
  int64_t bits = 0, group_size = 0;
};
struct MlxConfig {
  std::optional<MlxQuant> global;
  std::map<std::string, std::optional<MlxQuant>> modules;
  bool any() const { return global.has_value() || !modules.empty(); }
};

Result<MlxConfig> read_mlx_quantization(Config& cfg) {
  MlxConfig m;
  const json* q = cfg.find("quantization");
  const char* key = "quantization";
  if (q == nullptr) {
    q = cfg.find("quantization_config");
    key = "quantization_config";
  }
  if (q == nullptr) return m;
  const std::string where = "[hf] " + cfg.path() + ": '" + key + "'";
  if (!q->is_object()) return Status::error(where + " must be an object, got " + shown(*q));
  if (auto qm = q->find("quant_method"); qm != q->end())
    return Status::error(where + ": quant_method " + shown(*qm) +
                         " is not supported (MLX affine quantization is; or load the unquantized model and use "
                         "--quantize)");
  if (auto mode = q->find("mode"); mode != q->end() && !(mode->is_string() && mode->get<std::string>() == "affine"))
    return Status::error(where + ": mode " + shown(*mode) + " is not supported (affine)");
  const auto parse = [&](const json& j, const std::string& name) -> Result<MlxQuant> {
    MlxQuant r;
    auto b = j.find("bits"), g = j.find("group_size");
    if (b == j.end() || !b->is_number_integer() || g == j.end() || !g->is_number_integer())
      return Status::error(where + (name.empty() ? "" : "['" + name + "']") + ": needs integer 'bits' and 'group_size'");
    r.bits = b->get<int64_t>(), r.group_size = g->get<int64_t>();
    if (r.bits != 2 && r.bits != 3 && r.bits != 4 && r.bits != 5 && r.bits != 6 && r.bits != 8)
      return Status::error(where + (name.empty() ? "" : "['" + name + "']") + ": bits " + std::to_string(r.bits) +
                           " (2, 3, 4, 5, 6 or 8)");
    if (r.group_size != 32 && r.group_size != 64 && r.group_size != 128)
      return Status::error(where + (name.empty() ? "" : "['" + name + "']") + ": group_size " +
                           std::to_string(r.group_size) + " (32, 64 or 128)");
    return r;
  };
  auto g = parse(*q, "");
  if (!g) return g.status();
  m.global = *g;
  for (auto it = q->begin(); it != q->end(); ++it) {
    if (it.key() == "bits" || it.key() == "group_size" || it.key() == "mode") continue;
    if (it.value().is_boolean() && !it.value().get<bool>()) {
      m.modules[it.key()] = std::nullopt;
    } else if (it.value().is_object()) {
      auto r = parse(it.value(), it.key());
      if (!r) return r.status();
      m.modules[it.key()] = *r;
    } else {
      return Status::error(where + "['" + it.key() + "'] must be {\"bits\", \"group_size\"} or false, got " +
                           shown(it.value()));
    }
  }
  return m;
}

// Code j of a row of MLX-packed codes: bits [j*bits, (j+1)*bits) of the row's little-endian
// bit stream (MLX packs the first elements into the lowest bits; 3-, 5- and 6-bit codes run
// across word boundaries).
inline uint32_t mlx_code(const uint8_t* row, int64_t j, int64_t bits) {
  const int64_t bit = j * bits;
  uint32_t v = 0;
  std::memcpy(&v, row + bit / 8, std::min<int64_t>(4, (bit % 8 + bits + 7) / 8));
  return (v >> (bit % 8)) & ((1u << bits) - 1u);
}

// An MLX-quantized matrix [N, K]: 4-bit codes in groups of a multiple of 32 become Q4_1 blocks
// (x = d * q + m: d = scale, m = bias as f16, exact for bf16/f16 scales in f16's range);
// 8-bit codes Q8_A blocks (x = d * (q - 128) + m, d = scale, m = bias + 128 * scale in f32:
// exact but for the rounding of that sum); other widths F32 rows, scale * q + bias (exact:
// the product of a code and a bf16/f16 scale is exact in f32).
Status convert_mlx(const safetensors::TensorInfo& w, const safetensors::TensorInfo& scales,
                   const safetensors::TensorInfo& biases, const MlxQuant& q, Owned& owned, gguf::TensorInfo* g,
                   const std::string& where) {
  if (w.type != safetensors::ElementType::U32 || w.shape.size() != 2)
    return Status::error(where + ": an MLX-quantized weight must be U32 [N, K * bits / 32]");
  const int64_t N = w.shape[0];
  const int64_t K = w.shape[1] * 32 / q.bits;
  if (w.shape[1] * 32 % q.bits != 0 || K % q.group_size != 0)
    return Status::error(where + ": " + std::to_string(w.shape[1]) + " words per row is not whole groups of " +
                         std::to_string(q.group_size) + " " + std::to_string(q.bits) + "-bit codes");
  const int64_t G = K / q.group_size;
  for (const safetensors::TensorInfo* t : {&scales, &biases}) {
    if (!t->dtype || t->shape != std::vector<int64_t>{N, G})
      return Status::error(where + ": '" + t->name + "' must be F32/F16/BF16 [" + std::to_string(N) + ", " +
                           std::to_string(G) + "] for " + std::to_string(q.bits) + "-bit groups of " +
                           std::to_string(q.group_size));
  }
  const size_t w_row = static_cast<size_t>(w.shape[1]) * 4;
  g->shape = {K, N};
  if (q.bits == 4 && q.group_size % 32 == 0) {
    g->type = DType::Q4_1;
    g->n_bytes = static_cast<size_t>(N) * static_cast<size_t>(K / 32) * sizeof(BlockQ4_1);
    auto* blocks = reinterpret_cast<BlockQ4_1*>(new_buffer(owned, g->n_bytes));
    for (int64_t r = 0; r < N; ++r) {
      const uint8_t* row = w.data + static_cast<size_t>(r) * w_row;
      for (int64_t b = 0; b < K / 32; ++b) {
        BlockQ4_1& blk = blocks[r * (K / 32) + b];
        const int64_t grp = r * G + b * 32 / q.group_size;
        blk.d = fp32_to_fp16(element_f32(scales.data, *scales.dtype, grp));
        blk.m = fp32_to_fp16(element_f32(biases.data, *biases.dtype, grp));
        for (int j = 0; j < 16; ++j)  // Q4_1: element j in the low nibble of qs[j], j + 16 in the high one
          blk.qs[j] = static_cast<uint8_t>(mlx_code(row, 32 * b + j, 4) | (mlx_code(row, 32 * b + j + 16, 4) << 4));
      }
    }
    g->data = reinterpret_cast<uint8_t*>(blocks);
    return Status::ok();
  }
  if (q.bits == 8 && q.group_size % 32 == 0) {
    // Q8_A blocks: x = d * (q - 128) + m with d = scale, m = bias + 128 * scale (f32).
    g->type = DType::Q8_A;
    g->n_bytes = static_cast<size_t>(N) * static_cast<size_t>(K / 32) * sizeof(BlockQ8_A);
    auto* blocks = reinterpret_cast<BlockQ8_A*>(new_buffer(owned, g->n_bytes));
    for (int64_t r = 0; r < N; ++r) {
      const uint8_t* row = w.data + static_cast<size_t>(r) * w_row;
      for (int64_t b = 0; b < K / 32; ++b) {
        BlockQ8_A& blk = blocks[r * (K / 32) + b];
        const int64_t grp = r * G + b * 32 / q.group_size;
        blk.d = element_f32(scales.data, *scales.dtype, grp);
        blk.m = element_f32(biases.data, *biases.dtype, grp) + 128.0f * blk.d;
        for (int j = 0; j < 32; ++j) blk.qs[j] = static_cast<int8_t>(static_cast<int>(row[32 * b + j]) - 128);
      }
    }
    g->data = reinterpret_cast<uint8_t*>(blocks);
    return Status::ok();
  }
  g->type = DType::F32;
  g->n_bytes = static_cast<size_t>(N * K) * 4;
  auto* y = reinterpret_cast<float*>(new_buffer(owned, g->n_bytes));
  for (int64_t r = 0; r < N; ++r) {
    const uint8_t* row = w.data + static_cast<size_t>(r) * w_row;
    for (int64_t j = 0; j < K; ++j) {
      const int64_t grp = r * G + j / q.group_size;
      y[r * K + j] = element_f32(scales.data, *scales.dtype, grp) * static_cast<float>(mlx_code(row, j, q.bits)) +
                     element_f32(biases.data, *biases.dtype, grp);
    }
  }
  g->data = reinterpret_cast<uint8_t*>(y);
  return Status::ok();
}

// Rows of a converted tensor permuted as permute_rows does.
void permute_owned_rows(gguf::TensorInfo& g, int64_t n_heads, Owned& owned) {
  const int64_t rows = g.shape.size() >= 2 ? g.shape[1] : g.shape[0];
  const size_t row_bytes = g.n_bytes / static_cast<size_t>(rows);
  uint8_t* dst = new_buffer(owned, g.n_bytes);
  const int64_t hd = rows / n_heads, half = hd / 2;
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::memcpy(dst + static_cast<size_t>(h * hd + 2 * i + j) * row_bytes,
                    g.data + static_cast<size_t>(h * hd + j * half + i) * row_bytes, row_bytes);
  g.data = dst;
}

}  // namespace

Result<gguf::GgufFile> open_folder(const std::string& path) {
  std::error_code ec;
  fs::path dir = path;
  if (fs::is_regular_file(dir, ec)) dir = dir.parent_path();
  const std::string config_path = (dir / "config.json").string();
  if (fs::exists(config_path, ec) && !fs::is_regular_file(config_path, ec))
    return Status::error("[hf] " + config_path + ": not a regular file");
  if (!fs::is_regular_file(config_path, ec))
    return Status::invalid_argument("[hf] " + dir.string() + ": no config.json (not a Hugging Face model folder)");
  auto text = read_text(config_path, kMaxConfigBytes);
  if (!text) return text.status();
  auto cfg = Config::parse(*text, config_path);
  if (!cfg) return cfg.status();

  std::string hf_arch;
  if (auto archs = cfg->strings("architectures"); archs && !archs->empty()) hf_arch = archs->front();
  if (!cfg->status().is_ok()) return cfg->status();
  if (hf_arch.empty()) return Status::error("[hf] " + config_path + ": missing 'architectures' (a list of class names)");
  auto it = registry().find(hf_arch);
  if (it == registry().end()) {
    std::string known;
    for (const auto& [k, v] : registry()) known += (known.empty() ? "" : ", ") + k;
    return Status::error("[hf] " + config_path + ": architecture '" + hf_arch + "' is not supported (supported: " +
                         known + ")");
  }
  auto mlx = read_mlx_quantization(*cfg);
  if (!mlx) return mlx.status();

  Conversion conv(it->second.gguf_arch);
  conv.str(".general.architecture", it->second.gguf_arch);
  conv.str(".general.name", dir.filename().string());
  it->second.convert(*cfg, conv);
  const bool tied = cfg->b("tie_word_embeddings", it->second.tie_default);
  if (!cfg->status().is_ok()) return cfg->status();
  if (!conv.map) return Status::error("[hf] " + hf_arch + ": the mapping sets no tensor rule");
  SPECULA_RETURN_IF_ERROR(read_side_files(dir, conv));

  auto folder = safetensors::Folder::open(dir.string());
  if (!folder) return folder.status();
  auto owned = std::make_shared<Owned>(std::move(folder).value());

  std::vector<gguf::TensorInfo> out;
  struct Stack {
    std::vector<const safetensors::TensorInfo*> experts;
  };
  std::map<std::string, Stack> stacks;
  const auto ends_with = [](const std::string& n, const std::string& suffix) {
    return n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  int64_t mlx_tensors = 0;
  std::map<std::string, std::string> source_names;  // GGUF name -> folder name
  for (const safetensors::TensorInfo* t : owned->folder.tensors()) {
    const std::string where = "[hf] " + dir.string() + ": tensor '" + t->name + "'";
    // MLX: X.scales / X.biases belong to the U32 X.weight (converted with it).
    if (mlx->any() && (ends_with(t->name, ".scales") || ends_with(t->name, ".biases"))) {
      const std::string module = t->name.substr(0, t->name.rfind('.'));
      const safetensors::TensorInfo* w = owned->folder.find(module + ".weight");
      if (w != nullptr && w->type == safetensors::ElementType::U32) continue;
    }
    const bool mlx_weight = mlx->any() && t->type == safetensors::ElementType::U32 && ends_with(t->name, ".weight");
    std::optional<Target> target = conv.map(t->name);
    if (!target) return Status::error(where + " has no place in a '" + conv.arch() + "' model (" + hf_arch + ")");
    if (target->name.empty() || (tied && target->name == "output.weight")) continue;
    if (mlx_weight) {
      const std::string module = t->name.substr(0, t->name.size() - 7);
      std::optional<MlxQuant> q = mlx->global;
      if (auto o = mlx->modules.find(module); o != mlx->modules.end()) q = o->second;
      const safetensors::TensorInfo* sc = owned->folder.find(module + ".scales");
      const safetensors::TensorInfo* bi = owned->folder.find(module + ".biases");
      if (!q) return Status::error(where + ": U32 codes, but config.json's quantization leaves '" + module + "' unquantized");
      if (sc == nullptr || bi == nullptr)
        return Status::error(where + ": MLX-quantized weight without '" + module + (sc == nullptr ? ".scales" : ".biases") + "'");
      if (target->expert >= 0) return Status::error(where + ": MLX-quantized experts are not supported");
      if (target->reorder.groups > 0)
        return Status::error(where + ": an MLX-quantized tensor whose heads the architecture reorders (not supported)");
      gguf::TensorInfo g;
      g.name = target->name;
      SPECULA_RETURN_IF_ERROR(convert_mlx(*t, *sc, *bi, *q, *owned, &g, where));
      if (target->transform == Transform::kPermuteQ || target->transform == Transform::kPermuteK) {
        const int64_t heads = target->transform == Transform::kPermuteQ ? conv.n_heads : conv.n_kv_heads;
        if (heads <= 0 || g.shape[1] % (2 * heads) != 0)
          return Status::error(where + ": " + std::to_string(g.shape[1]) + " rows cannot be permuted over " +
                               std::to_string(heads) + " heads");
        permute_owned_rows(g, heads, *owned);
      } else if (target->transform != Transform::kNone) {
        return Status::error(where + ": an MLX-quantized tensor where the architecture needs floats");
      }
      ++mlx_tensors;
      source_names[g.name] = t->name;
      out.push_back(std::move(g));
      continue;
    }
    if (target->transform == Transform::kOffsetIds) {
      const bool i64 = t->type == safetensors::ElementType::I64;
      if ((!i64 && t->type != safetensors::ElementType::I32) || t->shape.size() != 1)
        return Status::error(where + ": expected a 1-D I64 or I32 tensor of id offsets, got " +
                             std::string(safetensors::element_type_name(t->type)) + " of " +
                             std::to_string(t->shape.size()) + " dimensions");
      const int64_t n = t->shape[0];
      auto* d = reinterpret_cast<int64_t*>(new_buffer(*owned, static_cast<size_t>(n) * 8));
      for (int64_t k = 0; k < n; ++k) {
        int64_t v = 0;
        if (i64) {
          std::memcpy(&v, t->data + k * 8, 8);
        } else {
          int32_t v32 = 0;
          std::memcpy(&v32, t->data + k * 4, 4);
          v = v32;
        }
        if (__builtin_add_overflow(k, v, &d[k]) || d[k] < 0)
          return Status::error(where + ": offset " + std::to_string(v) + " at index " + std::to_string(k) +
                               " gives an id outside [0, 2^63)");
      }
      gguf::TensorInfo g;
      g.name = target->name;
      g.shape = {n};
      g.type = DType::I64;
      g.n_bytes = static_cast<size_t>(n) * 8;
      g.data = reinterpret_cast<uint8_t*>(d);
      source_names[g.name] = t->name;
      out.push_back(std::move(g));
      continue;
    }
    if (!t->dtype)
      return Status::error(where + ": dtype " + std::string(safetensors::element_type_name(t->type)) +
                           " is not supported (F32, F16, BF16)");
    if (t->shape.empty() || t->shape.size() > 3 || t->n_elements() == 0)
      return Status::error(where + ": shape of " + std::to_string(t->shape.size()) + " dimensions (1 to 3, non-empty)");
    if (target->expert >= 0) {
      if (target->reorder.groups > 0 || target->transform != Transform::kNone)
        return Status::error(where + ": an expert tensor cannot be transformed");
      Stack& s = stacks[target->name];
      if (target->expert >= target->n_experts)
        return Status::error(where + ": expert " + std::to_string(target->expert) + " of " +
                             std::to_string(target->n_experts));
      s.experts.resize(static_cast<size_t>(target->n_experts), nullptr);
      s.experts[target->expert] = t;
      continue;
    }
    gguf::TensorInfo g;
    g.name = target->name;
    g.shape.assign(t->shape.rbegin(), t->shape.rend());
    g.type = *t->dtype;
    g.n_bytes = t->n_bytes;
    const size_t esize = safetensors::element_size(t->type);
    safetensors::TensorInfo src = *t;  // the stored data, or its copy with the heads reordered
    if (target->reorder.groups > 0) {
      uint8_t* d = new_buffer(*owned, t->n_bytes);
      SPECULA_RETURN_IF_ERROR(reorder_heads(*t, target->reorder, d, where));
      src.data = d;
      src.alignment = 64;
    }
    switch (target->transform) {
      case Transform::kNone:
      case Transform::kSqueeze:
        if (src.alignment >= esize) {
          g.data = src.data;
        } else {
          uint8_t* d = new_buffer(*owned, t->n_bytes);
          std::memcpy(d, src.data, t->n_bytes);
          g.data = d;
        }
        if (target->transform == Transform::kSqueeze) {
          std::erase(g.shape, int64_t{1});
          if (g.shape.empty()) g.shape = {1};
        }
        break;
      case Transform::kPermuteQ:
      case Transform::kPermuteK: {
        uint8_t* d = new_buffer(*owned, t->n_bytes);
        SPECULA_RETURN_IF_ERROR(
            permute_rows(src, target->transform == Transform::kPermuteQ ? conv.n_heads : conv.n_kv_heads, d, where));
        g.data = d;
        break;
      }
      case Transform::kOffsetIds:  // (handled above)
      case Transform::kAddOne:
      case Transform::kNegExp: {
        const int64_t n = t->n_elements();
        auto* d = reinterpret_cast<float*>(new_buffer(*owned, static_cast<size_t>(n) * 4));
        if (target->transform == Transform::kAddOne)
          for (int64_t k = 0; k < n; ++k) d[k] = element_f32(src.data, *t->dtype, k) + 1.0f;
        else
          for (int64_t k = 0; k < n; ++k)
            d[k] = static_cast<float>(-std::exp(static_cast<double>(element_f32(src.data, *t->dtype, k))));
        g.data = reinterpret_cast<uint8_t*>(d);
        g.type = DType::F32;
        g.n_bytes = static_cast<size_t>(n) * 4;
        break;
      }
    }
    source_names[g.name] = t->name;
    out.push_back(std::move(g));
  }
  if (!tied && std::none_of(out.begin(), out.end(), [](const gguf::TensorInfo& g) { return g.name == "output.weight"; }))
    return Status::error("[hf] " + dir.string() + ": missing tensor 'lm_head.weight' (config.json: tie_word_embeddings is " +
                         "false)");
  for (auto& [name, s] : stacks) {
    const safetensors::TensorInfo* first = nullptr;
    for (size_t e = 0; e < s.experts.size(); ++e) {
      const safetensors::TensorInfo* t = s.experts[e];
      if (t == nullptr)
        return Status::error("[hf] " + dir.string() + ": expert " + std::to_string(e) + " of '" + name +
                             "' is missing (" + std::to_string(s.experts.size()) + " experts)");
      if (first == nullptr) first = t;
      if (t->shape != first->shape || t->type != first->type || t->shape.size() != 2)
        return Status::error("[hf] " + dir.string() + ": tensor '" + t->name + "' differs in shape or dtype from '" +
                             first->name + "' (experts of '" + name + "' must match, 2-D)");
    }
    gguf::TensorInfo g;
    g.name = name;
    g.shape = {first->shape[1], first->shape[0], static_cast<int64_t>(s.experts.size())};
    g.type = *first->dtype;
    g.n_bytes = first->n_bytes * s.experts.size();
    uint8_t* d = new_buffer(*owned, g.n_bytes);
    for (size_t e = 0; e < s.experts.size(); ++e) std::memcpy(d + e * first->n_bytes, s.experts[e]->data, first->n_bytes);
    g.data = d;
    out.push_back(std::move(g));
  }
  if (mlx_tensors > 0) conv.u32(".specula.source.mlx_quantized_tensors", mlx_tensors);
  for (auto& [name, data] : conv.extra()) {
    gguf::TensorInfo g;
    g.name = name;
    g.shape = {static_cast<int64_t>(data.size())};
    g.type = DType::F32;
    g.n_bytes = data.size() * 4;
    uint8_t* d = new_buffer(*owned, g.n_bytes);
    std::memcpy(d, data.data(), g.n_bytes);
    g.data = d;
    out.push_back(std::move(g));
  }
  // Names of tensors the folder lacks, for errors about missing ones: the rule applied to the
  // usual names of each layer (and the global ones).
  if (auto n = conv.kv().find(conv.arch() + ".block_count"); n != conv.kv().end()) {
    static const char* kLayerNames[] = {
        "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
        "self_attn.o_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
        "self_attn.q_norm.weight", "self_attn.k_norm.weight", "post_attention_layernorm.weight",
        "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight", "mlp.gate_proj.weight",
        "mlp.up_proj.weight", "mlp.down_proj.weight", "mlp.gate.weight", "self_attn.qkv_proj.weight",
        "mlp.gate_up_proj.weight"};
    std::vector<std::string> names = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
    for (uint64_t il = 0; il < std::min<uint64_t>(n->second.u, 4096); ++il)
      for (const char* suffix : kLayerNames) names.push_back("model.layers." + std::to_string(il) + "." + suffix);
    for (const std::string& hf_name : names)
      if (auto t = conv.map(hf_name); t && !t->name.empty() && t->expert < 0) source_names.emplace(t->name, hf_name);
  }
  // The config.json keys behind the standard metadata keys (for errors).
  for (const auto& [gguf_key, hf_key] :
       {std::pair{"block_count", "num_hidden_layers"}, std::pair{"embedding_length", "hidden_size"},
        std::pair{"feed_forward_length", "intermediate_size"}, std::pair{"attention.head_count", "num_attention_heads"},
        std::pair{"attention.head_count_kv", "num_key_value_heads"},
        std::pair{"context_length", "max_position_embeddings"}, std::pair{"attention.key_length", "head_dim"},
        std::pair{"attention.layer_norm_rms_epsilon", "rms_norm_eps"}, std::pair{"rope.freq_base", "rope_theta"}})
    source_names[conv.arch() + "." + gguf_key] = std::string("config.json: ") + hf_key;
  auto f = gguf::GgufFile::assemble(dir.string(), std::move(conv.kv()), std::move(conv.keys()), std::move(out),
                                    std::shared_ptr<const void>(owned, owned.get()));
  if (f) f->set_source_names(std::move(source_names));
  return f;
}

Status permute_qk_rows(const safetensors::TensorInfo& t, int64_t n_heads, uint8_t* dst, const std::string& who) {
  return permute_rows(t, n_heads, dst, who);
}

}  // namespace specula::hf
