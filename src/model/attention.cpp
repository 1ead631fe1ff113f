// model/attention.cpp — see attention.h.
//
// Work is split by (batch row, kv head): the queries that read one kv head — the
// group's query heads for each of the row's new tokens — walk its keys and values
// together, so each stored K/V vector is decoded once for all of them. With one storage
// tier (no delayed quantization) keys go in blocks of 16 (qk_rows16) and
// values in blocks of 64 (pv_f32_rows), accumulators in registers; with two tiers key
// by key (dot_f32_multi / axpy_f32_multi). Per query the operations are exactly those
// of a lone query (same dot chain, same softmax, same V accumulation order), so results
// do not depend on how queries are grouped, the batch, or the thread count.
// With delayed quantization a key is decoded from the f16 tier for the queries within
// `delay` positions of it and from the quantized tier for the others (two calls).
#include "model/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/fp16.h"
#include "specula/status.h"

namespace specula {
namespace {

constexpr int64_t kQueryBlock = 64;  // queries processed together (bounds the scores buffer)
constexpr int64_t kKeyBlock = 64;    // value rows decoded together for the P·V product
constexpr int64_t kScoresMax = int64_t{1} << 21;  // floats of one task's scores (8 MiB)

struct Query {
  int64_t m = 0, h = 0;   // token index in the step, query head
  int64_t lo = 0, p = 0;  // keys [lo, p]
};

}  // namespace

void attention(ThreadPool& pool, const AttentionArgs& a, StateRows& state, const float* q, const float* k_new,
               const float* v_new, float* out, AttentionScratch& scratch) {
  const KvLayout* L = state.layout_as<KvLayout>(a.layer);
  SPECULA_CHECK(L != nullptr);
  SPECULA_CHECK(L->spec().n_kv_heads == a.n_kv_heads && L->spec().head_dim_k == a.head_dim &&
                L->spec().head_dim_v == a.head_dim);
  const int64_t hd = a.head_dim;
  const int64_t group = a.n_heads / a.n_kv_heads;
  const int64_t M = a.M;
  const int64_t window = L->spec().window;
  const kernels::KernelTable& kt = *a.kt;

  // Stage the new K/V in the layout's formats; one read view per batch row.
  L->encode(pool, k_new, v_new, M, scratch.stage);
  scratch.views.resize(static_cast<size_t>(a.B));
  scratch.layer_rows.resize(static_cast<size_t>(a.B));
  for (int32_t b = 0; b < a.B; ++b) {
    scratch.layer_rows[b] = &state.layer_row(a.rows[b], a.layer);
    scratch.views[b] = L->view(*scratch.layer_rows[b], scratch.stage, a.offset[b], a.offset[b + 1] - a.offset[b]);
    SPECULA_CHECK(scratch.views[b].base == state.length(a.rows[b]));
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
      // The scores buffer holds queries x keys: fewer queries per task at long contexts
      // (at most kScoresMax floats per thread whatever the context).
      const int64_t keys = scratch.views[b].base + (m1 - m0);
      const int64_t cap = std::max<int64_t>(8, kScoresMax / std::max<int64_t>(1, keys));
      const int64_t per = std::min({kQueryBlock, cap, (nq + split - 1) / split});
      for (int64_t g = 0; g < a.n_kv_heads; ++g)
        for (int64_t q0 = 0; q0 < nq; q0 += per) tasks.push_back(Task{b, g, q0, std::min(nq, q0 + per)});
      m0 = m1;
    }
  }

  const KvRowView* views = scratch.views.data();
  const int64_t n_tasks = static_cast<int64_t>(tasks.size());
  // Tasks are taken dynamically (causal tasks differ in cost); a task's result does not
  // depend on the thread that runs it.
  std::atomic<int64_t> next_task{0};
  pool.run([&](int, int) {
    thread_local std::vector<float> qs, scores, acc, sbuf, pbuf, inv, kvbuf, vblock, ktbuf, sblk;
    thread_local std::vector<const float*> qptr;
    thread_local std::vector<float*> aptr;
    thread_local std::vector<Query> qv;
    thread_local std::vector<int64_t> live, k0, k1;
    kvbuf.resize(static_cast<size_t>(hd));
    for (;;) {
      const int64_t ti = next_task.fetch_add(1, std::memory_order_relaxed);
      if (ti >= n_tasks) break;
      const Task& task = tasks[static_cast<size_t>(ti)];
      const KvRowView& vw = views[task.b];
      const int64_t base = vw.base;
      const int64_t off = a.offset[task.b];
      const int64_t g = task.g;
      const int64_t nq = task.q1 - task.q0;
      const KvCodec& kc = *vw.k_codec;
      const KvCodec& vc = *vw.v_codec;
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
        qq.lo = window > 0 ? std::max<int64_t>(0, qq.p - window + 1) : 0;
        jlo = std::min(jlo, qq.lo);
        jhi = std::max(jhi, qq.p);
        // The scaled query (in the keys' storage basis) is rounded to half, like an f16
        // cache's keys (llama.cpp's K·Q product runs in half too); the dot accumulates in f32.
        const float* qsrc = q + (qq.m * a.n_heads + qq.h) * hd;
        float* qd = qs.data() + i * hd;
        for (int64_t d = 0; d < hd; ++d) qd[d] = qsrc[d] * a.scale;
        if (vw.key_scale != nullptr)
          for (int64_t d = 0; d < hd; ++d) qd[d] *= vw.key_scale[g * hd + d];
        kc.to_storage_basis(qd);
        for (int64_t d = 0; d < hd; ++d) qd[d] = fp16_to_fp32(fp32_to_fp16(qd[d]));
      }
      // The window never reaches overwritten ring slots.
      SPECULA_CHECK(jlo >= vw.lo || jlo >= base);
      const int64_t span = jhi - jlo + 1;
      scores.resize(static_cast<size_t>(nq * span));
      qptr.resize(static_cast<size_t>(nq));
      aptr.resize(static_cast<size_t>(nq));
      live.resize(static_cast<size_t>(nq));
      sbuf.resize(static_cast<size_t>(nq));
      pbuf.resize(static_cast<size_t>(nq));
      inv.resize(static_cast<size_t>(nq));

      // Scores: scores[i * span + (j - jlo)] for the keys query i sees. With a delay, the
      // queries in `live` are split: [0, n_rec) see key j within `delay` positions and
      // read the f16 tier, [n_rec, n_live) read the quantized tier (queries are in
      // position order, so the ones closest to j come first).
      if (vw.delay == 0) {
        // One key tier: blocks of 16 decoded keys against every query that sees one of
        // them (qk_rows16: bitwise the per-key dot_f32_multi).
        ktbuf.resize(static_cast<size_t>(16 * hd));
        sblk.resize(static_cast<size_t>(16 * nq));
        for (int64_t jb = jlo; jb <= jhi; jb += 16) {
          const int64_t je = std::min(jhi + 1, jb + 16);
          for (int64_t j = jb; j < je; ++j) kc.decode(vw.k.at(j, base, g), ktbuf.data() + (j - jb) * hd);
          int64_t n_live = 0;
          for (int64_t i = 0; i < nq; ++i) {
            if (qv[i].p < jb || qv[i].lo >= je) continue;
            live[n_live] = i;
            qptr[n_live] = qs.data() + i * hd;
            aptr[n_live] = sblk.data() + n_live * 16;
            ++n_live;
          }
          if (n_live == 0) continue;
          kt.qk_rows16(hd, ktbuf.data(), je - jb, n_live, qptr.data(), aptr.data());
          for (int64_t k = 0; k < n_live; ++k) {
            const Query& qq = qv[live[k]];
            const int64_t kb = std::max(qq.lo, jb), ke = std::min(qq.p + 1, je);
            std::copy(aptr[k] + (kb - jb), aptr[k] + (ke - jb), scores.data() + live[k] * span + (kb - jlo));
          }
        }
      }
      for (int64_t j = jlo; j <= jhi && vw.delay > 0; ++j) {
        int64_t n_live = 0, n_rec = 0;
        for (int64_t i = 0; i < nq; ++i) {
          if (j < qv[i].lo || j > qv[i].p) continue;
          if (qv[i].p - j < vw.delay) ++n_rec;
          live[n_live] = i;
          qptr[n_live] = qs.data() + i * hd;
          ++n_live;
        }
        if (n_live == 0) continue;
        if (n_rec > 0) {
          vw.k_recent_codec->decode(vw.k_recent.at(j, base, g), kvbuf.data());
          kt.dot_f32_multi(hd, kvbuf.data(), n_rec, qptr.data(), sbuf.data());
        }
        if (n_live > n_rec) {
          kc.decode(vw.k.at(j, base, g), kvbuf.data());
          kt.dot_f32_multi(hd, kvbuf.data(), n_live - n_rec, qptr.data() + n_rec, sbuf.data() + n_rec);
        }
        for (int64_t k = 0; k < n_live; ++k) scores[live[k] * span + (j - jlo)] = sbuf[k];
      }
      // Softmax per query over its own keys; probabilities rounded to half before
      // weighting V (as llama.cpp's V·softmax product does), accumulation stays f32.
      for (int64_t i = 0; i < nq; ++i) {
        float* s = scores.data() + i * span + (qv[i].lo - jlo);
        const int64_t n_keys = qv[i].p - qv[i].lo + 1;
        if (a.softcap > 0.0f)
          for (int64_t k = 0; k < n_keys; ++k) s[k] = a.softcap * std::tanh(s[k] / a.softcap);
        float mx = -INFINITY;
        for (int64_t k = 0; k < n_keys; ++k) mx = std::max(mx, s[k]);
        inv[i] = 1.0f / kt.exp_sub_sum(n_keys, mx, s);
      }
      if (vw.delay == 0) {
        // One value tier: blocks of kKeyBlock decoded value rows, each query's
        // accumulator held in registers across the block (pv_f32_rows: bitwise the
        // per-key axpy below). Probabilities in place of the scores.
        for (int64_t i = 0; i < nq; ++i) {
          float* s = scores.data() + i * span + (qv[i].lo - jlo);
          const int64_t n_keys = qv[i].p - qv[i].lo + 1;
          kt.scale_round_f16(n_keys, inv[i], s);
        }
        vblock.resize(static_cast<size_t>(kKeyBlock * hd));
        k0.resize(static_cast<size_t>(nq));
        k1.resize(static_cast<size_t>(nq));
        for (int64_t jb = jlo; jb <= jhi; jb += kKeyBlock) {
          const int64_t je = std::min(jhi + 1, jb + kKeyBlock);
          for (int64_t j = jb; j < je; ++j) vc.decode(vw.v.at(j, base, g), vblock.data() + (j - jb) * hd);
          int64_t n_live = 0;
          for (int64_t i = 0; i < nq; ++i) {
            const int64_t kb = std::max(qv[i].lo, jb), ke = std::min(qv[i].p + 1, je);
            if (ke <= kb) continue;
            k0[n_live] = kb - jb;
            k1[n_live] = ke - jb;
            qptr[n_live] = scores.data() + i * span + (kb - jlo);
            aptr[n_live] = acc.data() + i * hd;
            ++n_live;
          }
          if (n_live > 0) kt.pv_f32_rows(hd, vblock.data(), hd, n_live, qptr.data(), k0.data(), k1.data(), aptr.data());
        }
      }
      for (int64_t j = jlo; j <= jhi && vw.delay > 0; ++j) {
        int64_t n_live = 0, n_rec = 0;
        for (int64_t i = 0; i < nq; ++i) {
          if (j < qv[i].lo || j > qv[i].p) continue;
          if (qv[i].p - j < vw.delay) ++n_rec;
          pbuf[n_live] = fp16_to_fp32(fp32_to_fp16(scores[i * span + (j - jlo)] * inv[i]));
          aptr[n_live] = acc.data() + i * hd;
          ++n_live;
        }
        if (n_live == 0) continue;
        if (n_rec > 0) {
          vw.v_recent_codec->decode(vw.v_recent.at(j, base, g), kvbuf.data());
          kt.axpy_f32_multi(hd, pbuf.data(), kvbuf.data(), n_rec, aptr.data());
        }
        if (n_live > n_rec) {
          vc.decode(vw.v.at(j, base, g), kvbuf.data());
          kt.axpy_f32_multi(hd, pbuf.data() + n_rec, kvbuf.data(), n_live - n_rec, aptr.data() + n_rec);
        }
      }
      for (int64_t i = 0; i < nq; ++i) {
        float* ai = acc.data() + i * hd;
        vc.from_storage_basis(ai);
        if (vw.value_offset != nullptr)
          for (int64_t d = 0; d < hd; ++d) ai[d] += vw.value_offset[g * hd + d];
        std::copy(ai, ai + hd, out + (qv[i].m * a.n_heads + qv[i].h) * hd);
      }
    }
  });

  // The step's positions join each row's stored state.
  for (int32_t b = 0; b < a.B; ++b)
    L->commit(*scratch.layer_rows[b], scratch.stage, a.offset[b], a.offset[b + 1] - a.offset[b]);
}

}  // namespace specula
