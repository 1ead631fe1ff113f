// model/attention.cpp — see attention.h.
#include "model/attention.h"

#include <algorithm>
#include <cmath>

#include "core/fp16.h"

namespace specula {
namespace {

// f16 -> f32 through a table (exact; built once).
const float* half_table() {
  static const std::vector<float> t = [] {
    std::vector<float> v(65536);
    for (uint32_t i = 0; i < 65536; ++i) v[i] = fp16_to_fp32(static_cast<uint16_t>(i));
    return v;
  }();
  return t.data();
}

}  // namespace

void attention(ThreadPool& pool, const AttentionArgs& a, const KvCache& cache, const float* q,
               const float* k_new, const float* v_new, float* out) {
  const int64_t hd = a.head_dim;
  const int64_t kvw = a.n_kv_heads * hd;
  const int64_t group = a.n_heads / a.n_kv_heads;
  const int64_t M = static_cast<int64_t>(a.B) * a.T;
  const float* h2f = half_table();

  // New K/V rounded to half, as the cache will hold them.
  std::vector<uint16_t> kh(static_cast<size_t>(M * kvw)), vh(static_cast<size_t>(M * kvw));
  for (int64_t i = 0; i < M * kvw; ++i) {
    kh[i] = fp32_to_fp16(k_new[i]);
    vh[i] = fp32_to_fp16(v_new[i]);
  }

  const int64_t n_tasks = M * a.n_heads;
  pool.run([&](int ith, int nth) {
    auto [t0, t1] = ThreadPool::split(n_tasks, ith, nth);
    std::vector<float> scores;
    std::vector<float> kf(static_cast<size_t>(hd)), acc(static_cast<size_t>(hd));
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t m = task / a.n_heads, h = task % a.n_heads, g = h / group;
      const int32_t b = static_cast<int32_t>(m / a.T);
      const int64_t t = m % a.T;
      const int32_t row = a.rows[b];
      const int64_t base = cache.length(row);
      const int64_t p = base + t;
      const int64_t lo = a.window > 0 ? std::max<int64_t>(0, p - a.window + 1) : 0;
      const int64_t n_keys = p - lo + 1;
      scores.resize(static_cast<size_t>(n_keys));
      const float* qv = q + (m * a.n_heads + h) * hd;
      auto key_ptr = [&](int64_t j) -> const uint16_t* {
        if (j < base) return cache.k(a.layer, row, j) + g * hd;
        return kh.data() + ((static_cast<int64_t>(b) * a.T + (j - base)) * kvw + g * hd);
      };
      auto val_ptr = [&](int64_t j) -> const uint16_t* {
        if (j < base) return cache.v(a.layer, row, j) + g * hd;
        return vh.data() + ((static_cast<int64_t>(b) * a.T + (j - base)) * kvw + g * hd);
      };
      float mx = -INFINITY;
      for (int64_t j = lo; j <= p; ++j) {
        const uint16_t* kp = key_ptr(j);
        float s = 0.0f;
        for (int64_t d = 0; d < hd; ++d) s += qv[d] * h2f[kp[d]];
        s *= a.scale;
        scores[j - lo] = s;
        mx = std::max(mx, s);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < n_keys; ++j) {
        scores[j] = std::exp(scores[j] - mx);
        sum += scores[j];
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = lo; j <= p; ++j) {
        const uint16_t* vp = val_ptr(j);
        const float w = scores[j - lo];
        for (int64_t d = 0; d < hd; ++d) acc[d] += w * h2f[vp[d]];
      }
      float* o = out + (m * a.n_heads + h) * hd;
      const float inv = 1.0f / sum;
      for (int64_t d = 0; d < hd; ++d) o[d] = acc[d] * inv;
    }
  });
}

}  // namespace specula
