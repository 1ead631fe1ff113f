// sampling/sampler.h — the per-request token sampler (its parameters: sampling/params.h): its own
// seeded RNG stream, penalty history, and the sampling chain over one logits row.
//
// Owns: the chain (logit bias -> penalties -> DRY -> greedy,
// or top-nσ -> top-k -> top-p -> min-p -> XTC -> temperature -> draw), the RNG
// (xoshiro256** seeded by splitmix64, identical on every machine/compiler),
// top_logprobs for OpenAI-style logprobs, and llama.cpp's preprocessing of DRY
// sequence-breaker strings into token ids (dry_breaker_ids_from_strings).
// Deliberately does not: batch rows (one row per call), grammars/constrained
// decoding, typical/mirostat/dynamic-temperature samplers,
// speculative rejection sampling (it exposes `probabilities` and `uniform` so
// decoding/speculative builds that on top), tokenize (DRY's breakers come in as
// token ids, computed once per list by the caller with dry_breaker_ids_from_strings),
// or read the environment.
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
//   3. DRY (llama.cpp's llama_sampler_dry, from koboldcpp), over the window of
//      the last `dry_penalty_last_n` tokens, prompt included (nothing when the
//      window has <= dry_allowed_length tokens). Let m = the number of tokens
//      after the most recent sequence breaker in the window (the window's length
//      if none; nothing when m < dry_allowed_length). For every earlier position
//      where the window's last n tokens recur (n the longest such match there,
//      capped at m), the token that followed that occurrence would extend an
//      n-token repeat; with N = the largest such n for a token and
//      N >= dry_allowed_length, logit -= dry_multiplier *
//      dry_base^min(N - dry_allowed_length, floor(88.7228391 / ln dry_base)) (the cap
//      only when dry_base > 1.000001). Single-token breakers are never penalised.
//      Applies to greedy decoding too.
//   4. temperature <= 0: argmax (lowest id on ties); no RNG draw (XTC is not
//      applied: see 8).
//   Otherwise, with p_i = softmax(logits) at temperature 1 over the candidates:
//   4b. top_n_sigma (n > 0; llama.cpp's top-nσ, between DRY and top_k as there): with
//      max and σ the largest and the standard deviation (population, in double) of the
//      finite logits, tokens whose logit is below max - n·σ are removed.
//   5. top_k (k > 0): keep the k largest logits.
//   6. top_p (< 1): sort by logit descending, keep the shortest prefix whose
//      cumulative probability reaches top_p (at least one token).
//   7. min_p (> 0): keep tokens with p_i >= min_p * p_max, evaluated in logit
//      space as logit_i >= logit_max + log(min_p).
//   8. XTC (llama.cpp's llama_sampler_xtc; on when xtc_probability > 0 and
//      xtc_threshold <= 0.5): the first RNG draw c; when c <= xtc_probability and
//      at least two candidates have p_i >= xtc_threshold (p_i renormalised over the
//      candidates left by 5-7, temperature 1; banned -inf tokens never count),
//      all of those but the least likely (lowest logit; on a tie the higher id,
//      the last in the chain's order) are removed; the rest are renormalised.
//      c is drawn on every sample() with temperature > 0 while XTC is on, whether
//      or not XTC can remove anything, so turning XTC on changes the draw
//      sequence (two draws per token instead of one). (llama.cpp draws c from a
//      separate generator, skips it when one candidate is left, and runs XTC
//      before greedy's argmax too.)
//   9. temperature: logit /= temperature (after truncation, as llama.cpp).
//  10. draw: softmax in float with max subtraction (sums in double), one
//      uniform u in [0,1) from the top 24 bits of the RNG, first candidate
//      whose cumulative weight exceeds u * total.
// Ties between equal logits are always broken by lower token id, so results
// do not depend on std::sort/nth_element implementations.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sampling/params.h"
#include "specula/status.h"
#include "tokenizer/tokenizer.h"

namespace specula {

// A sparse token distribution: (token id, probability), probabilities summing to 1.
using TokenDist = std::vector<std::pair<int32_t, float>>;

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
  // temperature > 0 and XTC is off, two when XTC is on (XTC's coin first, then
  // the token's), none when greedy. Does not record the token: call accept().
  int32_t sample(const float* logits, int32_t n_vocab);

  // The final distribution the next sample() would draw from (same chain, no
  // RNG draw): (token id, probability) for every kept candidate, probabilities
  // summing to 1, in an unspecified but deterministic order (without any
  // truncation that is every token, by id). Greedy returns {(argmax, 1)}.
  // With XTC on this is sample()'s exact marginal over XTC's coin:
  // (1 - xtc_probability) * the chain without XTC + xtc_probability * the chain
  // with XTC's removal (at xtc_probability 1, removed tokens are left out, or
  // have probability 0 when every token is listed by id).
  std::vector<std::pair<int32_t, float>> probabilities(const float* logits, int32_t n_vocab);

  // One uniform draw in [0, 1) from this sampler's RNG stream (for speculative
  // rejection sampling, which needs draws besides sample()'s).
  float uniform() { return rng_.next_float(); }
  // Records a generated token in the penalty histories (ids must be >= 0).
  void accept(int32_t token);
  // Records a prompt token: it counts for the repetition penalty and DRY only
  // (not for presence/frequency).
  void accept_prompt(int32_t token);
  // The RNG stream's position (SamplerRng::state): with the same accepted tokens, a sampler
  // restored to it continues exactly as the one it was saved from.
  std::array<uint64_t, 4> rng_state() const { return rng_.state(); }
  void set_rng_state(const std::array<uint64_t, 4>& s) { rng_.set_state(s); }
  // Forgets the penalty and DRY history (the RNG stream continues).
  void reset_history();

  const SamplingParams& params() const { return params_; }

 private:
  struct Candidate {
    int32_t id;
    float logit;
  };

  // Applies logit bias, penalties and DRY; returns `logits` itself when nothing
  // changes, else a pointer into work_ [n_vocab].
  const float* apply_bias_and_penalties(const float* logits, int32_t n_vocab);
  // DRY's step: fills dry_penalty_ (token -> the amount to subtract from its
  // logit); empty when DRY is off or penalises nothing.
  void compute_dry();
  bool dry_on() const {
    return params_.dry_multiplier != 0.0f && params_.dry_base >= 1.0f && params_.dry_penalty_last_n != 0;
  }
  bool xtc_on() const { return params_.xtc_probability > 0.0f && params_.xtc_threshold <= 0.5f; }
  // Steps 5-9 on l [n_vocab]: fills kept_ with the kept candidates and weights_
  // with their unnormalised final weights exp((logit - max) / temperature), or,
  // without truncation, sets dense_ and fills weights_ [n_vocab] by token id.
  // With XTC on, also fills xtc_removed_ (indices into weights_ that XTC removes
  // when it acts; empty when it would not act). Returns the sum of the weights.
  double build_distribution(const float* l, int32_t n_vocab);
  // Step 4b: l [n_vocab] with the tokens top-nσ removes at -inf (in sigma_), or l itself
  // when every logit is -inf.
  const float* apply_top_n_sigma(const float* l, int32_t n_vocab);
  // XTC's removal set over the candidates build_distribution left: fills
  // xtc_removed_ and xtc_max_ (the logit of the candidate XTC keeps).
  void find_xtc_removed(const float* l, int32_t n_vocab, float max);
  // The final weights after XTC's removal, relative to the kept candidate's logit
  // (as llama.cpp's softmax after XTC), indexed like weights_, removed ones 0;
  // returns their sum.
  double xtc_weights(const float* l, int32_t n_vocab, std::vector<float>& w) const;
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
  std::vector<int32_t> xtc_removed_;           // scratch: indices into weights_ XTC would remove
  float xtc_max_ = 0.0f;                       // scratch: logit of the candidate XTC keeps
  std::vector<float> xtc_w_;                   // scratch: weights after XTC (probabilities())
  std::vector<float> sigma_;                   // scratch: [n_vocab] logits after top-nσ
  std::deque<int32_t> dry_history_;            // last dry_penalty_last_n accepted tokens (DRY on only)
  // DRY breakers by head token: the tails ({} for a single-token breaker).
  std::unordered_map<int32_t, std::vector<std::vector<int32_t>>> dry_breakers_;
  std::vector<int32_t> dry_rev_;               // scratch: DRY window, most recent first
  std::vector<int32_t> dry_z_;                 // scratch: Z-function of dry_rev_
  std::unordered_map<int32_t, int32_t> dry_max_repeat_;  // scratch: token -> longest repeat it extends
  std::vector<std::pair<int32_t, float>> dry_penalty_;   // scratch: (token, logit penalty)
};

// Log-softmax of the raw logits [n_vocab] (temperature 1, no bias or penalties),
// the k most likely tokens as (id, logprob), descending, ties by lower id.
// k is clamped to [0, n_vocab]. For OpenAI `logprobs` / `top_logprobs`.
std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int32_t n_vocab, int k);

// Log-softmax of the raw logits [n_vocab] at one id (same arithmetic as top_logprobs).
float token_logprob(const float* logits, int32_t n_vocab, int32_t id);

// SamplingParams::dry_breaker_ids from dry_sequence_breakers, as llama.cpp's
// llama_sampler_init_dry derives them (get_overlapping_token_sequences): each
// breaker string is cut to 40 bytes (empty ones are skipped); every token whose
// text contains it is a single-token breaker {id}; every token whose text ends
// with a proper prefix of it (starting at any occurrence of its first byte) gets
// {id, tokenize(rest of the string)...}, the tail cut to 20 tokens. `token_text`
// must give a token's text as llama.cpp's `vocab.detokenize({id}, true)` does
// (special tokens as their text), `tokenize` a string's ids as
// `vocab.tokenize(text, false, false)` (no BOS, specials not parsed). The result
// is sorted and free of duplicates. Costs one token_text call per token: cache it
// per model and breaker list.
std::vector<std::vector<int32_t>> dry_breaker_ids_from_strings(
    const std::vector<std::string>& breakers, int32_t n_vocab,
    const std::function<std::string(int32_t)>& token_text,
    const std::function<std::vector<int32_t>(std::string_view)>& tokenize);

// The same with a model's tokenizer: token text as llama.cpp's detokenize({id}, true),
// tokenization without BOS or special parsing. What the server and the CLI call.
std::vector<std::vector<int32_t>> dry_breaker_ids_from_strings(const std::vector<std::string>& breakers,
                                                               const tokenizer::Tokenizer& tok);

}  // namespace specula
