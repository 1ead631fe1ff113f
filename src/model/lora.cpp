// model/lora.cpp — loading llama.cpp's GGUF LoRA adapters against a transformer's
// configuration (model/lora.h).
#include "model/lora.h"

#include <cmath>
#include <map>
#include <utility>

#include "formats/gguf.h"
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
  const gguf::GgufFile& f = *file;
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
  adapter->path_ = path;
  adapter->base_id_ = model != nullptr ? model->instance_id() : 0;
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
      return Status::error(who + "tensor '" + t.name + "' is neither a .lora_a nor a .lora_b");
    const std::string target = t.name.substr(0, t.name.size() - kA.size());
    const std::string other = target + (is_a ? kB : kA);
    const gguf::TensorInfo* pair = f.find_tensor(other);
    if (pair == nullptr) return Status::error(who + "'" + t.name + "' has no '" + other + "'");
    if (!is_a) continue;  // each pair once, from its A
    const auto w = weights.find(target);
    if (w == weights.end())
      return Status::error(who + "'" + t.name + "' adapts '" + target +
                           "', which is not an adaptable weight of this model (attention q/k/v/qkv/output and "
                           "dense feed-forward gate/up/down projections)");
    const Adaptable& aw = w->second;
    const gguf::TensorInfo& tb = *pair;
    if (t.shape.size() != 2 || tb.shape.size() != 2 || t.shape[0] != aw.n_in || tb.shape[1] != aw.n_out ||
        t.shape[1] != tb.shape[0] || t.shape[1] < 1)
      return Status::error(who + "'" + target + "' is [" + std::to_string(aw.n_in) + ", " + std::to_string(aw.n_out) +
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
  return std::shared_ptr<const LoraAdapter>(std::move(adapter));
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
