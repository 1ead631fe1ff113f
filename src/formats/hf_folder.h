// formats/hf_folder.h — a Hugging Face model folder (config.json, *.safetensors, tokenizer.json,
// tokenizer_config.json, generation_config.json) presented as the GGUF file that llama.cpp's
// converter (convert_hf_to_gguf.py) would have written from it, so that every architecture
// loads a folder through the code path it loads GGUF with, and gives the same logits.
//
// What the conversion does (facts from transformers' modeling files and the converter):
//   - config.json -> `<arch>.*` metadata keys, by the mapping each architecture file
//     registers next to its GGUF reader (register_hf_architecture below, keyed by
//     config.json's "architectures"[0]); a wrapped "text_config" is read where the top level
//     lacks a key (Gemma 3 multimodal configs);
//   - tensor names: model.embed_tokens -> token_embd, model.layers.N.self_attn.q_proj ->
//     blk.N.attn_q, ... (each architecture's table), lm_head -> output; a tensor no rule
//     names is an error naming it;
//   - shapes reversed (safetensors is row-major, GGUF lists the contiguous dimension first);
//   - transforms where the two layouts differ: Q/K rows of Llama-family models permuted
//     from HF's half-split RoPE order to the interleaved order GGUF stores (the converter's
//     LlamaModel.permute), Gemma RMSNorm gains stored as w where GGUF stores 1 + w, per-expert
//     MoE matrices stacked into one [n_expert, N, K] tensor, Llama 3.1 rope_scaling turned
//     into the rope_freqs.weight factors; Qwen3.5's A_log -> -exp(A_log), conv1d squeezed and
//     value heads reordered from grouped to tiled (Target::reorder);
//   - F32, F16 and BF16 tensors stay in the mapping (zero copy) unless a transform applies
//     or the data is not aligned to its element size (then copied, aligned to 64);
//   - MLX affine quantization (mlx-lm: config.json "quantization" (or "quantization_config")
//     {"group_size", "bits", per-module overrides {...} or false}; X.weight U32 codes packed
//     first-element-lowest as a little-endian bit stream per row, X.scales / X.biases
//     [N, K / group_size]; w = scale * q + bias): 4-bit codes in groups of 32 or 64 (or 128)
//     become Q4_1 blocks exactly (d = scale, m = bias as f16: exact for bf16/f16 scales within
//     f16's range), 8-bit ones Q8_A blocks (specula's affine 8-bit type: d = scale,
//     m = bias + 128 * scale in f32, q - 128 as int8), every other width (2, 3, 5, 6) exact F32
//     rows (scale * q is exact in f32); other quantization schemes (quant_method AWQ, GPTQ,
//     ...) are refused by name;
//   - tokenizer.json -> `tokenizer.huggingface.json` (the GGUF spec's key for the whole
//     file), tokenizer_config.json's chat_template (string, or the "default" of a named
//     list; or chat_template.jinja) -> `tokenizer.chat_template`, its add_bos_token /
//     add_eos_token -> `tokenizer.ggml.add_bos_token` / `add_eos_token`;
//   - generation_config.json: eos_token_id (one id or a list) ->
//     `specula.generation.eos_token_ids` (end-of-generation ids), temperature / top_p /
//     top_k -> `general.sampling.temp` / `top_p` / `top_k` (do_sample false -> temp 0).
// Errors name the file and the field or tensor: "[hf] /m/config.json: 'num_attention_heads'
// must be an integer in [1, 4096], got \"8\"". Architectures without a mapping are refused
// naming the supported ones.
// Does not read PyTorch .bin checkpoints or MLX-quantized MoE experts (switch_mlp), has no fast
// kernels for MLX 2/3/5/6-bit codes (exact f32 rows; --quantize q8_0 or q4_k requantizes them),
// and does not tokenize (tokenizer/hf_tokenizer.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "specula/status.h"

namespace specula::hf {

// config.json, read with checks. Getters record the first error (status()) and return the
// fallback (or 0) after one; `key` is looked up at the top level, then under "text_config".
// A key whose value is JSON null counts as absent.
class Config {
 public:
  static Result<Config> parse(const std::string& text, std::string path);

  const nlohmann::json* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  // Whether `key` is present with the value null (at the top level or in text_config).
  bool explicit_null(const std::string& key) const;
  int64_t i(const std::string& key, int64_t lo, int64_t hi, std::optional<int64_t> fallback = std::nullopt);
  double f(const std::string& key, double lo, double hi, std::optional<double> fallback = std::nullopt);
  bool b(const std::string& key, std::optional<bool> fallback = std::nullopt);
  std::string s(const std::string& key, std::optional<std::string> fallback = std::nullopt);
  // An array of integers (booleans as 0/1); nullopt when absent.
  std::optional<std::vector<int64_t>> ints(const std::string& key);
  // An array of strings; nullopt when absent.
  std::optional<std::vector<std::string>> strings(const std::string& key);
  // An array of numbers; nullopt when absent.
  std::optional<std::vector<double>> floats(const std::string& key);
  // An object (e.g. "rope_scaling"); null when absent.
  const nlohmann::json* object(const std::string& key);
  // The rope parameters: "rope_scaling" or transformers 5's "rope_parameters" (null when
  // neither, or when they only repeat rope_theta / rope_type "default").
  const nlohmann::json* rope_scaling();
  // The list of numbers `field` of rope_scaling (e.g. LongRoPE's "long_factor"); nullopt and
  // an error when absent or not a list of numbers.
  std::optional<std::vector<double>> rope_list(const std::string& field);

  void fail(const std::string& message);
  // "'key' must be ..., got <value>" with the file named.
  void bad(const std::string& key, const std::string& what, const nlohmann::json& got);
  const Status& status() const { return status_; }
  const std::string& path() const { return path_; }

  Config(Config&&) noexcept;
  Config& operator=(Config&&) noexcept;
  ~Config();

 private:
  Config();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_;
  Status status_ = Status::ok();
};

// Where one safetensors tensor goes.
enum class Transform : uint8_t {
  kNone,
  kPermuteQ,  // rows [n_heads, 2, head_dim/2] -> [n_heads, head_dim/2, 2] (also 1-D biases)
  kPermuteK,  // the same over n_kv_heads
  kAddOne,    // f32(w) + 1 (Gemma RMSNorm gains)
  kNegExp,    // -exp(w) as F32, computed in double and rounded once (Qwen3-Next / Qwen3.5 A_log ->
              // ssm_a; the converter's -torch.exp in f32 may differ from that by an ulp)
  kSqueeze,   // the data as stored, dimensions of size 1 dropped (Qwen3.5 conv1d [C, 1, K] -> [C, K])
  kOffsetIds, // a 1-D I64/I32 tensor of id offsets -> I64 absolute ids, out[i] = i + v[i] (an
              // EAGLE-3 head's d2t; the converter writes it so); the only integer tensors read
};
// Heads reordered along the first dimension (or, `columns`, the last of a 2-D tensor): the
// span [offset, offset + groups * per_group * unit), which must end where the dimension does,
// viewed as [groups, per_group, unit] becomes [per_group, groups, unit] (the converter's
// _reorder_v_heads: Qwen3.5's value heads grouped by key head -> tiled). groups 0: none.
// Applied before `transform`; not to MLX-quantized or expert tensors.
struct HeadReorder {
  int64_t groups = 0, per_group = 0, unit = 0, offset = 0;
  bool columns = false;
};
struct Target {
  std::string name;  // GGUF tensor name; empty: drop the tensor (buffers such as rotary inv_freq)
  Transform transform = Transform::kNone;
  int64_t expert = -1;   // >= 0: expert `expert` of `n_experts`, stacked into `name`
  int64_t n_experts = 0;
  HeadReorder reorder = {};
};

// What an architecture's mapping writes: metadata keys, the tensor rule, extra tensors.
class Conversion {
 public:
  explicit Conversion(std::string arch) : arch_(std::move(arch)) {}
  const std::string& arch() const { return arch_; }
  // `key` relative to the architecture ("block_count" -> "llama.block_count"); a leading
  // '.' makes it absolute.
  void u32(const std::string& key, int64_t v);
  void f32(const std::string& key, double v);
  void str(const std::string& key, const std::string& v);
  void boolean(const std::string& key, bool v);
  void bools(const std::string& key, const std::vector<bool>& v);
  void i32s(const std::string& key, const std::vector<int64_t>& v);
  // An F32 tensor made by the mapping (e.g. rope_freqs.weight), GGUF shape {n}.
  void add_f32_tensor(const std::string& name, std::vector<float> data);
  // The rule for tensor names: nullopt = no rule (an error naming the tensor).
  std::function<std::optional<Target>(const std::string&)> map;
  int64_t n_heads = 0, n_kv_heads = 0;  // for the Q/K permutation

  // Used by the folder reader.
  std::map<std::string, gguf::Value>& kv() { return kv_; }
  std::vector<std::string>& keys() { return keys_; }
  std::vector<std::pair<std::string, std::vector<float>>>& extra() { return extra_; }

 private:
  void put(const std::string& key, gguf::Value v);
  std::string arch_;
  std::map<std::string, gguf::Value> kv_;
  std::vector<std::string> keys_;
  std::vector<std::pair<std::string, std::vector<float>>> extra_;
};

// One config.json "architectures" name: the GGUF architecture it becomes and the mapping.
struct Architecture {
  std::string gguf_arch;
  std::function<void(Config&, Conversion&)> convert;  // errors: Config::fail / bad
  // tie_word_embeddings when config.json omits it (the config class's default). Tied: the
  // output projection is the token embedding (an lm_head.weight in the file is dropped, as
  // transformers ties it); untied: lm_head.weight is required.
  bool tie_default = false;
  // Whether the converter permutes Q/K rows (Llama-style RoPE; Transform::kPermuteQ / K):
  // a LoRA adapter's B of q_proj / k_proj is permuted the same way (model/lora.cpp).
  bool permute_qk = false;
};
// Registers `hf_name` (e.g. "Qwen2ForCausalLM"); returns true (for static init).
bool register_hf_architecture(const std::string& hf_name, Architecture a);
// The registered names, sorted.
std::vector<std::string> hf_architectures();
// Whether the folders of GGUF architecture `gguf_arch` have their Q/K rows permuted
// (Architecture::permute_qk of the names registered for it; false for an unknown one).
bool permutes_qk(const std::string& gguf_arch);
// Copies `t` (row-major [rows, cols], F32/F16/BF16 or any fixed-size element) into `dst`
// (t.n_bytes) with the rows of each of `n_heads` heads moved from HF's half-split RoPE order
// [2, head_dim/2] to GGUF's interleaved [head_dim/2, 2] (llama.cpp's LlamaModel.permute).
// Errors (prefixed `who`): rows not a multiple of 2 * n_heads.
Status permute_qk_rows(const safetensors::TensorInfo& t, int64_t n_heads, uint8_t* dst, const std::string& who);

// --- helpers for architecture mappings -----------------------------------------------------
// The keys every transformer reads: context_length (max_position_embeddings),
// embedding_length (hidden_size), block_count (num_hidden_layers), feed_forward_length
// (intermediate_size), attention.head_count / head_count_kv (num_attention_heads /
// num_key_value_heads), attention.key_length / value_length (head_dim when given),
// attention.layer_norm_rms_epsilon (rms_norm_eps), rope.freq_base (rope_theta),
// rope.dimension_count (head_dim * partial_rotary_factor when given), and rope_scaling:
// "linear" -> rope.scaling.type/factor; "llama3" -> rope_freqs.weight; "default" or none ->
// nothing; any other type an error naming it. Sets c.n_heads / n_kv_heads.
void standard_config(Config& cfg, Conversion& c);
// The tensor rule of the Llama family: model.embed_tokens, model.norm, lm_head, and per
// layer input_layernorm, self_attn.{q,k,v,o}_proj (weight/bias), self_attn.{q,k}_norm,
// post_attention_layernorm (-> ffn_norm), mlp.{gate,up,down}_proj, and with n_experts > 0
// mlp.gate (router) and mlp.experts.E.{gate,up,down}_proj (Qwen MoE) or
// block_sparse_moe.gate / experts.E.w1/w3/w2 (Mixtral). permute_qk: Llama-style RoPE.
std::function<std::optional<Target>(const std::string&)> llama_tensor_rule(bool permute_qk, int64_t n_experts);
// "model.layers.N.rest" -> (N, "rest"); nullopt for other names or a malformed N (not 1-5 digits).
std::optional<std::pair<int64_t, std::string>> split_layer_name(const std::string& name);
// Gemma 2 / 3: the Llama names plus post_attention_layernorm -> post_attention_norm,
// pre_feedforward_layernorm -> ffn_norm, post_feedforward_layernorm -> post_ffw_norm, and
// every RMSNorm gain (those, input_layernorm, q/k_norm, model.norm) stored + 1.
std::function<std::optional<Target>(const std::string&)> gemma_tensor_rule();
// Gemma 2 / 3 attention keys: head_dim (default 256) -> key/value length, sliding_window
// (default 4096), and query_pre_attn_scalar checked against the scale the GGUF graph uses
// (1/sqrt(head_dim), or 1/sqrt(hidden_size / num_attention_heads) for the 27B, told apart by its
// layer count `layers_27b`). Returns head_dim.
int64_t gemma_attention(Config& cfg, Conversion& c, int64_t layers_27b);
// Checks an array-valued layer option against the pattern the GGUF architecture assumes:
// `expected[il]` for every layer, else an error naming the key.
void expect_layers(Config& cfg, const std::string& key, const std::vector<int64_t>& expected);

// Opens a folder (or a .safetensors file's folder) as a GGUF file. Errors: no config.json,
// unsupported architecture, a mapping error, safetensors errors (formats/safetensors.h), a
// tensor without a rule, of an unsupported dtype, or inconsistent experts.
Result<gguf::GgufFile> open_folder(const std::string& dir);

// A small text file (a config or template) whole. Errors ("[hf] PATH: ..."): it cannot be
// read, or it is larger than `limit` bytes.
Result<std::string> read_text(const std::string& path, size_t limit);

// Whether `path` is a folder holding config.json.
bool is_model_folder(const std::string& path);

}  // namespace specula::hf
