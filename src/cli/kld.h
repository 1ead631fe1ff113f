// cli/kld.h — `specula kld`: how far a KV cache type moves the model's next-token
// distributions, measured as llama.cpp's `llama-perplexity --kl-divergence` measures it.
//
// The text is tokenized (with BOS when the vocabulary adds one), cut into chunks of n_ctx
// tokens (the first token of each chunk replaced by BOS when the vocabulary adds one), and
// each chunk is run through the model in one forward on an empty row — once with an f16 K/V cache (the base) and once
// with the cache options under test. Positions n_ctx/2 .. n_ctx-2 of each chunk are
// scored (the first half is context), as llama-perplexity does: per position the
// KL divergence KL(p_base || p_test) of the softmaxes (double precision; like
// llama-perplexity, over the tokens whose base log-probability is above -16), whether the
// argmax agrees, and both negative log-likelihoods of the next token (perplexity).
// With `base_model`, the base is that model instead (with an f16 cache) and the test this one
// (with the cache options under test): how far a quantization of the weights moves the model
// — e.g. a bf16 Hugging Face folder against it quantized at load (`--quantize q4_k`), or two
// GGUF quantizations; llama-perplexity compares saved base logits the same way.
#pragma once

#include <cstdint>
#include <string>

#include "model/model.h"
#include "state/layout.h"
#include "tokenizer/tokenizer.h"

namespace specula {

struct KldOptions {
  std::string text_file;   // UTF-8 text
  int64_t n_ctx = 512;     // tokens per chunk
  int64_t max_chunks = 0;  // 0 = every full chunk
  CacheOptions test;       // the cache under test (the base is f16/f16)
  Model* base_model = nullptr;  // the base model (default: the model itself); same vocabulary
  bool json = false;       // also print one JSON line
};

struct KldResult {
  int64_t chunks = 0, positions = 0;
  double mean_kld = 0, sd_kld = 0, median_kld = 0, p99_kld = 0, max_kld = 0;
  double same_top = 0;               // fraction of positions whose argmax agrees
  double ppl_base = 0, ppl_test = 0;  // exp(mean NLL)
  double bytes_per_token_base = 0, bytes_per_token_test = 0;  // KV cache, per request
};

// Errors: unreadable file, a text shorter than one chunk, the test cache's layout errors, a
// base model with another vocabulary.
Result<KldResult> kl_divergence(Model& model, const tokenizer::Tokenizer& tok, const KldOptions& options);

}  // namespace specula
