// model/model.h — the model graph contract and the architecture registry.
//
// forward(ids [B, T], rows [B]) -> hidden [B*T, n_embd] (final-normed), appending the
// step's state (K/V, recurrent state) to each state row at positions length(row) ..
// length(row)+T-1. The model declares its layers (layer_specs(): attention with its window,
// or recurrent with its rule); it never builds a cache — new_state() makes a StateRows
// from the declaration and the user's CacheOptions (state/).
// A batch may also be ragged: row b appends n_tokens[b] >= 1 tokens (ids packed row after
// row, hidden [sum n_tokens, n_embd] in the same order) — one forward can then carry
// decode rows (1 token) and prefill chunks together. Each row's results are bitwise the
// same whatever else is in the batch (docs/ARCHITECTURE.md, Batch invariance).
// project_logits(hidden [n, n_embd]) -> logits [n, n_vocab] (f32, unnormalized).
// One file per architecture under model/arch/ registers itself by the GGUF
// `general.architecture` name; nothing else names a model family.
// Does not sample, schedule or own requests.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <vector>
#include <memory>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "kernels/kernels.h"
#include "state/state_rows.h"
#include "specula/status.h"

namespace specula {

struct ModelInfo {
  std::string architecture;  // general.architecture
  std::string name;          // general.name (may be empty)
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layers = 0;
  int64_t n_ctx_train = 0;
  // Weights repacked at load (pack_weights): whether repacking was on (ModelOptions::repack
  // and SPECULA_REPACK), count, bytes (extra memory) and seconds.
  bool repack = true;
  int64_t packed_tensors = 0;
  size_t packed_bytes = 0;
  double pack_seconds = 0;
  // Bytes of weights one decode step reads: each matmul weight once (its packed form
  // where packed), without the token-embedding rows looked up (0 if not recorded).
  size_t matmul_bytes = 0;
  // Load-time quantization (ModelOptions::quantize; model/quantize.h): the type ("" when
  // off), tensors quantized and seconds spent.
  std::string quantize_type;
  int64_t quantized_tensors = 0;
  double quantize_seconds = 0;
};

// One forward step: B rows, each appending T tokens (or n_tokens[b] when ragged).
struct LoraSet;  // model/lora.h
class LoraAdapter;

struct Batch {
  int32_t B = 0;
  int64_t T = 0;                  // tokens per row when n_tokens is null
  const int32_t* ids = nullptr;   // [B, T] token ids, or packed [sum n_tokens] when ragged
  const int32_t* rows = nullptr;  // [B] state row of each batch row (distinct)
  const int64_t* n_tokens = nullptr;  // optional [B]: tokens of each row (each >= 1)
  // optional [B]: the LoRA adapters each row runs with (model/lora.h; a null entry or an
  // empty set: the base model). A model that cannot apply adapters refuses a batch that has any.
  const LoraSet* const* lora = nullptr;
  // optional hidden taps (for draft heads that read the target's features, decoding/eagle3.h):
  // for each token m and each j < n_taps, the residual stream entering layer tap_layers[j]
  // goes to taps[m, j, :] — llama.cpp's "layer input" convention, Hugging Face's
  // hidden_states[L]: L = 0 is the (scaled) token embedding, L = n_layers the final state
  // before the output norm. `taps` is resized to [M, n_taps, n_embd] f32. A model that
  // cannot tap refuses a batch that asks (an error naming the architecture); a layer
  // outside [0, n_layers] is an error.
  const int32_t* tap_layers = nullptr;
  int32_t n_taps = 0;
  Tensor* taps = nullptr;

  int64_t tokens_of(int32_t b) const { return n_tokens != nullptr ? n_tokens[b] : T; }
};

// Where each token of a batch sits: filled by plan_batch for architecture forwards.
struct BatchLayout {
  int64_t M = 0;                  // total tokens
  std::vector<int64_t> offset;    // [B + 1] first packed index of each row
  std::vector<int32_t> token_row; // [M] batch row b of each token
  std::vector<int32_t> pos;       // [M] position of each token (state.length(row) + t)
};

class Model {
 public:
  Model();
  virtual ~Model() = default;
  // Unique in the process (never reused, unlike an address): what a LoRA adapter records as
  // the model it was loaded for.
  uint64_t instance_id() const { return instance_id_; }
  virtual const ModelInfo& info() const = 0;
  virtual const gguf::GgufFile& file() const = 0;
  // The pool the model computes on (for sharing with a draft model).
  virtual std::shared_ptr<ThreadPool> pool() const { return nullptr; }
  // One spec per layer: its kind and geometry (docs/ARCHITECTURE.md, Blocks).
  virtual std::vector<LayerSpec> layer_specs() const = 0;
  // Runs the step. Errors (nothing is written to the state on error): an id outside the
  // vocabulary, a row out of range or repeated, a row that would pass state.max_length().
  // hidden: resized to [B*T, n_embd].
  virtual Status forward(const Batch& batch, StateRows& state, Tensor& hidden) = 0;
  // logits [n, n_vocab] from hidden rows [n, n_embd].
  virtual void project_logits(const float* hidden, int64_t n, float* logits) = 0;
  // Whether forward() fills Batch::taps (hidden taps for draft heads); false: it refuses them.
  virtual bool gives_hidden_taps() const { return false; }
  // Loads a LoRA adapter for this model (model/lora.h: its file format and errors), for
  // Batch::lora. Errors also: the architecture takes no adapters.
  virtual Result<std::shared_ptr<const LoraAdapter>> load_lora(const std::string& path) const;

 private:
  uint64_t instance_id_;
};

struct ModelOptions {
  int n_threads = 0;  // 0 = all cores (ignored when pool is given)
  // Share a thread pool between models used one after the other from one thread (a
  // speculative target and its draft), so two pools never spin against each other.
  std::shared_ptr<ThreadPool> pool;
  // Repack the matmul weights whose type the kernel table has a packed gemm for (extra
  // memory: about the size of those weights; ModelInfo::packed_bytes). Also off when the
  // environment sets SPECULA_REPACK=0.
  bool repack = true;
  // Quantize float weights at load: "" (off), "q8_0" or "q4_k" (model/quantize.h).
  std::string quantize{};
};

// Weight matrices repacked at load for the kernel table's packed gemms (kernels.h);
// the buffers live as long as the model.
struct PackedWeights {
  std::vector<std::unique_ptr<uint8_t, AlignedFree>> buffers;
  size_t bytes = 0;    // total size of the packed copies
  int64_t tensors = 0;
  size_t matmul_bytes = 0;  // bytes one token's matmuls read: every matmul weight once, packed form if packed
  double seconds = 0;  // time spent packing
};

// Context handed to architecture factories.
struct ModelContext {
  std::shared_ptr<gguf::GgufFile> file;
  std::shared_ptr<ThreadPool> pool;
  const kernels::KernelTable* kernels = nullptr;
  bool repack = true;  // ModelOptions::repack
  std::shared_ptr<PackedWeights> packed = std::make_shared<PackedWeights>();
  std::string quantize_type;  // ModelOptions::quantize, as applied ("" when off)
  int64_t quantized_tensors = 0;
  double quantize_seconds = 0;
};

using ArchitectureFactory = std::function<Result<std::unique_ptr<Model>>(ModelContext)>;

// Registers a factory for a `general.architecture` name; returns true (for static init).
bool register_architecture(const std::string& name, ArchitectureFactory factory);

// The registered `general.architecture` names, sorted.
std::vector<std::string> registered_architectures();

// Opens a GGUF file, or a Hugging Face folder (a directory holding config.json, or one of its
// .safetensors files; formats/hf_folder.h), and builds the model its architecture names.
// Errors: file errors from the reader, "[model] unsupported architecture 'x' (supported: ...)",
// and the architecture's own errors (missing metadata key, tensor missing/shape/type).
Result<std::unique_ptr<Model>> load_model(const std::string& path, const ModelOptions& options = {});
// The file load_model reads: GgufFile::open, or hf::open_folder for a folder (or one of its
// .safetensors files) — e.g. to read the tokenizer without building the model.
Result<gguf::GgufFile> open_model_file(const std::string& path);

// An empty state group for `model` (no rows) with the user's cache options; rows hold at
// most max_length positions. Errors: a layer's layout error (unknown cache type, a codec
// that cannot store the layer's head_dim, ...), named with its layer.
Result<StateRows> new_state(const Model& model, const CacheOptions& options, int64_t max_length);

// --- helpers for architecture files -----------------------------------------------------
// Checks a batch against the state and vocabulary and lays it out. Errors (prefixed with
// `who`, e.g. "[gemma3]"): empty batch, a row count < 1, a state row out of range or
// repeated, a row that would pass max_length, an id outside [0, n_vocab).
Status plan_batch(const Batch& batch, const StateRows& state, int64_t n_vocab, const char* who,
                  BatchLayout& layout);
// Checks Batch's hidden taps: none asked, or a non-null output and each layer in [0, n_layers].
Status check_taps(const Batch& batch, int64_t n_layers, const char* who);
// Copies x [M, E] into taps[m, j, :] of taps [M, n_taps, E].
void copy_tap(const float* x, int64_t M, int64_t E, int32_t j, int32_t n_taps, float* taps);
// Runs fn(a, b) over row ranges [a, b) splitting [0, M) across the pool's threads; fewer
// than 4 rows run on the calling thread in one call. fn must compute each row the same way
// whatever its range (the split depends on M and the thread count).
void parallel_rows(ThreadPool& pool, int64_t M, const std::function<void(int64_t, int64_t)>& fn);
// Hyperparameters from GGUF metadata, checked at load so nonsense values fail there, naming
// the key and the value, instead of generating garbage. `who` prefixes errors ("[qwen2]").
// An integer key must hold an integer in [lo, hi]; a float key a finite number with
// lo < v <= hi (lo_open) or lo <= v <= hi. `fallback`: used when the key is absent (no
// fallback: absent is an error); a key that is present but invalid is always an error.
Result<int64_t> hparam_int(const gguf::GgufFile& f, const std::string& key, int64_t lo, int64_t hi, const char* who,
                           std::optional<int64_t> fallback = std::nullopt);
Result<double> hparam_float(const gguf::GgufFile& f, const std::string& key, double lo, double hi, const char* who,
                            std::optional<double> fallback = std::nullopt, bool lo_open = true);
// hparam_int into `var`, or returns its error from the enclosing function (which returns
// a Status or Result). Extra arguments: the fallback.
#define SPECULA_HPARAM_INT(var, file, key, lo, hi, who, ...)                               \
  do {                                                                                      \
    auto specula_r_ = ::specula::hparam_int(file, key, lo, hi, who __VA_OPT__(, ) __VA_ARGS__); \
    if (!specula_r_) return specula_r_.status();                                            \
    var = *specula_r_;                                                                      \
  } while (0)
// The hyperparameters every transformer architecture reads, `<arch>.` keys, range-checked:
// embedding_length, block_count, feed_forward_length, attention.head_count (1..4096),
// attention.head_count_kv (default head_count, as llama.cpp), context_length (1..2^26).
struct TransformerHparams {
  int64_t n_embd = 0, n_layers = 0, n_ff = 0, n_heads = 0, n_kv_heads = 0, n_ctx_train = 0;
};
Result<TransformerHparams> read_transformer_hparams(const gguf::GgufFile& f, const std::string& arch,
                                                    const char* who);
// Errors when the file holds a tensor of a block past the declared count ("blk.N." with
// N >= block_count): a block_count smaller than the layers present.
Status check_block_tensors(const gguf::GgufFile& f, int64_t block_count, const std::string& key, const char* who);
// A 2-D weight [N, K] (GGUF dims [K, N]) as a view. Errors name the tensor and the
// expected vs actual shape, or an unsupported type.
Result<TensorView> weight_2d(const gguf::GgufFile& f, const kernels::KernelTable& kt,
                             const std::string& name, int64_t K, int64_t N);
// The experts of a 3-D weight of GGUF shape [K, N, n] (fastest first: n matrices [N, K]
// stored one after the other, e.g. ffn_up_exps) as n views [N, K]. Errors as weight_2d's,
// plus a row K that is not whole blocks of the type.
Result<std::vector<TensorView>> expert_weights(const gguf::GgufFile& f, const kernels::KernelTable& kt,
                                               const std::string& name, int64_t K, int64_t N, int64_t n);
// Loads a block's weights in one call: 1-D ones as f32 (norms, biases), 2-D ones as
// views [N, K]. Names are full tensor names. Errors: the first failing tensor's error.
struct Weight1d {
  std::vector<float>* dst;
  std::string name;
  int64_t n;
};
struct Weight2d {
  TensorView* dst;
  std::string name;
  int64_t K, N;
};
Status load_weights(const gguf::GgufFile& f, const kernels::KernelTable& kt, std::initializer_list<Weight1d> vectors,
                    std::initializer_list<Weight2d> matrices);
// The output projection [n_vocab, n_embd]: output.weight, or the token embedding when the
// file ties them (no output.weight).
Result<TensorView> output_weight(const gguf::GgufFile& f, const kernels::KernelTable& kt, int64_t n_embd,
                                 int64_t n_vocab, const TensorView& tok_embd);
// Repacks each matrix (a view used only as a matmul weight; the same view may appear twice)
// whose type ctx.kernels has a packed gemm for, on ctx.pool's threads, and sets its
// `packed`; records the totals in ctx.packed (copy them to ModelInfo with
// note_packed, with the load-time quantization's). Packs nothing when ctx.repack is false
// (the byte count is still kept).
void pack_weights(ModelContext& ctx, const std::vector<TensorView*>& matrices);
void note_packed(const ModelContext& ctx, ModelInfo& info);
// pack_weights over the output projection and the listed matrices of every layer (unset
// ones skipped), then note_packed into info: what an architecture's loader calls last.
template <class Layer>
void pack_model_weights(ModelContext& ctx, ModelInfo& info, TensorView& output, std::vector<Layer>& layers,
                        std::initializer_list<TensorView Layer::*> members) {
  std::vector<TensorView*> all{&output};
  for (Layer& L : layers)
    for (TensorView Layer::*mp : members)
      if ((L.*mp).data != nullptr) all.push_back(&(L.*mp));
  pack_weights(ctx, all);
  note_packed(ctx, info);
}
// A 1-D tensor of n elements converted to f32 (norm weights).
Result<std::vector<float>> weight_1d_f32(const gguf::GgufFile& f, const kernels::KernelTable& kt,
                                         const std::string& name, int64_t n);
// The per-channel key scale (AttentionSpec::key_scale) for keys that went through a
// QK-norm with gain w [head_dim]: |w|, as the RMS over each NEOX RoPE pair (i, i + n_rot/2)
// for the first n_rot dims (RoPE mixes a pair's two channels), repeated per kv head.
// [n_kv_heads * head_dim]; non-positive or non-finite entries become 1.
std::shared_ptr<const std::vector<float>> key_scale_from_norm(const std::vector<float>& w, int64_t n_kv_heads,
                                                              int64_t n_rot);
// A shape for error messages: "[64, 128]" (GGUF order as given).
std::string shape_str(const std::vector<int64_t>& s);
// A tensor of GGUF shape `dims` (fastest first, e.g. {K, N}) converted to f32, row-major
// with the last dim outermost (e.g. a conv kernel [channels][taps]). Errors: missing
// tensor, other shape, unsupported type.
Result<std::vector<float>> weight_f32(const gguf::GgufFile& f, const kernels::KernelTable& kt, const std::string& name,
                                      const std::vector<int64_t>& dims);

}  // namespace specula
