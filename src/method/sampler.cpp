// method/sampler.cpp — the sampling chain, RNG and top_logprobs (see sampler.h
// for the chain order and its source).
//
// Speed: never sorts the whole vocabulary in the common cases. top_k uses one
// scan with a k-sized heap; without top_k, min_p and top_p first collect the
// tokens above a logit threshold (min_p's, or a widening window below the max
// until it holds top_p's mass), and only that subset is sorted.
// Does not: vectorise by hand (the scans are simple enough for the compiler).
#include "method/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace specula {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::string fmt_float(float v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(v));
  return buf;
}

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

int32_t argmax(const float* l, int32_t n) {
  int32_t best = 0;
  float best_v = l[0];
  for (int32_t i = 1; i < n; ++i) {
    if (l[i] > best_v) {
      best_v = l[i];
      best = i;
    }
  }
  return best;
}

float max_of(const float* l, int32_t n) {
  float m = l[0];
  for (int32_t i = 1; i < n; ++i) m = std::max(m, l[i]);
  return m;
}

double sum_exp(const float* l, int32_t n, float max) {
  double s = 0.0;
  for (int32_t i = 0; i < n; ++i) s += static_cast<double>(std::exp(l[i] - max));
  return s;
}

}  // namespace

// ---------------------------------------------------------------- SamplingParams

Status SamplingParams::validate(int32_t n_vocab) const {
  const std::string p = "[sampler] ";
  if (n_vocab <= 0) return Status::error(p + "n_vocab must be positive, got " + std::to_string(n_vocab));
  if (!std::isfinite(temperature) || temperature < 0.0f)
    return Status::error(p + "temperature must be finite and >= 0, got " + fmt_float(temperature));
  if (!(top_p > 0.0f && top_p <= 1.0f))
    return Status::error(p + "top_p must be in (0, 1], got " + fmt_float(top_p));
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    return Status::error(p + "min_p must be in [0, 1], got " + fmt_float(min_p));
  if (!std::isfinite(repeat_penalty) || repeat_penalty <= 0.0f)
    return Status::error(p + "repeat_penalty must be finite and > 0, got " + fmt_float(repeat_penalty));
  if (repeat_last_n < -1)
    return Status::error(p + "repeat_last_n must be >= -1 (-1 = all tokens), got " +
                         std::to_string(repeat_last_n));
  if (!std::isfinite(presence_penalty))
    return Status::error(p + "presence_penalty must be finite, got " + fmt_float(presence_penalty));
  if (!std::isfinite(frequency_penalty))
    return Status::error(p + "frequency_penalty must be finite, got " + fmt_float(frequency_penalty));
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= n_vocab)
      return Status::error(p + "logit_bias token " + std::to_string(id) + " out of range [0, " +
                           std::to_string(n_vocab) + ")");
    if (std::isnan(bias) || bias == std::numeric_limits<float>::infinity())
      return Status::error(p + "logit_bias for token " + std::to_string(id) +
                           " must be finite or -inf, got " + fmt_float(bias));
  }
  return Status::ok();
}

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

Sampler::Sampler(SamplingParams params) : params_(std::move(params)), rng_(params_.seed) {}

Result<Sampler> Sampler::create(SamplingParams params, int32_t n_vocab) {
  SPECULA_RETURN_IF_ERROR(params.validate(n_vocab));
  return Sampler(std::move(params));
}

void Sampler::accept(int32_t token) {
  SPECULA_CHECK(token >= 0);
  if (params_.repeat_last_n == 0) return;
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
}

const float* Sampler::apply_bias_and_penalties(const float* logits, int32_t n_vocab) {
  const bool penalties = params_.repeat_last_n != 0 && !counts_.empty() &&
                         (params_.repeat_penalty != 1.0f || params_.frequency_penalty != 0.0f ||
                          params_.presence_penalty != 0.0f);
  if (params_.logit_bias.empty() && !penalties) return logits;
  work_.resize(n_vocab);
  std::memcpy(work_.data(), logits, sizeof(float) * static_cast<size_t>(n_vocab));
  for (const auto& [id, bias] : params_.logit_bias) {
    SPECULA_CHECK(id >= 0 && id < n_vocab);
    work_[id] += bias;
  }
  if (penalties) {
    for (const auto& [id, count] : counts_) {
      if (id >= n_vocab) continue;  // history from a larger vocabulary: nothing to penalise
      float& v = work_[id];
      if (v <= 0.0f) {
        v *= params_.repeat_penalty;
      } else {
        v /= params_.repeat_penalty;
      }
      v -= static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty;
    }
  }
  return work_.data();
}

double Sampler::build_distribution(const float* l, int32_t n) {
  std::vector<Candidate>& kept = kept_;
  const bool use_top_k = params_.top_k > 0 && params_.top_k < n;
  const bool use_top_p = params_.top_p < 1.0f;
  const bool use_min_p = params_.min_p > 0.0f;
  Better better;

  float max;
  if (use_top_k) {
    select_top_k(l, n, params_.top_k, kept);  // sorted, best first
    max = kept.front().logit;
  } else {
    max = max_of(l, n);
  }
  if (max == kNegInf) {
    // Every token is banned: nothing to sample from; fall back to the lowest id.
    kept.assign(1, Candidate{0, 0.0f});
    weights_.assign(1, 1.0f);
    return 1.0;
  }
  const float min_p_floor = use_min_p ? max + std::log(params_.min_p) : kNegInf;

  if (use_top_k) {
    if (use_top_p) {
      double z = 0.0;
      for (const Candidate& c : kept) z += static_cast<double>(std::exp(c.logit - max));
      const double target = static_cast<double>(params_.top_p) * z;
      double cum = 0.0;
      size_t keep = kept.size();
      for (size_t i = 0; i < kept.size(); ++i) {
        cum += static_cast<double>(std::exp(kept[i].logit - max));
        if (cum >= target) {
          keep = i + 1;
          break;
        }
      }
      kept.resize(keep);
    }
    if (use_min_p) {
      size_t keep = 1;
      while (keep < kept.size() && kept[keep].logit >= min_p_floor) ++keep;
      kept.resize(keep);
    }
  } else if (use_top_p) {
    // top_p's probabilities are normalised over the whole vocabulary.
    const double z = sum_exp(l, n, max);
    const double target = static_cast<double>(params_.top_p) * z;
    // Collect tokens above a widening cut until they hold top_p's mass (then
    // the sorted prefix lies inside them) or the cut reaches min_p's floor.
    float delta = 8.0f;
    for (;;) {
      const float cut = std::max(min_p_floor, delta > 64.0f ? kNegInf : max - delta);
      kept.clear();
      double mass = 0.0;
      for (int32_t i = 0; i < n; ++i) {
        if (l[i] >= cut) {
          kept.push_back(Candidate{i, l[i]});
          mass += static_cast<double>(std::exp(l[i] - max));
        }
      }
      if (mass >= target || cut <= min_p_floor) break;
      delta *= 2.0f;
    }
    std::sort(kept.begin(), kept.end(), better);
    double cum = 0.0;
    for (size_t i = 0; i < kept.size(); ++i) {
      cum += static_cast<double>(std::exp(kept[i].logit - max));
      if (cum >= target) {
        kept.resize(i + 1);
        break;
      }
    }
    // Every collected token is above min_p's floor, so min_p is applied.
  } else {
    // min_p alone (or no truncation): an id-ordered filter, no sort.
    kept.clear();
    for (int32_t i = 0; i < n; ++i) {
      if (l[i] >= min_p_floor) kept.push_back(Candidate{i, l[i]});
    }
  }

  // Temperature, then softmax weights with max subtraction (max is kept).
  const float inv_t = 1.0f / params_.temperature;
  weights_.resize(kept.size());
  double total = 0.0;
  for (size_t i = 0; i < kept.size(); ++i) {
    weights_[i] = std::exp((kept[i].logit - max) * inv_t);
    total += static_cast<double>(weights_[i]);
  }
  return total;
}

int32_t Sampler::sample(const float* logits, int32_t n_vocab) {
  SPECULA_CHECK(logits != nullptr && n_vocab > 0);
  const float* l = apply_bias_and_penalties(logits, n_vocab);
  if (params_.temperature <= 0.0f) return argmax(l, n_vocab);
  const double total = build_distribution(l, n_vocab);
  const double target = static_cast<double>(rng_.next_float()) * total;
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
  std::vector<std::pair<int32_t, float>> out(kept_.size());
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

}  // namespace specula
