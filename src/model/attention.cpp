// model/attention.cpp — see attention.h.
#include "model/attention.h"

#include <algorithm>
#include <cmath>

#include "core/fp16.h"

namespace specula {

void attention(ThreadPool& pool, const AttentionArgs& a, const KvCache& cache, const float* q,
               const float* k_new, const float* v_new, float* out) {
  const int64_t hd = a.head_dim;
  const int64_t kvw = a.n_kv_heads * hd;
  const int64_t group = a.n_heads / a.n_kv_heads;
  const int64_t M = a.M;
  const kernels::KernelTable& kt = *a.kt;

  // New K/V rounded to half, as the cache will hold them.
  thread_local std::vector<uint16_t> kh, vh;
  kh.resize(static_cast<size_t>(M * kvw));
  vh.resize(static_cast<size_t>(M * kvw));
  for (int64_t i = 0; i < M * kvw; ++i) {
    kh[i] = fp32_to_fp16(k_new[i]);
    vh[i] = fp32_to_fp16(v_new[i]);
  }

  // (thread_local names inside the job would bind to each worker's own instance)
  const uint16_t* kh_ptr = kh.data();
  const uint16_t* vh_ptr = vh.data();
  const int64_t n_tasks = M * a.n_heads;
  pool.run([&](int ith, int nth) {
    auto [t0, t1] = ThreadPool::split(n_tasks, ith, nth);
    thread_local std::vector<float> scores, acc, qs;
    acc.resize(static_cast<size_t>(hd));
    qs.resize(static_cast<size_t>(hd));
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t m = task / a.n_heads, h = task % a.n_heads, g = h / group;
      const int32_t b = a.token_row[m];
      const int64_t t = m - a.offset[b];
      const int32_t row = a.rows[b];
      const int64_t base = cache.length(row);
      const int64_t p = base + t;
      const int64_t lo = a.window > 0 ? std::max<int64_t>(0, p - a.window + 1) : 0;
      const int64_t n_keys = p - lo + 1;
      scores.resize(static_cast<size_t>(n_keys));
      // The scaled query is rounded to half, like the cache's keys (llama.cpp's
      // K·Q product runs in half too), then the dot accumulates in f32.
      const float* qsrc = q + (m * a.n_heads + h) * hd;
      for (int64_t d = 0; d < hd; ++d) qs[d] = fp16_to_fp32(fp32_to_fp16(qsrc[d] * a.scale));
      const float* qv = qs.data();
      auto key_ptr = [&](int64_t j) -> const uint16_t* {
        if (j < base) return cache.k(a.layer, row, j) + g * hd;
        return kh_ptr + ((a.offset[b] + (j - base)) * kvw + g * hd);
      };
      auto val_ptr = [&](int64_t j) -> const uint16_t* {
        if (j < base) return cache.v(a.layer, row, j) + g * hd;
        return vh_ptr + ((a.offset[b] + (j - base)) * kvw + g * hd);
      };
      float mx = -INFINITY;
      for (int64_t j = lo; j <= p; ++j) {
        const uint16_t* kp = key_ptr(j);
        const float s = kt.dot_f16_f32(hd, kp, qv);
        scores[j - lo] = s;
        mx = std::max(mx, s);
      }
      const float sum = kt.exp_sub_sum(n_keys, mx, scores.data());
      const float inv = 1.0f / sum;
      // Probabilities are rounded to half before weighting V (as llama.cpp's V·softmax
      // product does), accumulation stays f32.
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = lo; j <= p; ++j) {
        const float pj = fp16_to_fp32(fp32_to_fp16(scores[j - lo] * inv));
        kt.axpy_f16_f32(hd, pj, val_ptr(j), acc.data());
      }
      float* o = out + (m * a.n_heads + h) * hd;
      for (int64_t d = 0; d < hd; ++d) o[d] = acc[d];
    }
  });
}

}  // namespace specula
