// model/lora.h — LoRA adapters applied without merging (Hu et al., "LoRA: Low-Rank Adaptation
// of Large Language Models", arXiv:2106.09685): for an adapted projection y = W x of layer il,
//     y += s · B (A x),   s = user scale · alpha / rank
// with A [rank, n_in] and B [n_out, rank] kept apart from W (W stays shared, quantized and
// repacked as loaded). Each row of a batch carries its own set of adapters (Batch::lora), so
// one step serves rows with different adapters, several at once (their deltas add, each with
// its scale, as llama.cpp's list of scaled adapters), or none.
//
// File format: llama.cpp's GGUF LoRA (what convert_lora_to_gguf.py writes): general.type
// "adapter", adapter.type "lora", adapter.lora.alpha (f32; 0 or absent: s = user scale, as
// llama.cpp reads it), general.architecture the base model's; for each adapted weight `W.weight`
// of the base (its GGUF name, e.g. blk.3.attn_q.weight) two tensors `W.weight.lora_a` of GGUF
// shape [n_in, rank] and `W.weight.lora_b` of GGUF shape [rank, n_out], in any matmul weight
// type (f32, f16, bf16, quantized).
// PEFT folders (Hugging Face peft's save_pretrained): adapter_config.json (peft_type "LORA", r,
// lora_alpha, use_rslora, rank_pattern / alpha_pattern {module regex: value} matched as PEFT
// does — the first key K with the module name matching (^|.*\.)K$) and
// adapter_model.safetensors with base_model.model.[model.]layers.N.<module>.lora_A.weight
// [rank, n_in] and lora_B.weight [n_out, rank] (F32/F16/BF16). Modules: self_attn.{q,k,v,o}_proj,
// self_attn.qkv_proj, mlp.{gate,up,down}_proj, mlp.gate_up_proj (Phi-3's fused pair -> ffn_up).
// A pair's scale is alpha / rank (alpha / sqrt(rank) with use_rslora), each module with its own
// rank and alpha; llama.cpp's convert_lora_to_gguf.py writes one alpha and ignores use_rslora
// and alpha_pattern. Where the converter permutes Q/K rows (Llama-style RoPE: llama, smollm3;
// hf::permutes_qk) B's rows of q_proj / k_proj are permuted the same way (A is unchanged), so
// the folder gives what the GGUF converted from it gives. Refused by name: peft_type other
// than LORA, use_dora, fan_in_fan_out, a bias other than "none", modules_to_save, embedding
// adapters, adapter_model.bin, a module the model lacks, wrong ranks (against r / rank_pattern).
// Adaptable weights: the attention projections (attn_q, attn_k, attn_v, attn_qkv, attn_output)
// and the dense feed-forward ones (ffn_gate, ffn_up, ffn_down) of the transformer blocks
// (model/blocks.h). Adapters on other tensors (token embedding, output, experts) are refused
// by name.
// Errors (load): not an adapter file, another architecture, a lora_a without its lora_b (or
// the reverse), a tensor that adapts nothing the base model has, shapes that do not fit the
// base weight (named with both shapes), ranks that differ between A and B, a rank of 0, an
// alpha that is not finite.
// Thread-safety: immutable once loaded; share it (shared_ptr) between rows, requests and
// threads freely.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "specula/status.h"

namespace specula {

namespace gguf {
class GgufFile;
}
namespace kernels {
struct KernelTable;
}
class ThreadPool;
struct TransformerConfig;
struct Batch;
class Model;

// The projections an adapter may adapt, per layer.
enum class LoraTarget : int { kQ, kK, kV, kQKV, kO, kGate, kUp, kDown, kCount };

// One adapted projection: A [rank, n_in], B [n_out, rank] (views into the adapter file) and
// alpha / rank (1 when the file has no alpha).
struct LoraPair {
  TensorView a, b;
  int64_t rank = 0;
  float scale = 1.0f;
};

class LoraAdapter {
 public:
  // A PEFT folder (a directory, or its adapter_config.json / adapter_model.safetensors) or else
  // a GGUF LoRA file. Model::load_lora calls it.
  static Result<std::shared_ptr<const LoraAdapter>> load(const std::string& path, const TransformerConfig& base,
                                                         const kernels::KernelTable& kt, const Model* model);
  // Loads a GGUF LoRA for `model`, a transformer of config `base` (see above for the errors);
  // the views use the kernel table's weight types.
  static Result<std::shared_ptr<const LoraAdapter>> load_gguf(const std::string& path, const TransformerConfig& base,
                                                              const kernels::KernelTable& kt, const Model* model);
  // Loads a PEFT folder (see above) for `model`.
  static Result<std::shared_ptr<const LoraAdapter>> load_peft(const std::string& path, const TransformerConfig& base,
                                                              const kernels::KernelTable& kt, const Model* model);
  // The pair adapting layer il's projection t, or null.
  const LoraPair* find(int64_t il, LoraTarget t) const;
  const std::string& path() const { return path_; }
  // "gguf" or "peft".
  const std::string& format() const { return format_; }
  // Model::instance_id of the model it was loaded for (only that model may run it: the
  // shapes are its; Transformer::forward and Engine::submit check).
  uint64_t base_id() const { return base_id_; }
  // A number no other adapter loaded by this process has (from 1): for gauges and logs that
  // must tell adapters apart without holding them.
  uint64_t id() const { return id_; }
  // The file's alpha (adapter.lora.alpha; a PEFT folder's lora_alpha); 0 when absent.
  float alpha() const { return alpha_; }
  int64_t n_pairs() const { return n_pairs_; }
  int64_t max_rank() const { return max_rank_; }
  size_t bytes() const { return bytes_; }  // of A and B together

 private:
  // The pairs of an adapter file (read from disk, or assembled from a PEFT folder); errors
  // are prefixed `who`.
  static Result<std::shared_ptr<LoraAdapter>> from_file(std::shared_ptr<const gguf::GgufFile> file, const std::string& who,
                                                        const TransformerConfig& base, const kernels::KernelTable& kt,
                                                        const Model* model);
  std::shared_ptr<const gguf::GgufFile> file_;  // A and B point into its mapping
  std::string path_, format_;
  uint64_t base_id_ = 0, id_ = 0;
  float alpha_ = 0.0f;
  int64_t n_pairs_ = 0, max_rank_ = 0;
  size_t bytes_ = 0;
  std::vector<std::array<LoraPair, static_cast<size_t>(LoraTarget::kCount)>> layers_;
};

// An adapter with the user's scale (llama.cpp --lora-scaled PATH SCALE; 1 by default).
struct LoraWeight {
  std::shared_ptr<const LoraAdapter> adapter;
  float scale = 1.0f;
};
// The adapters of one row: their deltas add. Empty: the base model.
struct LoraSet {
  std::vector<LoraWeight> adapters;
  bool empty() const { return adapters.empty(); }
};

// Whether any row of `batch` runs with an adapter (a non-empty Batch::lora entry).
bool any_lora(const Batch& batch);

// Buffers of apply_lora (grow only; one per model instance, like its other step buffers).
struct LoraScratch {
  std::vector<float> x, mid, delta;      // gathered inputs [T, n_in], A x [T, rank], B (A x) [T, n_out]
  std::vector<uint8_t> xq, midq;         // the same as the kernels' activation types
  std::vector<int64_t> tokens;           // the group's token indices into x / y
  std::vector<float> scales;             // and each one's scale
};

// The LoRA deltas of one projection for a ragged batch: y[t] += s_t · B (A x[t]) for every
// token t of every row b (tokens [offset[b], offset[b + 1])) with adapters in rows[b], s_t =
// the adapter's user scale · the pair's scale. x [T, n_in], y [T, n_out] (row-major f32).
// Rows sharing an adapter pair are computed together (one read of A and B), every pair of
// the step in one dispatch on the pool (per pair: threads split A's rank rows, meet at a
// barrier, then split B's output rows), the adapters of a row in their order, so each
// token's result is what it gets alone (the kernels' dot products do not depend on the
// number of tokens): batch invariance holds across adapters. find(il, t) picks each
// adapter's pair.
void apply_lora(ThreadPool& pool, const kernels::KernelTable& kt, const LoraSet* const* rows, const int64_t* offset,
                int32_t n_rows, int64_t il, LoraTarget t, const float* x, int64_t n_in, float* y, int64_t n_out,
                LoraScratch& scratch);

}  // namespace specula
