// method/sampler.h — the per-request token sampler: SamplingParams, its own
// seeded RNG stream, penalty history, and the sampling chain over one logits row.
//
// Owns: parameter validation, the chain (logit bias -> penalties -> greedy, or
// top-k -> top-p -> min-p -> temperature -> draw), the RNG (xoshiro256** seeded
// by splitmix64, identical on every machine/compiler), and top_logprobs for
// OpenAI-style logprobs.
// Deliberately does not: batch rows (one row per call), grammars/constrained
// decoding, DRY/XTC/typical/mirostat samplers, speculative rejection sampling
// (it exposes `probabilities` and `uniform` so method/speculative builds that on
// top), or read the environment.
//
// Chain order follows llama.cpp's default (common/common.h,
// `common_params_sampling::samplers` = penalties, dry, top_n_sigma, top_k,
// typ_p, top_p, min_p, xtc, temperature; common/sampling.cpp adds the
// logit-bias sampler first and the `dist` sampler last):
//   1. logit_bias: logit[id] += bias (repeated ids add up; -inf bans a token).
//   2. penalties: the repetition penalty as in CTRL (Keskar et al. 2019) /
//      llama.cpp over the last `repeat_last_n` tokens, prompt included (a token in
//      that window: logit /= repeat_penalty if logit > 0, else logit *= repeat_penalty);
//      then OpenAI's presence/frequency penalties over the generated tokens only
//      (OpenAI's and vLLM's definition; a token generated c > 0 times:
//      logit -= c * frequency_penalty + presence_penalty).
//   3. temperature <= 0: argmax (lowest id on ties); no RNG draw.
//   Otherwise, with p_i = softmax(logits) at temperature 1 over the candidates:
//   4. top_k (k > 0): keep the k largest logits.
//   5. top_p (< 1): sort by logit descending, keep the shortest prefix whose
//      cumulative probability reaches top_p (at least one token).
//   6. min_p (> 0): keep tokens with p_i >= min_p * p_max, evaluated in logit
//      space as logit_i >= logit_max + log(min_p).
//   7. temperature: logit /= temperature (after truncation, as llama.cpp).
//   8. draw: softmax in float with max subtraction (sums in double), one
//      uniform u in [0,1) from the top 24 bits of the RNG, first candidate
//      whose cumulative weight exceeds u * total.
// Ties between equal logits are always broken by lower token id, so results
// do not depend on std::sort/nth_element implementations.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <deque>
#include <unordered_map>
#include <utility>
#include <vector>

#include "specula/status.h"

namespace specula {

// A sparse token distribution: (token id, probability), probabilities summing to 1.
using TokenDist = std::vector<std::pair<int32_t, float>>;

// Per-request sampling options. Defaults are llama.cpp's CLI defaults
// (common_params_sampling), except seed, which is fixed here (llama.cpp draws
// a random one); the request layer passes the user's seed or a random one.
struct SamplingParams {
  float temperature = 0.8f;      // <= 0 => greedy argmax; must be finite, >= 0
  int32_t top_k = 40;            // <= 0 => off
  float top_p = 0.95f;           // in (0, 1]; 1 => off
  float min_p = 0.05f;           // in [0, 1]; 0 => off
  float repeat_penalty = 1.0f;   // > 0; 1 => off
  int32_t repeat_last_n = 64;    // repeat_penalty window; 0 => off, -1 => all tokens
  float presence_penalty = 0.0f;   // OpenAI alpha_presence, over generated tokens; 0 => off
  float frequency_penalty = 0.0f;  // OpenAI alpha_frequency, over generated tokens; 0 => off
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, additive bias); bias may be -inf
  uint64_t seed = 0;             // RNG stream seed

  // Checks every field against n_vocab; messages look like
  // "[sampler] top_p must be in (0, 1], got 1.5".
  Status validate(int32_t n_vocab) const;
};

// A model's own sampling defaults (a Hugging Face folder's generation_config.json, stored as
// general.sampling.*; engine/generate.h model_sampling_defaults), applied to the fields a user
// or client left unset — as vLLM does with a model's generation config.
struct SamplingDefaults {
  std::optional<float> temperature, top_p, min_p;
  std::optional<int32_t> top_k;
  void apply(SamplingParams& s) const {
    if (temperature) s.temperature = *temperature;
    if (top_p) s.top_p = *top_p;
    if (min_p) s.min_p = *min_p;
    if (top_k) s.top_k = *top_k;
  }
  bool empty() const { return !temperature && !top_p && !min_p && !top_k; }
};

// xoshiro256** 1.0 (Blackman & Vigna, https://prng.di.unimi.it/xoshiro256starstar.c),
// state filled from the seed by splitmix64 (https://prng.di.unimi.it/splitmix64.c).
// Fully specified integer arithmetic: same seed, same stream everywhere.
class SamplerRng {
 public:
  explicit SamplerRng(uint64_t seed);
  uint64_t next_u64();
  // Uniform in [0, 1): the top 24 bits of next_u64() times 2^-24 (exact in float).
  float next_float();
  // The generator's position, to save and restore a stream (resuming a generation).
  std::array<uint64_t, 4> state() const { return {s_[0], s_[1], s_[2], s_[3]}; }
  void set_state(const std::array<uint64_t, 4>& s) {
    for (int i = 0; i < 4; ++i) s_[i] = s[i];
  }

 private:
  uint64_t s_[4];
};

// One request's sampler. Copyable (a copy continues the same RNG stream and
// history independently). Not thread-safe; one row, one caller.
class Sampler {
 public:
  // `params` must be valid for the logits passed later (see create()).
  explicit Sampler(SamplingParams params);
  // Validates params against n_vocab first.
  static Result<Sampler> create(SamplingParams params, int32_t n_vocab);

  // Runs the chain on logits [n_vocab] (f32, finite or -inf; not modified) and
  // returns the chosen token id. Draws exactly one RNG number when
  // temperature > 0, none when greedy. Does not record the token: call accept().
  int32_t sample(const float* logits, int32_t n_vocab);

  // The final distribution the next sample() would draw from (same chain, no
  // RNG draw): (token id, probability) for every kept candidate, probabilities
  // summing to 1, in an unspecified but deterministic order (without any
  // truncation that is every token, by id). Greedy returns {(argmax, 1)}.
  std::vector<std::pair<int32_t, float>> probabilities(const float* logits, int32_t n_vocab);

  // One uniform draw in [0, 1) from this sampler's RNG stream (for speculative
  // rejection sampling, which needs draws besides sample()'s).
  float uniform() { return rng_.next_float(); }
  // Records a generated token in the penalty histories (ids must be >= 0).
  void accept(int32_t token);
  // Records a prompt token: it counts for the repetition penalty only.
  void accept_prompt(int32_t token);
  // The RNG stream's position (SamplerRng::state): with the same accepted tokens, a sampler
  // restored to it continues exactly as the one it was saved from.
  std::array<uint64_t, 4> rng_state() const { return rng_.state(); }
  void set_rng_state(const std::array<uint64_t, 4>& s) { rng_.set_state(s); }
  // Forgets the penalty history (the RNG stream continues).
  void reset_history();

  const SamplingParams& params() const { return params_; }

 private:
  struct Candidate {
    int32_t id;
    float logit;
  };

  // Applies logit bias and penalties; returns `logits` itself when nothing
  // changes, else a pointer into work_ [n_vocab].
  const float* apply_bias_and_penalties(const float* logits, int32_t n_vocab);
  // Steps 4-7 on l [n_vocab]: fills kept_ with the kept candidates and weights_
  // with their unnormalised final weights exp((logit - max) / temperature), or,
  // without truncation, sets dense_ and fills weights_ [n_vocab] by token id.
  // Returns the sum of the weights.
  double build_distribution(const float* l, int32_t n_vocab);
  // top_p (and min_p) without top_k over the whole vocabulary, by logit bins
  // instead of a full sort; fills kept_.
  void top_p_full_vocab(const float* l, int32_t n_vocab, float max, float min_p_floor);

  SamplingParams params_;
  SamplerRng rng_;
  std::deque<int32_t> history_;                // last repeat_last_n accepted tokens
  std::unordered_map<int32_t, int32_t> counts_;  // token id -> count within history_
  std::unordered_map<int32_t, int32_t> generated_;  // token id -> times generated (presence/frequency)
  std::vector<float> work_;                    // [n_vocab] biased/penalised logits scratch
  std::vector<Candidate> kept_;                // scratch: surviving candidates
  std::vector<float> weights_;                 // scratch: [kept_.size()] or, if dense_, [n_vocab]
  bool dense_ = false;                         // weights_ covers every token id
  std::vector<float> mass_;                    // scratch: [n_vocab] exp(logit - max)
  std::vector<uint16_t> bin_;                  // scratch: [n_vocab] logit bin of each token
  std::vector<Candidate> boundary_;            // scratch: candidates in top_p's boundary bin
};

// Log-softmax of the raw logits [n_vocab] (temperature 1, no bias or penalties),
// the k most likely tokens as (id, logprob), descending, ties by lower id.
// k is clamped to [0, n_vocab]. For OpenAI `logprobs` / `top_logprobs`.
std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int32_t n_vocab, int k);

// Log-softmax of the raw logits [n_vocab] at one id (same arithmetic as top_logprobs).
float token_logprob(const float* logits, int32_t n_vocab, int32_t id);

}  // namespace specula
