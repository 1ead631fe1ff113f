// model/blocks.h — the shared pieces of decoder-only transformers: a metadata reader, a
// per-layer configuration, one weight list per block, and one forward built from blocks
// (norm, attention, dense or MoE FFN, RoPE) over buffers the model owns.
//
// An architecture file reads its TransformerConfig from GGUF metadata (standard_config
// does what most need) and registers it with register_transformer; the Transformer model
// here loads the weights the config implies (layer_weights: the one list that drives
// loading, validation and the tests), checks them, and runs forward. What a layer computes:
//
//   h  = x;  x = norm(x, attn_norm)
//   q, k, v = x·Wq, x·Wk, x·Wv          (or one fused attn_qkv; + biases when present)
//   q, k = RMSNorm per head (QK-norm)    (when the layer has it)
//   v  = RMSNorm per head without weight (Gemma 4; V may be the K projection)
//   q, k = RoPE (NORM or NEOX pairs, base, linear scale, frequency factors, LongRoPE,
//        attn_factor on cos/sin), or none (NoPE); shared-KV layers take an earlier
//        layer's step K/V instead of projecting their own
//   a  = attention(q · scale, k, v)       (causal, optional sliding window, optional
//                                          score soft-capping c·tanh(s/c))
//   o  = a·Wo (+ bias);  o = norm(o, post_attention_norm) (sandwich layers);  x = h + o
//   h  = x;  x = norm(x, ffn_norm)
//   f  = down(act(gate(x)) * up(x))       (dense: SiLU or GELU-tanh; or fused gate|up)
//      | sum_k w_k down_e(act(gate_e(x)) * up_e(x)) over the top-k experts e of
//        softmax(x·W_router) (weights renormalised over the k when the config says so)
//   f  = norm(f, post_ffw_norm) (sandwich); x = h + f
//   x += norm(proj · (gelu(inp_gate · x) * per_layer_input), post_norm)   (Gemma 4)
//   x *= layer_output_scale                                               (when present)
//
// then a final RMSNorm (hidden), and project_logits = hidden·W_out (+ bias), optionally
// soft-capped. Norms are RMSNorm (Zhang & Sennrich 2019); GGUF norm weights already hold
// any +1 (Gemma). RoPE: Su et al. 2021; llama3 frequency factors: Meta's Llama 3.1
// rope_scaling (llama.cpp stores them as rope_freqs.weight); MoE routing: Shazeer et al.
// 2017 as in Qwen3-MoE (softmax, top-k, renormalised). Tensor names and metadata keys are
// llama.cpp's (src/llama-arch.cpp).
// Does not do: LayerNorm with bias, parallel attention+FFN blocks, MLA, shared experts,
// YaRN scaling (rejected by name at load), recurrent layers (qwen35.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/attention.h"
#include "model/lora.h"
#include "model/model.h"
#include "ops/ops.h"

namespace specula {

// Reads `<arch>.` metadata keys with range checks; the first error is kept (and later reads
// return their fallback or 0) so a config reader checks status() once. Errors name the key:
// "[llama] missing metadata key 'llama.block_count' (an integer in [1, 4096])".
class Hparams {
 public:
  Hparams(const gguf::GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)), who_("[" + arch_ + "]") {}
  // `key` is relative to the architecture ("block_count"); a leading '.' makes it absolute.
  int64_t i(const std::string& key, int64_t lo, int64_t hi, std::optional<int64_t> fallback = std::nullopt);
  double f(const std::string& key, double lo, double hi, std::optional<double> fallback = std::nullopt,
           bool lo_open = true);
  bool has(const std::string& key) const { return f_.find(full(key)) != nullptr; }
  // A per-layer value given as one integer or as an array of n (llama.cpp's get_key_or_arr).
  std::vector<int64_t> per_layer(const std::string& key, int64_t n, int64_t lo, int64_t hi,
                                 std::optional<int64_t> fallback = std::nullopt);
  std::optional<std::string> str(const std::string& key) const;
  // An integer or bool array; nullopt when absent or not an array (an error when an array
  // of another element type).
  std::optional<std::vector<int32_t>> ints(const std::string& key);
  // Records an error unless one is already kept.
  void fail(const std::string& message);
  const Status& status() const { return status_; }
  const gguf::GgufFile& file() const { return f_; }
  const std::string& arch() const { return arch_; }
  const char* who() const { return who_.c_str(); }
  std::string full(const std::string& key) const { return key.rfind('.', 0) == 0 ? key.substr(1) : arch_ + "." + key; }

 private:
  const gguf::GgufFile& f_;
  std::string arch_, who_;
  Status status_ = Status::ok();
};

enum class RopeType { kNorm, kNeox };  // pairs (2i, 2i+1) vs (i, i + n_rot/2)
enum class Activation { kSilu, kGeluTanh };

// One rotary table: theta_i(pos) = pos * freq_scale * base^(-2i/n_rot) / freq_factors[i].
struct RopeConfig {
  RopeType type = RopeType::kNeox;
  float base = 10000.0f;
  float freq_scale = 1.0f;          // linear position interpolation (1 / rope.scaling.factor)
  int64_t n_rot = 0;                // rotated dims of each head (even, <= head_dim)
  std::vector<float> freq_factors;  // [n_rot/2] divisors of theta_i (llama3's rope_freqs), or empty
  // LongRoPE (Phi-3 128k; Ding et al. 2024): freq_factors are the short factors, these the
  // long ones, used when a state row can hold more than long_context positions.
  std::vector<float> freq_factors_long;  // [n_rot/2] or empty
  int64_t long_context = 0;
  float mscale = 1.0f;  // cos and sin are multiplied by it (rope.scaling.attn_factor)
  std::vector<std::string> tensors;  // the global tensors the factors were read from
};

struct LayerConfig {
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;  // K and V heads have head_dim each
  int64_t window = 0;          // sliding window in tokens (a query at p sees (p - window, p]); 0 = full
  int rope = 0;                // index into TransformerConfig::ropes; -1 = no RoPE (NoPE layer)
  float attn_scale = 0.0f;     // multiplies q before q·k; 0 = 1/sqrt(head_dim)
  float attn_softcap = 0.0f;   // scores become c·tanh(s/c); 0 = off
  bool qk_norm = false;        // attn_q_norm / attn_k_norm [head_dim], per-head RMSNorm
  bool qkv_bias = false;       // attn_q.bias / attn_k.bias / attn_v.bias
  bool o_bias = false;         // attn_output.bias
  bool fused_qkv = false;      // attn_qkv [n_embd, (n_heads + 2 n_kv_heads) head_dim]: q | k | v
  bool sandwich = false;       // post_attention_norm and post_ffw_norm after each sub-block
  Activation act = Activation::kSilu;
  int64_t n_ff = 0;            // dense FFN width (or one expert's, n_expert > 0)
  bool fused_gate_up = false;  // ffn_up [n_embd, 2 n_ff] holds gate | up (no ffn_gate)
  int64_t n_expert = 0;        // > 0: MoE FFN (ffn_gate_inp router, *_exps experts)
  int64_t n_expert_used = 0;   // top-k
  bool norm_topk = true;       // renormalise the k routing weights to sum 1
  float expert_scale = 0.0f;   // multiplies the routing weights (0 or 1 = none)
  bool v_norm = false;         // V gets a per-head RMSNorm without weight (Gemma 4)
  bool v_from_k = false;       // no attn_v: V is the K projection, before K's norm (Gemma 4)
  // >= 0: the layer has no K/V projections and attends over the K/V that layer kv_source
  // (earlier, same geometry) computed in this step (Gemma 4's shared KV). They are stored
  // again in this layer's own cache rows (the same values; memory as an unshared layer).
  int kv_source = -1;
  bool out_scale = false;      // layer_output_scale [1]: x *= s at the end of the layer
};

struct TransformerConfig {
  std::string arch;            // general.architecture (errors are prefixed "[arch]")
  int64_t n_vocab = 0, n_embd = 0, n_ctx_train = 0;
  float eps = 1e-6f;           // RMSNorm epsilon
  float embd_scale = 1.0f;     // token embeddings are multiplied by it (Gemma: sqrt(n_embd))
  float final_softcap = 0.0f;  // logits become c·tanh(l/c); 0 = off
  bool tied_output = false;    // the output projection is always the token embedding (output.weight refused)
  // Gemma 4 per-layer inputs (P > 0): per_layer_token_embd [n_layers*P, n_vocab] rows
  // (times sqrt(P)) plus RMSNorm(per_layer_model_proj · x0 / sqrt(n_embd)) per layer slice,
  // over sqrt(2), give each layer a [P] input; after its FFN the layer adds
  // RMSNorm(proj · (gelu_tanh(inp_gate · x) * input), post_norm).
  int64_t n_embd_per_layer = 0;
  std::vector<RopeConfig> ropes;
  std::vector<LayerConfig> layers;
};

// The hyperparameters every decoder reads, from `<arch>.` keys, into a config whose layers
// are all alike: embedding_length, block_count, feed_forward_length, attention.head_count,
// attention.head_count_kv (default head_count), context_length, attention.key_length and
// value_length (default n_embd / head_count; must be equal), attention.layer_norm_rms_epsilon,
// rope.freq_base (default 10000), rope.dimension_count (default head_dim), rope.scaling.type
// none | linear | longrope (yarn refused), rope.scaling.factor (or rope.scale_linear) and
// rope.scaling.attn_factor whenever present; head counts and widths may be per-layer arrays
// (exactly block_count long); n_vocab from token_embd.weight. One NEOX rope table; SiLU dense
// FFN; no sliding window. Also checks no tensor belongs to a block past block_count. Errors
// name the key or tensor.
Result<TransformerConfig> standard_config(const gguf::GgufFile& f, const std::string& arch);
// Hparams-level variant: reads into `h` (errors kept there).
TransformerConfig standard_config(Hparams& h);

// rope_freqs.weight [n_rot/2] as the frequency factors of rope `r` when the file holds it.
Status read_freq_factors(const gguf::GgufFile& f, RopeConfig& r);

// Whether the file holds tensor "blk.<il>.<suffix>".
bool has_layer_tensor(const gguf::GgufFile& f, int64_t il, const std::string& suffix);
// As llama.cpp's loader for most architectures: attention Q/K/V either fused (attn_qkv) or
// separate, with optional biases (attn_qkv.bias or attn_q/k/v.bias) and an optional
// attn_output.bias — sets fused_qkv, qkv_bias and o_bias of each layer from the file.
void probe_attention_tensors(const gguf::GgufFile& f, TransformerConfig& c);
// MoE keys: expert_count (absent = dense unless required), expert_used_count, and with
// expert_width_key expert_feed_forward_length (default: the dense width / experts used;
// without it each expert has the dense width, as Mixtral); sets every layer's FFN to experts.
void read_moe(Hparams& h, TransformerConfig& c, bool required, bool expert_width_key);

// Which layers use the sliding window, as llama.cpp's load_swa_pattern: the per-layer bool
// array attention.sliding_window_pattern (true = sliding window), or its integer form n
// (default `default_period`): layer il slides when il % n < n - 1 (every n-th layer is
// global; n = 1: none slides, n = 0: all do). [n_layers]
std::vector<bool> sliding_layers(Hparams& h, int64_t n_layers, int64_t default_period);

// LongRoPE as llama.cpp: global rope_factors_short.weight / rope_factors_long.weight
// [n_rot/2] (both, or neither), rope.scaling.original_context_length (default
// context_length) and rope.scaling.attn_factor (default 1) into rope `r`.
void read_longrope(Hparams& h, RopeConfig& r, int64_t n_ctx_train);

// A config reader per architecture; register_transformer makes load_model build a
// Transformer from it for files whose general.architecture is `name`.
using ConfigReader = std::function<Result<TransformerConfig>(const gguf::GgufFile&)>;
bool register_transformer(const std::string& name, ConfigReader reader);

// --- weights ----------------------------------------------------------------------------
struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm, post_attn_norm, post_ffn_norm;  // [n_embd]
  std::vector<float> q_norm, k_norm;                                       // [head_dim]
  std::vector<float> bq, bk, bv, bo;  // [n_heads*head_dim], [n_kv_heads*head_dim] x2, [n_embd]
  // wq [n_heads*hd, n_embd]; wk, wv [n_kv_heads*hd, n_embd]; wqkv [(n_heads+2 n_kv)*hd, n_embd];
  // wo [n_embd, n_heads*hd]; w_gate, w_up [n_ff, n_embd] (w_up [2 n_ff, n_embd] when fused);
  // w_down [n_embd, n_ff]; router [n_expert, n_embd].
  TensorView wq, wk, wv, wqkv, wo, w_gate, w_up, w_down, router;
  // Experts: [n_expert] views into the 3-D *_exps tensors, each [n_ff, n_embd] / [n_embd, n_ff].
  std::vector<TensorView> e_gate, e_up, e_down;
  std::vector<float> out_scale;  // [1]
  std::vector<float> ones;       // [head_dim] 1s: the weight of an unweighted norm
  // Per-layer inputs: ple_gate [P, n_embd], ple_proj [n_embd, P], ple_norm [n_embd].
  TensorView ple_gate, ple_proj;
  std::vector<float> ple_norm;
  // For quantizing caches (AttentionSpec): key/value offsets from the biases, key scale from k_norm.
  std::shared_ptr<const std::vector<float>> k_offset, v_offset, k_scale;
};

// One tensor a layer (or the model) reads: its GGUF name and shape (fastest dim first) and
// where it goes (exactly one target set).
struct WeightRef {
  std::string name;
  std::vector<int64_t> dims;
  std::vector<float>* vec = nullptr;       // 1-D, converted to f32
  TensorView* mat = nullptr;               // 2-D matmul weight [dims[1], dims[0]]
  std::vector<TensorView>* experts = nullptr;  // 3-D [dims[2]] x [dims[1], dims[0]]
};
// The tensors of layer `il` under config `c` (targets in L; L may be a dummy for names only).
std::vector<WeightRef> layer_weights(const TransformerConfig& c, int64_t il, LayerWeights& L);

// --- the model ----------------------------------------------------------------------------
class Transformer final : public Model {
 public:
  // Loads the weights `config` implies from ctx.file. Errors: a missing or misshapen
  // tensor (named), an unsupported type, inconsistent config values.
  static Result<std::unique_ptr<Model>> create(ModelContext ctx, TransformerConfig config);

  const ModelInfo& info() const override { return info_; }
  const gguf::GgufFile& file() const override { return *ctx_.file; }
  std::shared_ptr<ThreadPool> pool() const override { return ctx_.pool; }
  std::vector<LayerSpec> layer_specs() const override;
  Status forward(const Batch& batch, StateRows& state, Tensor& hidden) override;
  void project_logits(const float* hidden, int64_t n, float* logits) override;
  bool gives_hidden_taps() const override { return true; }
  Result<std::shared_ptr<const LoraAdapter>> load_lora(const std::string& path) const override;
  const TransformerConfig& config() const { return c_; }

 private:
  void ensure_buffers(int64_t M);
  void rows(int64_t M, const std::function<void(int64_t, int64_t)>& fn);
  void attention_block(int64_t il, const Batch& batch, StateRows& state);
  // Copies the residual stream x_ (the input of layer il; il == n_layers: the final
  // pre-norm state) into the batch's taps that ask for il.
  void tap(const Batch& batch, int64_t il, int64_t M);
  void ffn_dense(int64_t il, const LayerConfig& lc, const LayerWeights& L, int64_t M);
  void ffn_moe(const LayerConfig& lc, const LayerWeights& L, int64_t M);
  void per_layer_inputs(const Batch& batch, int64_t M);
  void per_layer_step(int64_t il, int64_t M);
  // y [M, n_out] += each row's LoRA deltas (Batch::lora) for layer il's projection t of x [M, n_in].
  void add_lora(int64_t il, LoraTarget t, const float* x, int64_t n_in, float* y, int64_t n_out);

  ModelContext ctx_;
  ModelInfo info_;
  TransformerConfig c_;
  std::string who_;  // "[arch]", the error prefix
  const kernels::KernelTable* kt_ = nullptr;
  TensorView tok_embd_, output_;    // [n_vocab, n_embd]
  // Per-layer inputs (n_embd_per_layer P > 0): ple_embd_ [n_vocab, L*P], ple_model_proj_
  // [L*P, n_embd], ple_proj_norm_ [P].
  TensorView ple_embd_, ple_model_proj_;
  std::vector<float> ple_proj_norm_;
  std::vector<bool> kv_kept_;  // [n_layers] a later layer reads this layer's step K/V
  std::vector<float> output_norm_;  // [n_embd]
  std::vector<float> output_bias_;  // [n_vocab] or empty
  std::vector<LayerWeights> layers_;
  ops::Workspace ws_;
  BatchLayout layout_;
  const LoraSet* const* lora_ = nullptr;  // the forward's Batch::lora (null: no row has adapters)
  LoraScratch lora_scratch_;
  AttentionScratch attn_scratch_;
  // Step buffers (grow only; widths are the largest over layers): x/xn/o [M, n_embd];
  // q/attn [M, n_heads*hd]; k/v [M, n_kv*hd]; qkv [M, (n_heads+2 n_kv)*hd] (fused only);
  // gate/up [M, n_ff] (gate [M, 2 n_ff] when fused); per rope table cos/sin [M, n_rot/2].
  int64_t cap_m_ = 0;
  std::vector<float> x_, xn_, o_, q_, k_, v_, qkv_, attn_, gate_, up_;
  std::vector<std::vector<float>> cos_, sin_;
  // Kept step K/V of the layers others share [n_layers] x [M, n_kv*hd] (empty if not kept);
  // per-layer inputs ple_ [M, L, P], pg_ [M, P].
  std::vector<std::vector<float>> k_kept_, v_kept_;
  std::vector<float> ple_, pt_, pg_;
  // MoE (grow only): router probabilities [M, n_expert]; chosen experts and weights
  // [M, k]; per expert its tokens' (token, rank) pairs; gathered rows xg [n, n_embd],
  // eg/eu [n, n_ff]; expert outputs y [M*k, n_embd].
  std::vector<float> probs_, topw_, xg_, eg_, eu_, ey_, eo_;
  std::vector<int32_t> topi_;
  std::vector<std::vector<int64_t>> routed_;
};

}  // namespace specula
