// model/attention.cpp — see attention.h.
//
// Work is split by (batch row, kv head): the queries that read one kv head — the
// group's query heads for each of the row's new tokens — walk its keys and values
// together, so each half K/V row is loaded and converted once for all of them
// (KernelTable::dot_f16_f32_multi / axpy_f16_f32_multi). Per query the operations are
// exactly those of a lone query (same dot, same softmax, same V accumulation order), so
// results do not depend on how queries are grouped, the batch, or the thread count.
#include "model/attention.h"

#include <algorithm>
#include <cmath>

#include "core/fp16.h"
#include "specula/status.h"

namespace specula {
namespace {

constexpr int64_t kQueryBlock = 32;  // queries processed together (bounds the scores buffer)

struct Query {
  int64_t m = 0, h = 0;  // token index in the step, query head
  int64_t lo = 0, p = 0; // keys [lo, p]
};

}  // namespace

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

  // Tasks: (batch row b, kv head g, block of that pair's queries). Rows are found from
  // token_row (tokens are packed row after row).
  struct Task {
    int32_t b;
    int64_t g, q0, q1;  // queries [q0, q1) of the pair, numbered t * group + (h - g * group)
  };
  std::vector<Task> tasks;
  {
    const int64_t n_pairs_min = std::max<int64_t>(1, a.n_kv_heads);
    const int64_t want = 2 * static_cast<int64_t>(pool.n_threads());  // enough tasks for every thread
    for (int64_t m0 = 0; m0 < M;) {
      const int32_t b = a.token_row[m0];
      SPECULA_CHECK(a.offset[b] == m0);  // tokens are packed row after row
      int64_t m1 = m0;
      while (m1 < M && a.token_row[m1] == b) ++m1;
      const int64_t nq = (m1 - m0) * group;
      const int64_t split = std::max<int64_t>(1, std::min<int64_t>(nq, (want + n_pairs_min - 1) / n_pairs_min));
      const int64_t per = std::min<int64_t>(kQueryBlock, (nq + split - 1) / split);
      for (int64_t g = 0; g < a.n_kv_heads; ++g)
        for (int64_t q0 = 0; q0 < nq; q0 += per) tasks.push_back(Task{b, g, q0, std::min(nq, q0 + per)});
      m0 = m1;
    }
  }

  // (thread_local names inside the job would bind to each worker's own instance)
  const uint16_t* kh_ptr = kh.data();
  const uint16_t* vh_ptr = vh.data();
  const int64_t n_tasks = static_cast<int64_t>(tasks.size());
  pool.run([&](int ith, int nth) {
    auto [t0, t1] = ThreadPool::split(n_tasks, ith, nth);
    thread_local std::vector<float> qs, scores, acc, sbuf, pbuf;
    thread_local std::vector<const float*> qptr;
    thread_local std::vector<float*> aptr;
    thread_local std::vector<Query> qv;
    thread_local std::vector<int64_t> live;
    for (int64_t ti = t0; ti < t1; ++ti) {
      const Task& task = tasks[static_cast<size_t>(ti)];
      const int32_t b = task.b;
      const int32_t row = a.rows[b];
      const int64_t base = cache.length(row);
      const int64_t off = a.offset[b];
      const int64_t g = task.g;
      const int64_t nq = task.q1 - task.q0;
      qv.resize(static_cast<size_t>(nq));
      qs.resize(static_cast<size_t>(nq * hd));
      acc.assign(static_cast<size_t>(nq * hd), 0.0f);
      int64_t jlo = INT64_MAX, jhi = -1;
      for (int64_t i = 0; i < nq; ++i) {
        const int64_t qi = task.q0 + i;
        Query& qq = qv[i];
        const int64_t t = qi / group;
        qq.m = off + t;
        qq.h = g * group + qi % group;
        qq.p = base + t;
        qq.lo = a.window > 0 ? std::max<int64_t>(0, qq.p - a.window + 1) : 0;
        jlo = std::min(jlo, qq.lo);
        jhi = std::max(jhi, qq.p);
        // The scaled query is rounded to half, like the cache's keys (llama.cpp's K·Q
        // product runs in half too), then the dot accumulates in f32.
        const float* qsrc = q + (qq.m * a.n_heads + qq.h) * hd;
        float* qd = qs.data() + i * hd;
        for (int64_t d = 0; d < hd; ++d) qd[d] = fp16_to_fp32(fp32_to_fp16(qsrc[d] * a.scale));
      }
      const int64_t span = jhi - jlo + 1;
      scores.resize(static_cast<size_t>(nq * span));
      auto key_ptr = [&](int64_t j) -> const uint16_t* {
        if (j < base) return cache.k(a.layer, row, j) + g * hd;
        return kh_ptr + ((off + (j - base)) * kvw + g * hd);
      };
      auto val_ptr = [&](int64_t j) -> const uint16_t* {
        if (j < base) return cache.v(a.layer, row, j) + g * hd;
        return vh_ptr + ((off + (j - base)) * kvw + g * hd);
      };
      // Scores: scores[i * span + (j - jlo)] for the keys query i sees.
      qptr.resize(static_cast<size_t>(nq));
      live.resize(static_cast<size_t>(nq));
      sbuf.resize(static_cast<size_t>(nq));
      for (int64_t j = jlo; j <= jhi; ++j) {
        int64_t n_live = 0;
        for (int64_t i = 0; i < nq; ++i) {
          if (j < qv[i].lo || j > qv[i].p) continue;
          live[n_live] = i;
          qptr[n_live] = qs.data() + i * hd;
          ++n_live;
        }
        if (n_live == 0) continue;
        kt.dot_f16_f32_multi(hd, key_ptr(j), n_live, qptr.data(), sbuf.data());
        for (int64_t k = 0; k < n_live; ++k) scores[live[k] * span + (j - jlo)] = sbuf[k];
      }
      // Softmax per query over its own keys; probabilities rounded to half before
      // weighting V (as llama.cpp's V·softmax product does), accumulation stays f32.
      pbuf.resize(static_cast<size_t>(nq));
      thread_local std::vector<float> inv;
      inv.resize(static_cast<size_t>(nq));
      for (int64_t i = 0; i < nq; ++i) {
        float* s = scores.data() + i * span + (qv[i].lo - jlo);
        const int64_t n_keys = qv[i].p - qv[i].lo + 1;
        float mx = -INFINITY;
        for (int64_t k = 0; k < n_keys; ++k) mx = std::max(mx, s[k]);
        inv[i] = 1.0f / kt.exp_sub_sum(n_keys, mx, s);
      }
      aptr.resize(static_cast<size_t>(nq));
      for (int64_t j = jlo; j <= jhi; ++j) {
        int64_t n_live = 0;
        for (int64_t i = 0; i < nq; ++i) {
          if (j < qv[i].lo || j > qv[i].p) continue;
          pbuf[n_live] = fp16_to_fp32(fp32_to_fp16(scores[i * span + (j - jlo)] * inv[i]));
          aptr[n_live] = acc.data() + i * hd;
          ++n_live;
        }
        if (n_live == 0) continue;
        kt.axpy_f16_f32_multi(hd, pbuf.data(), val_ptr(j), n_live, aptr.data());
      }
      for (int64_t i = 0; i < nq; ++i)
        std::copy(acc.data() + i * hd, acc.data() + (i + 1) * hd, out + (qv[i].m * a.n_heads + qv[i].h) * hd);
    }
  });
}

}  // namespace specula
