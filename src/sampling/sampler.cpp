// sampling/sampler.cpp — the sampling chain, RNG and top_logprobs (see sampler.h
// for the chain order and its source).
//
// Speed (262144-token vocabularies): never sorts the whole vocabulary. top_k
// uses one scan with a k-sized heap; min_p alone is a threshold filter; top_p
// without top_k bins the tokens by logit, finds the bin where the cumulative
// mass crosses top_p and sorts only that bin. exp is a branch-free
// polynomial (below) that the compiler vectorises; sums are in double. XTC
// adds one pass over the candidates (and a second weights pass when it acts);
// DRY is linear in its window (a Z-function, not the pairwise scan).
// Does not: use ISA-specific intrinsics (the loops are plain C++).
#include "sampling/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <string>

namespace specula {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// Total order used everywhere: higher logit first, then lower id.
struct Better {
  template <typename C>
  bool operator()(const C& a, const C& b) const {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  }
};

struct Cand {
  int32_t id;
  float logit;
};

// The k best of l[0..n) under Better, written to out sorted best first.
// 0 < k <= n.
template <typename C>
void select_top_k(const float* l, int32_t n, int32_t k, std::vector<C>& out) {
  out.clear();
  Better better;
  if (k > 1024 && static_cast<int64_t>(k) * 8 > n) {
    out.resize(n);
    for (int32_t i = 0; i < n; ++i) out[i] = C{i, l[i]};
    std::nth_element(out.begin(), out.begin() + (k - 1), out.end(), better);
    out.resize(k);
    std::sort(out.begin(), out.end(), better);
    return;
  }
  // Heap with the worst kept candidate on top. Scanning ids in increasing
  // order, a newcomer equal to the worst never wins the tie, so only a
  // strictly greater logit enters.
  out.reserve(k);
  for (int32_t i = 0; i < k; ++i) out.push_back(C{i, l[i]});
  std::make_heap(out.begin(), out.end(), better);
  float worst = out.front().logit;
  for (int32_t i = k; i < n; ++i) {
    if (l[i] > worst) {
      std::pop_heap(out.begin(), out.end(), better);
      out.back() = C{i, l[i]};
      std::push_heap(out.begin(), out.end(), better);
      worst = out.front().logit;
    }
  }
  std::sort_heap(out.begin(), out.end(), better);  // ascending under Better = best first
}

// exp(x) in float for x <= 0 (the only use here: logit - max): Cody-Waite
// range reduction x = n*ln2 + r, |r| <= ln2/2, then the degree-7 Taylor
// polynomial of exp(r) (truncation error < 5e-9 relative), scaled by 2^n
// through the exponent bits; relative error about 2 ulp. Results below 2^-126
// (x < about -87.3), and -inf, give exactly 0 so banned tokens keep
// probability 0. Integer bit operations only (unsigned, so no overflow), no
// branches or float selects, so GCC vectorises the loops without -ffast-math.
inline float exp_f32(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;          // 1.5 * 2^23: t's low bits hold round(x*log2e)
  constexpr float kLn2Hi = 0.693359375f;         // ln 2 split so n*kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  const float t = x * kLog2e + kRound;
  const float n = t - kRound;
  const uint32_t tb = std::bit_cast<uint32_t>(t);
  // Exact round(x*log2e) while 2^23 <= t < 2^24; far below -126 when t is
  // smaller; t < 0 (x < about -8.7e6, or -inf) is caught by its sign bit.
  const uint32_t nu = tb - std::bit_cast<uint32_t>(kRound);
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = std::bit_cast<float>((nu + 127u) << 23);
  // All ones when n >= -126 and t >= 0, else 0 (unsigned wrap-around, then
  // arithmetic shifts of the sign bits: defined behaviour in C++20).
  const uint32_t keep = ~static_cast<uint32_t>((static_cast<int32_t>(nu + 126u) >> 31) |
                                               (static_cast<int32_t>(tb) >> 31));
  return std::bit_cast<float>(std::bit_cast<uint32_t>(p * scale) & keep);
}

// out[i] = exp((l[i] - max) * inv_t) for i in [0, n).
void exp_shifted(const float* l, int32_t n, float max, float inv_t, float* out) {
  for (int32_t i = 0; i < n; ++i) out[i] = exp_f32((l[i] - max) * inv_t);
}

// Sum of v[0..n) in double, eight interleaved partial sums (fixed order).
double sum_f64(const float* v, int32_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += static_cast<double>(v[i + j]);
  }
  for (; i < n; ++i) acc[0] += static_cast<double>(v[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Sum of exp(l[i] - max) without a vocabulary-sized buffer.
double sum_exp(const float* l, int32_t n, float max) {
  constexpr int32_t kChunk = 512;
  float buf[kChunk];
  double s = 0.0;
  for (int32_t i = 0; i < n; i += kChunk) {
    const int32_t m = std::min(kChunk, n - i);
    exp_shifted(l + i, m, max, 1.0f, buf);
    s += sum_f64(buf, m);
  }
  return s;
}

float max_of(const float* l, int32_t n) {
  float acc[8];
  for (float& a : acc) a = l[0];
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] = acc[j] < l[i + j] ? l[i + j] : acc[j];
  }
  for (; i < n; ++i) acc[0] = acc[0] < l[i] ? l[i] : acc[0];
  float m = acc[0];
  for (float a : acc) m = m < a ? a : m;
  return m;
}

// Lowest id holding the maximum logit.
int32_t argmax(const float* l, int32_t n) {
  const float m = max_of(l, n);
  for (int32_t i = 0; i < n; ++i) {
    if (l[i] == m) return i;
  }
  return 0;  // only when every logit is NaN
}

// Dense draw over weights w [n] by id: first id whose cumulative weight exceeds
// u * total. Chunk sums locate the chunk, then a sequential scan inside it.
int32_t draw_dense(const float* w, int32_t n, float u) {
  constexpr int32_t kChunk = 1024;
  const int32_t n_chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> chunk_sum(n_chunks);
  double total = 0.0;
  for (int32_t c = 0; c < n_chunks; ++c) {
    chunk_sum[c] = sum_f64(w + static_cast<int64_t>(c) * kChunk, std::min(kChunk, n - c * kChunk));
    total += chunk_sum[c];
  }
  const double target = static_cast<double>(u) * total;
  double cum = 0.0;
  int32_t last_positive = -1;
  for (int32_t c = 0; c < n_chunks; ++c) {
    if (chunk_sum[c] <= 0.0) continue;
    const int32_t begin = c * kChunk;
    const int32_t end = std::min(n, begin + kChunk);
    if (cum + chunk_sum[c] > target) {
      double inner = cum;
      for (int32_t i = begin; i < end; ++i) {
        if (w[i] <= 0.0f) continue;
        inner += static_cast<double>(w[i]);
        last_positive = i;
        if (inner > target) return i;
      }
    } else {
      for (int32_t i = end - 1; i >= begin; --i) {
        if (w[i] > 0.0f) {
          last_positive = i;
          break;
        }
      }
    }
    cum += chunk_sum[c];
  }
  return last_positive >= 0 ? last_positive : 0;  // rounding at the very top of the range
}

}  // namespace

// ---------------------------------------------------------------- SamplerRng

SamplerRng::SamplerRng(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& s : s_) s = splitmix64(x);
}

uint64_t SamplerRng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

float SamplerRng::next_float() {
  return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f);
}

// ---------------------------------------------------------------- Sampler

Sampler::Sampler(SamplingParams params) : params_(std::move(params)), rng_(params_.seed) {
  if (dry_on()) {
    for (const std::vector<int32_t>& seq : params_.dry_breaker_ids) {
      if (seq.empty()) continue;
      dry_breakers_[seq.front()].emplace_back(seq.begin() + 1, seq.end());
    }
  }
}

Result<Sampler> Sampler::create(SamplingParams params, int32_t n_vocab) {
  SPECULA_RETURN_IF_ERROR(params.validate(n_vocab));
  return Sampler(std::move(params));
}

void Sampler::accept(int32_t token) {
  SPECULA_CHECK(token >= 0);
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) ++generated_[token];
  accept_prompt(token);
}

void Sampler::accept_prompt(int32_t token) {
  SPECULA_CHECK(token >= 0);
  if (dry_on()) {
    dry_history_.push_back(token);
    if (params_.dry_penalty_last_n > 0 && dry_history_.size() > static_cast<size_t>(params_.dry_penalty_last_n))
      dry_history_.pop_front();
  }
  if (params_.repeat_last_n == 0 || params_.repeat_penalty == 1.0f) return;
  history_.push_back(token);
  ++counts_[token];
  if (params_.repeat_last_n > 0 && history_.size() > static_cast<size_t>(params_.repeat_last_n)) {
    const int32_t old = history_.front();
    history_.pop_front();
    auto it = counts_.find(old);
    if (--it->second == 0) counts_.erase(it);
  }
}

void Sampler::reset_history() {
  history_.clear();
  counts_.clear();
  generated_.clear();
  dry_history_.clear();
}

// llama.cpp's llama_sampler_dry_apply, steps 1-4 (see sampler.h, chain step 3),
// on the window r = dry_rev_ (most recent token first).
void Sampler::compute_dry() {
  dry_penalty_.clear();
  if (!dry_on()) return;
  const int32_t n = static_cast<int32_t>(dry_history_.size());  // already cut to the window
  const int32_t allowed = params_.dry_allowed_length;
  if (n <= allowed) return;
  dry_rev_.assign(dry_history_.rbegin(), dry_history_.rend());
  const int32_t* r = dry_rev_.data();

  // 1. The most recent breaker limits the repeat length to the tokens after it. A
  //    breaker is a head token r[i] whose tail (in generation order) follows it:
  //    tail[j] == r[i - 1 - j]; of several matching tails the longest counts.
  int32_t limit = n;
  if (!dry_breakers_.empty()) {
    for (int32_t i = 0; i < n; ++i) {
      const auto it = dry_breakers_.find(r[i]);
      if (it == dry_breakers_.end()) continue;
      int32_t longest = -1;
      for (const std::vector<int32_t>& tail : it->second) {
        const int32_t len = static_cast<int32_t>(tail.size());
        if (len <= longest || len > i) continue;
        bool match = true;
        for (int32_t j = 0; j < len && match; ++j) match = tail[j] == r[i - 1 - j];
        if (match) longest = len;
      }
      if (longest >= 0) {
        limit = i - longest;
        break;
      }
    }
  }
  if (limit < allowed) return;

  // 2. z[k] = length of the longest common prefix of r and r[k..] (the Z-function
  //    of r): the window's last z[k] tokens recur ending k tokens earlier.
  //    [lo, hi) is the rightmost segment found so far with r[lo..hi) == r[0..hi-lo).
  dry_z_.assign(static_cast<size_t>(n), 0);
  int32_t* z = dry_z_.data();
  for (int32_t k = 1, lo = 0, hi = 0; k < n; ++k) {
    int32_t m = k < hi ? std::min(hi - k, z[k - lo]) : 0;
    while (k + m < n && r[m] == r[k + m]) ++m;
    z[k] = m;
    if (k + m > hi) {
      lo = k;
      hi = k + m;
    }
  }

  // 3. The token that followed each recurrence, r[k - 1], would extend a repeat
  //    of min(z[k], limit) tokens: keep each token's longest.
  dry_max_repeat_.clear();
  for (int32_t k = 1; k < n; ++k) {
    const int32_t len = std::min(z[k], limit);
    if (len < allowed) continue;
    auto [it, fresh] = dry_max_repeat_.try_emplace(r[k - 1], len);
    if (!fresh && it->second < len) it->second = len;
  }

  // 4. Penalties, single-token breakers exempt; the exponent capped so that
  //    base^exponent stays below FLT_MAX (llama.cpp's 88.7228391 ~ ln FLT_MAX).
  int32_t max_exponent = 0;
  if (params_.dry_base > 1.000001f) max_exponent = static_cast<int32_t>(88.7228391f / std::log(params_.dry_base));
  for (const auto& [token, len] : dry_max_repeat_) {
    const auto it = dry_breakers_.find(token);
    if (it != dry_breakers_.end() &&
        std::any_of(it->second.begin(), it->second.end(), [](const std::vector<int32_t>& t) { return t.empty(); }))
      continue;
    int32_t e = len - allowed;
    if (max_exponent > 0 && e > max_exponent) e = max_exponent;
    const double penalty = static_cast<double>(params_.dry_multiplier) * std::pow(static_cast<double>(params_.dry_base), e);
    dry_penalty_.emplace_back(token, static_cast<float>(penalty));
  }
}

const float* Sampler::apply_bias_and_penalties(const float* logits, int32_t n_vocab) {
  const bool repeat = !counts_.empty();        // filled only when repeat_penalty is on
  const bool openai = !generated_.empty();     // filled only when presence/frequency are on
  compute_dry();
  const bool dry = !dry_penalty_.empty();
  if (params_.logit_bias.empty() && !repeat && !openai && !dry) return logits;
  work_.resize(n_vocab);
  std::memcpy(work_.data(), logits, sizeof(float) * static_cast<size_t>(n_vocab));
  for (const auto& [id, bias] : params_.logit_bias) {
    SPECULA_CHECK(id >= 0 && id < n_vocab);
    work_[id] += bias;
  }
  for (const auto& [id, count] : counts_) {
    if (id >= n_vocab) continue;  // history from a larger vocabulary: nothing to penalise
    float& v = work_[id];
    if (v <= 0.0f) {
      v *= params_.repeat_penalty;
    } else {
      v /= params_.repeat_penalty;
    }
  }
  for (const auto& [id, count] : generated_) {
    if (id >= n_vocab) continue;
    work_[id] -= static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty;
  }
  for (const auto& [id, penalty] : dry_penalty_) {
    if (id >= n_vocab) continue;
    work_[id] -= penalty;
  }
  return work_.data();
}

double Sampler::build_distribution(const float* l, int32_t n) {
  if (params_.top_n_sigma > 0.0f) l = apply_top_n_sigma(l, n);
  std::vector<Candidate>& kept = kept_;
  dense_ = false;
  xtc_removed_.clear();
  const bool use_top_k = params_.top_k > 0 && params_.top_k < n;
  const bool use_top_p = params_.top_p < 1.0f;
  const bool use_min_p = params_.min_p > 0.0f;
  const float inv_t = 1.0f / params_.temperature;

  float max;
  if (use_top_k) {
    select_top_k(l, n, params_.top_k, kept);  // sorted, best first
    max = kept.front().logit;
  } else {
    max = max_of(l, n);
  }
  if (max == kNegInf || std::isnan(max)) {
    // Every token is banned: nothing to sample from; fall back to the lowest id.
    kept.assign(1, Candidate{0, 0.0f});
    weights_.assign(1, 1.0f);
    return 1.0;
  }
  const float min_p_floor = use_min_p ? max + std::log(params_.min_p) : kNegInf;

  if (use_top_k) {
    if (use_top_p) {
      // Probabilities over the k kept (temperature 1), cumulated in sorted order.
      weights_.resize(kept.size());
      for (size_t i = 0; i < kept.size(); ++i) weights_[i] = exp_f32(kept[i].logit - max);
      const double target = static_cast<double>(params_.top_p) * sum_f64(weights_.data(), static_cast<int32_t>(kept.size()));
      double cum = 0.0;
      for (size_t i = 0; i < kept.size(); ++i) {
        cum += static_cast<double>(weights_[i]);
        if (cum >= target) {
          kept.resize(i + 1);
          break;
        }
      }
    }
    if (use_min_p) {
      size_t keep = 1;
      while (keep < kept.size() && kept[keep].logit >= min_p_floor) ++keep;
      kept.resize(keep);
    }
  } else if (use_top_p) {
    top_p_full_vocab(l, n, max, min_p_floor);
  } else if (use_min_p) {
    // min_p alone: an id-ordered threshold filter, no sort.
    kept.clear();
    for (int32_t i = 0; i < n; ++i) {
      if (l[i] >= min_p_floor) kept.push_back(Candidate{i, l[i]});
    }
  } else {
    // No truncation: dense weights by id.
    dense_ = true;
    if (xtc_on()) find_xtc_removed(l, n, max);
    weights_.resize(n);
    exp_shifted(l, n, max, inv_t, weights_.data());
    return sum_f64(weights_.data(), n);
  }

  if (xtc_on()) find_xtc_removed(l, n, max);
  // Temperature, then softmax weights with max subtraction (max is kept).
  weights_.resize(kept.size());
  for (size_t i = 0; i < kept.size(); ++i) weights_[i] = exp_f32((kept[i].logit - max) * inv_t);
  return sum_f64(weights_.data(), static_cast<int32_t>(kept.size()));
}

const float* Sampler::apply_top_n_sigma(const float* l, int32_t n) {
  float max = kNegInf;
  double sum = 0.0;
  int64_t finite = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (l[i] == kNegInf) continue;
    max = std::max(max, l[i]);
    sum += static_cast<double>(l[i]);
    ++finite;
  }
  if (finite == 0) return l;
  const double mean = sum / static_cast<double>(finite);
  double var = 0.0;
  for (int32_t i = 0; i < n; ++i)
    if (l[i] != kNegInf) var += (static_cast<double>(l[i]) - mean) * (static_cast<double>(l[i]) - mean);
  const double floor = static_cast<double>(max) -
                       static_cast<double>(params_.top_n_sigma) * std::sqrt(var / static_cast<double>(finite));
  sigma_.resize(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) sigma_[i] = static_cast<double>(l[i]) < floor ? kNegInf : l[i];
  return sigma_.data();
}

void Sampler::find_xtc_removed(const float* l, int32_t n, float max) {
  xtc_removed_.clear();
  // p_i at temperature 1, renormalised over the candidates left (every id when dense_).
  const int32_t m = dense_ ? n : static_cast<int32_t>(kept_.size());
  mass_.resize(m);
  if (dense_) {
    exp_shifted(l, n, max, 1.0f, mass_.data());
  } else {
    for (int32_t i = 0; i < m; ++i) mass_[i] = exp_f32(kept_[i].logit - max);
  }
  const double z = sum_f64(mass_.data(), m);
  const double threshold = static_cast<double>(params_.xtc_threshold);
  // Every candidate with p_i >= threshold (banned -inf tokens are not candidates),
  // and the least likely of them (lowest logit, then highest id: last in Better's order).
  int32_t worst = -1;
  float worst_logit = 0.0f;
  int32_t worst_id = 0;
  for (int32_t i = 0; i < m; ++i) {
    const float logit = dense_ ? l[i] : kept_[i].logit;
    const int32_t id = dense_ ? i : kept_[i].id;
    if (logit == kNegInf || !(static_cast<double>(mass_[i]) / z >= threshold)) continue;
    xtc_removed_.push_back(i);
    if (worst < 0 || logit < worst_logit || (logit == worst_logit && id > worst_id)) {
      worst = i;
      worst_logit = logit;
      worst_id = id;
    }
  }
  if (xtc_removed_.size() < 2) {
    xtc_removed_.clear();
    return;
  }
  xtc_removed_.erase(std::find(xtc_removed_.begin(), xtc_removed_.end(), worst));
  xtc_max_ = worst_logit;
}

double Sampler::xtc_weights(const float* l, int32_t n, std::vector<float>& w) const {
  const float inv_t = 1.0f / params_.temperature;
  // Every remaining candidate's logit is <= xtc_max_; the removed ones (above it,
  // where exp_f32 is not meant to be used) are overwritten with 0.
  if (dense_) {
    w.resize(n);
    exp_shifted(l, n, xtc_max_, inv_t, w.data());
  } else {
    w.resize(kept_.size());
    for (size_t i = 0; i < kept_.size(); ++i) w[i] = exp_f32(std::min(0.0f, (kept_[i].logit - xtc_max_) * inv_t));
  }
  for (int32_t i : xtc_removed_) w[i] = 0.0f;
  return sum_f64(w.data(), static_cast<int32_t>(w.size()));
}

void Sampler::top_p_full_vocab(const float* l, int32_t n, float max, float min_p_floor) {
  // top_p's probabilities are normalised over the whole vocabulary.
  mass_.resize(n);
  exp_shifted(l, n, max, 1.0f, mass_.data());
  const double target = static_cast<double>(params_.top_p) * sum_f64(mass_.data(), n);

  // Bin tokens at or above min_p's floor by distance below the max: kBins - 1
  // bins of width kRange / (kBins - 1) nats, then one tail bin. Bins are
  // ordered by logit, so the sorted prefix top_p keeps is: every bin before
  // the one where the cumulative mass reaches the target, plus a sorted
  // prefix of that boundary bin. Equal logits always share a bin.
  constexpr int32_t kBins = 2048;
  constexpr float kRange = 32.0f;
  constexpr uint16_t kExcluded = 0xFFFF;
  const float scale = static_cast<float>(kBins - 1) / kRange;
  bin_.resize(n);
  double bin_mass[kBins] = {};
  for (int32_t i = 0; i < n; ++i) {
    if (!(l[i] >= min_p_floor)) {
      bin_[i] = kExcluded;
      continue;
    }
    const float d = (max - l[i]) * scale;
    const int32_t b = d < static_cast<float>(kBins - 1) ? static_cast<int32_t>(d) : kBins - 1;
    bin_[i] = static_cast<uint16_t>(b);
    bin_mass[b] += static_cast<double>(mass_[i]);
  }
  int32_t boundary = -1;
  double before = 0.0;
  for (int32_t b = 0; b < kBins; ++b) {
    if (before + bin_mass[b] >= target) {
      boundary = b;
      break;
    }
    before += bin_mass[b];
  }

  kept_.clear();
  if (boundary < 0) {
    // min_p's floor cuts before top_p's mass is reached: min_p decides.
    for (int32_t i = 0; i < n; ++i) {
      if (bin_[i] != kExcluded) kept_.push_back(Candidate{i, l[i]});
    }
    return;
  }
  boundary_.clear();
  for (int32_t i = 0; i < n; ++i) {
    if (bin_[i] < boundary) {
      kept_.push_back(Candidate{i, l[i]});
    } else if (bin_[i] == boundary) {
      boundary_.push_back(Candidate{i, l[i]});
    }
  }
  std::sort(boundary_.begin(), boundary_.end(), Better());
  double cum = before;
  for (const Candidate& c : boundary_) {
    kept_.push_back(c);
    cum += static_cast<double>(mass_[c.id]);
    if (cum >= target) break;
  }
}

int32_t Sampler::sample(const float* logits, int32_t n_vocab) {
  SPECULA_CHECK(logits != nullptr && n_vocab > 0);
  const float* l = apply_bias_and_penalties(logits, n_vocab);
  if (params_.temperature <= 0.0f) return argmax(l, n_vocab);
  double total = build_distribution(l, n_vocab);
  if (xtc_on()) {
    // XTC's coin: the first draw (llama.cpp's XTC acts when its draw <= probability).
    const float c = rng_.next_float();
    if (!xtc_removed_.empty() && c <= params_.xtc_probability) total = xtc_weights(l, n_vocab, weights_);
  }
  const float u = rng_.next_float();
  if (dense_) return draw_dense(weights_.data(), n_vocab, u);
  const double target = static_cast<double>(u) * total;
  double cum = 0.0;
  int32_t last_positive = kept_.front().id;
  for (size_t i = 0; i < kept_.size(); ++i) {
    if (weights_[i] <= 0.0f) continue;
    cum += static_cast<double>(weights_[i]);
    last_positive = kept_[i].id;
    if (cum > target) return kept_[i].id;
  }
  return last_positive;  // rounding: target at the very top of the range
}

std::vector<std::pair<int32_t, float>> Sampler::probabilities(const float* logits, int32_t n_vocab) {
  SPECULA_CHECK(logits != nullptr && n_vocab > 0);
  const float* l = apply_bias_and_penalties(logits, n_vocab);
  if (params_.temperature <= 0.0f) return {{argmax(l, n_vocab), 1.0f}};
  const double total = build_distribution(l, n_vocab);
  std::vector<std::pair<int32_t, float>> out;
  if (!xtc_removed_.empty()) {
    // XTC on and able to act: the mixture over its coin.
    const double px = static_cast<double>(params_.xtc_probability);
    const double total_x = xtc_weights(l, n_vocab, xtc_w_);
    auto mix = [&](size_t i) {
      return static_cast<float>((1.0 - px) * (static_cast<double>(weights_[i]) / total) +
                                px * (static_cast<double>(xtc_w_[i]) / total_x));
    };
    if (dense_) {
      out.resize(n_vocab);
      for (int32_t i = 0; i < n_vocab; ++i) out[i] = {i, mix(i)};
      return out;
    }
    std::vector<bool> removed(kept_.size(), false);
    for (int32_t i : xtc_removed_) removed[i] = true;
    for (size_t i = 0; i < kept_.size(); ++i) {
      if (removed[i] && px >= 1.0) continue;  // XTC always acts: not a candidate
      out.emplace_back(kept_[i].id, mix(i));
    }
    return out;
  }
  if (dense_) {
    out.resize(n_vocab);
    for (int32_t i = 0; i < n_vocab; ++i) out[i] = {i, static_cast<float>(static_cast<double>(weights_[i]) / total)};
    return out;
  }
  out.resize(kept_.size());
  for (size_t i = 0; i < kept_.size(); ++i) {
    out[i] = {kept_[i].id, static_cast<float>(static_cast<double>(weights_[i]) / total)};
  }
  return out;
}

// ---------------------------------------------------------------- top_logprobs

std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int32_t n_vocab, int k) {
  SPECULA_CHECK(logits != nullptr && n_vocab > 0);
  k = std::clamp(k, 0, static_cast<int>(n_vocab));
  if (k == 0) return {};
  std::vector<Cand> top;
  select_top_k(logits, n_vocab, k, top);
  const float max = top.front().logit;
  const float log_z = max + static_cast<float>(std::log(sum_exp(logits, n_vocab, max)));
  std::vector<std::pair<int32_t, float>> out(top.size());
  for (size_t i = 0; i < top.size(); ++i) out[i] = {top[i].id, top[i].logit - log_z};
  return out;
}

float token_logprob(const float* logits, int32_t n_vocab, int32_t id) {
  SPECULA_CHECK(logits != nullptr && n_vocab > 0 && id >= 0 && id < n_vocab);
  float max = logits[0];
  for (int32_t i = 1; i < n_vocab; ++i) max = std::max(max, logits[i]);
  const float log_z = max + static_cast<float>(std::log(sum_exp(logits, n_vocab, max)));
  return logits[id] - log_z;
}

// ---------------------------------------------------------------- DRY breakers

std::vector<std::vector<int32_t>> dry_breaker_ids_from_strings(
    const std::vector<std::string>& breakers, int32_t n_vocab,
    const std::function<std::string(int32_t)>& token_text,
    const std::function<std::vector<int32_t>(std::string_view)>& tokenize) {
  constexpr size_t kMaxChars = 40;  // llama.cpp's MAX_CHAR_LEN
  constexpr size_t kMaxTail = 20;   // llama.cpp's MAX_SEQ_LEN
  std::vector<std::string> strs;
  for (const std::string& b : breakers) {
    if (!b.empty()) strs.push_back(b.substr(0, kMaxChars));
  }
  std::set<std::vector<int32_t>> out;
  if (strs.empty()) return {};
  for (int32_t id = 0; id < n_vocab; ++id) {
    const std::string word = token_text(id);
    for (const std::string& str : strs) {
      if (word.find(str) != std::string::npos) {
        out.insert({id});
        continue;
      }
      // The word does not contain str, so a match from an occurrence of str[0]
      // runs off the word's end: word[pos..] is a proper prefix of str, and the
      // rest of str is expected to follow as the tail.
      for (size_t pos = word.find(str[0]); pos != std::string::npos; pos = word.find(str[0], pos + 1)) {
        const size_t len = word.size() - pos;
        if (len >= str.size() || word.compare(pos, len, str, 0, len) != 0) continue;
        std::vector<int32_t> seq = {id};
        const std::vector<int32_t> tail = tokenize(std::string_view(str).substr(len));
        seq.insert(seq.end(), tail.begin(), tail.begin() + static_cast<std::ptrdiff_t>(std::min(tail.size(), kMaxTail)));
        out.insert(std::move(seq));
      }
    }
  }
  return {out.begin(), out.end()};
}

std::vector<std::vector<int32_t>> dry_breaker_ids_from_strings(const std::vector<std::string>& breakers,
                                                               const tokenizer::Tokenizer& tok) {
  return dry_breaker_ids_from_strings(
      breakers, tok.vocab().size(), [&](int32_t id) { return tok.token_to_piece(id, true); },
      [&](std::string_view s) { return tok.encode(s, false, false); });
}

}  // namespace specula
