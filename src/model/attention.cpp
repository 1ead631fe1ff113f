// model/attention.cpp — see attention.h.
//
// Work is split by (batch row, kv head): the queries that read one kv head — the
// group's query heads for each of the row's new tokens — walk its keys and values
// together, so each stored K/V vector is decoded once for all of them. With one storage
// tier (no delayed quantization) keys go in blocks of 16 (qk_rows16) and
// values in blocks of 16 KiB (pv_f32_rows), accumulators in registers; with two tiers key
// by key (dot_f32_multi / axpy_f32_multi). Per query the operations are exactly those
// of a lone query (same dot chain, same softmax, same V accumulation order), so results
// do not depend on how queries are grouped, the batch, or the thread count.
// With fewer (row, kv head) pairs than threads and a long span of keys (decode at a long
// context), all threads share each pair instead: keys split for the scores (a score is
// one key's dot), queries for the softmax, head_dim for the P·V product (an output
// element's chain over the keys stays whole) — the same operations, so the same bits.
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
constexpr int64_t kBlockFloats = 4096;  // a block of decoded value rows: 16 KiB, stays in L1
constexpr int64_t kScoresMax = int64_t{1} << 21;  // floats of one task's scores (8 MiB)
constexpr int64_t kSplitMinKeys = 256;  // fewer keys: a pair's work is too small to share
constexpr int64_t kPrefetchKeys = 16;   // keys ahead whose stored vectors are prefetched

struct Query {
  int64_t m = 0, h = 0;   // token index in the step, query head
  int64_t lo = 0, p = 0;  // keys [lo, p]
};

// Per-thread buffers (grow only).
struct ThreadBufs {
  std::vector<float> qs, scores, acc, sbuf, pbuf, inv, kvbuf, vblock, ktbuf, sblk;
  std::vector<const float*> qptr;
  std::vector<float*> aptr;
  std::vector<Query> qv;
  std::vector<int64_t> live, k0, k1;
};

ThreadBufs& thread_bufs() {
  thread_local ThreadBufs tb;
  return tb;
}

// The queries of one (batch row, kv head) pair, numbered t * group + (h - g * group).
struct Pair {
  const AttentionArgs* a = nullptr;
  const KvRowView* vw = nullptr;
  const float* q = nullptr;  // all queries of the step [M, n_heads, head_dim]
  int64_t off = 0, g = 0, group = 0, hd = 0, window = 0;

  // Query qi's token, head and key range; with qd, its scaled query (in the keys' storage
  // basis) rounded to half, like an f16 cache's keys (llama.cpp's K·Q product runs in half
  // too); the dot accumulates in f32.
  void query(int64_t qi, Query& qq, float* qd) const {
    const int64_t t = qi / group;
    qq.m = off + t;
    qq.h = g * group + qi % group;
    qq.p = vw->base + t;
    qq.lo = window > 0 ? std::max<int64_t>(0, qq.p - window + 1) : 0;
    if (qd == nullptr) return;
    const float* qsrc = q + (qq.m * a->n_heads + qq.h) * hd;
    for (int64_t d = 0; d < hd; ++d) qd[d] = qsrc[d] * a->scale;
    if (vw->key_scale != nullptr)
      for (int64_t d = 0; d < hd; ++d) qd[d] *= vw->key_scale[g * hd + d];
    vw->k_codec->to_storage_basis(qd);
    for (int64_t d = 0; d < hd; ++d) qd[d] = fp16_to_fp32(fp32_to_fp16(qd[d]));
  }

  // Asks the memory system for the stored vectors of kv head g at positions [j0, j1) (the
  // next block's, while this one is computed: at long contexts the K/V reads are a
  // stream from DRAM that the hardware prefetcher does not run far enough ahead of).
  void prefetch_rows(const KvTierView& t, int64_t j0, int64_t j1) const {
    for (int64_t j = j0; j < j1; ++j) {
      const uint8_t* p = t.at(j, vw->base, g);
      for (size_t o = 0; o < t.head_bytes; o += 64) __builtin_prefetch(p + o);
    }
  }

  // One key tier: scores[i * span + (j - jlo)] of keys j in [j0, j1), blocks of 16 decoded
  // keys from j0 against every query that sees one of them (qk_rows16: bitwise the per-key
  // dot_f32_multi, so neither the blocks nor the range change a score).
  void score_keys(const Query* qv, const float* qs, int64_t nq, int64_t jlo, int64_t span, int64_t j0, int64_t j1,
                  float* scores, ThreadBufs& tb) const {
    const kernels::KernelTable& kt = *a->kt;
    tb.ktbuf.resize(static_cast<size_t>(16 * hd));
    tb.sblk.resize(static_cast<size_t>(16 * nq));
    tb.live.resize(static_cast<size_t>(nq));
    tb.qptr.resize(static_cast<size_t>(nq));
    tb.aptr.resize(static_cast<size_t>(nq));
    for (int64_t jb = j0; jb < j1; jb += 16) {
      const int64_t je = std::min(j1, jb + 16);
      prefetch_rows(vw->k, jb + kPrefetchKeys, std::min(j1, je + kPrefetchKeys));
      for (int64_t j = jb; j < je; ++j) vw->k_codec->decode(vw->k.at(j, vw->base, g), tb.ktbuf.data() + (j - jb) * hd);
      int64_t n_live = 0;
      for (int64_t i = 0; i < nq; ++i) {
        if (qv[i].p < jb || qv[i].lo >= je) continue;
        tb.live[n_live] = i;
        tb.qptr[n_live] = qs + i * hd;
        tb.aptr[n_live] = tb.sblk.data() + n_live * 16;
        ++n_live;
      }
      if (n_live == 0) continue;
      kt.qk_rows16(hd, tb.ktbuf.data(), je - jb, n_live, tb.qptr.data(), tb.aptr.data());
      for (int64_t k = 0; k < n_live; ++k) {
        const Query& qq = qv[tb.live[k]];
        const int64_t kb = std::max(qq.lo, jb), ke = std::min(qq.p + 1, je);
        std::copy(tb.aptr[k] + (kb - jb), tb.aptr[k] + (ke - jb), scores + tb.live[k] * span + (kb - jlo));
      }
    }
  }

  // Softmax of query qq's scores in place (soft-capped first); returns 1 / their sum.
  float softmax(const Query& qq, float* row, int64_t jlo) const {
    float* s = row + (qq.lo - jlo);
    const int64_t n_keys = qq.p - qq.lo + 1;
    if (a->softcap > 0.0f)
      for (int64_t k = 0; k < n_keys; ++k) s[k] = a->softcap * std::tanh(s[k] / a->softcap);
    float mx = -INFINITY;
    for (int64_t k = 0; k < n_keys; ++k) mx = std::max(mx, s[k]);
    return 1.0f / a->kt->exp_sub_sum(n_keys, mx, s);
  }

  // One value tier: acc[i * hd + d] += Σ_j probs[i * span + (j - jlo)] · v_j[d] for d in
  // [d0, d1), blocks of decoded value rows (kBlockFloats) with each query's accumulator held in
  // registers across the block (pv_f32_rows: bitwise the per-key axpy in key order; each
  // element's chain is its own, so splitting [0, hd) does not change it).
  void weight_values(const Query* qv, int64_t nq, int64_t jlo, int64_t jhi, int64_t span, const float* probs,
                     float* acc, int64_t d0, int64_t d1, ThreadBufs& tb) const {
    const int64_t w = d1 - d0;
    const int64_t rows = std::clamp<int64_t>(kBlockFloats / w, 8, 64);
    tb.vblock.resize(static_cast<size_t>(rows * w));
    tb.k0.resize(static_cast<size_t>(nq));
    tb.k1.resize(static_cast<size_t>(nq));
    tb.qptr.resize(static_cast<size_t>(nq));
    tb.aptr.resize(static_cast<size_t>(nq));
    const KvCodec& vc = *vw->v_codec;
    for (int64_t jb = jlo; jb <= jhi; jb += rows) {
      const int64_t je = std::min(jhi + 1, jb + rows);
      prefetch_rows(vw->v, je, std::min(jhi + 1, je + rows));
      for (int64_t j = jb; j < je; ++j) {
        float* dst = tb.vblock.data() + (j - jb) * w;
        if (w == hd)
          vc.decode(vw->v.at(j, vw->base, g), dst);
        else
          vc.decode_range(vw->v.at(j, vw->base, g), d0, d1, dst);
      }
      int64_t n_live = 0;
      for (int64_t i = 0; i < nq; ++i) {
        const int64_t kb = std::max(qv[i].lo, jb), ke = std::min(qv[i].p + 1, je);
        if (ke <= kb) continue;
        tb.k0[n_live] = kb - jb;
        tb.k1[n_live] = ke - jb;
        tb.qptr[n_live] = probs + i * span + (kb - jlo);
        tb.aptr[n_live] = acc + i * hd + d0;
        ++n_live;
      }
      if (n_live > 0)
        a->kt->pv_f32_rows(w, tb.vblock.data(), w, n_live, tb.qptr.data(), tb.k0.data(), tb.k1.data(), tb.aptr.data());
    }
  }

  // acc [hd] (storage basis) -> the query's output row.
  void finish(const Query& qq, float* acc, float* out) const {
    vw->v_codec->from_storage_basis(acc);
    if (vw->value_offset != nullptr)
      for (int64_t d = 0; d < hd; ++d) acc[d] += vw->value_offset[g * hd + d];
    std::copy(acc, acc + hd, out + (qq.m * a->n_heads + qq.h) * hd);
  }
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
  const int nth = pool.n_threads();

  // Stage the new K/V in the layout's formats; one read view per batch row.
  L->encode(pool, k_new, v_new, M, scratch.stage);
  scratch.views.resize(static_cast<size_t>(a.B));
  scratch.layer_rows.resize(static_cast<size_t>(a.B));
  for (int32_t b = 0; b < a.B; ++b) {
    scratch.layer_rows[b] = &state.layer_row(a.rows[b], a.layer);
    scratch.views[b] = L->view(*scratch.layer_rows[b], scratch.stage, a.offset[b], a.offset[b + 1] - a.offset[b]);
    SPECULA_CHECK(scratch.views[b].base == state.length(a.rows[b]));
  }
  const KvRowView* views = scratch.views.data();
  const auto pair_of = [&](int32_t b, int64_t g) {
    Pair pr;
    pr.a = &a;
    pr.vw = &views[b];
    pr.q = q;
    pr.off = a.offset[b];
    pr.g = g;
    pr.group = group;
    pr.hd = hd;
    pr.window = window;
    return pr;
  };
  // Keys a row's queries span (the oldest the first query sees to the newest).
  const auto span_of = [&](int32_t b) {
    const int64_t T = a.offset[b + 1] - a.offset[b], base = views[b].base;
    return window > 0 ? std::min(base + T, window + T - 1) : base + T;
  };

  // Fewer (row, kv head) pairs than threads, one key tier, a long span (decode at a long
  // context): every thread works on each pair in turn — keys split for the scores, queries
  // for the softmax, head_dim for the P·V product — so each stored vector is decoded once.
  // Every value is computed by the same operations as in a task of its own below (which
  // also runs on one thread), so the two ways give the same bits.
  bool split_keys = nth > 1 && static_cast<int64_t>(a.B) * a.n_kv_heads < nth;
  for (int32_t b = 0; b < a.B && split_keys; ++b) {
    const int64_t nq = (a.offset[b + 1] - a.offset[b]) * group, span = span_of(b);
    split_keys = views[b].delay == 0 && nq <= kQueryBlock && span >= kSplitMinKeys && nq * span <= kScoresMax;
    // The window never reaches overwritten ring slots (checked here: nothing may throw
    // between the barriers below).
    const int64_t lo0 = window > 0 ? std::max<int64_t>(0, views[b].base - window + 1) : 0;
    SPECULA_CHECK(lo0 >= views[b].lo || lo0 >= views[b].base);
  }
  if (split_keys) {
    int64_t max_q = 0, max_s = 0;
    for (int32_t b = 0; b < a.B; ++b) {
      const int64_t nq = (a.offset[b + 1] - a.offset[b]) * group;
      max_q = std::max(max_q, nq);
      max_s = std::max(max_s, nq * span_of(b));
    }
    scratch.qs.resize(static_cast<size_t>(max_q * hd));
    scratch.acc.resize(static_cast<size_t>(max_q * hd));
    scratch.scores.resize(static_cast<size_t>(max_s));
    float* qs = scratch.qs.data();
    float* acc = scratch.acc.data();
    float* scores = scratch.scores.data();
    SpinBarrier barrier;
    pool.run([&](int ith, int n_th) {
      ThreadBufs& tb = thread_bufs();
      for (int32_t b = 0; b < a.B; ++b)
        for (int64_t g = 0; g < a.n_kv_heads; ++g) {
          const Pair pr = pair_of(b, g);
          const int64_t nq = (a.offset[b + 1] - a.offset[b]) * group;
          tb.qv.resize(static_cast<size_t>(nq));
          int64_t jlo = INT64_MAX, jhi = -1;
          const auto [i0, i1] = ThreadPool::split(nq, ith, n_th);
          for (int64_t i = 0; i < nq; ++i) {
            pr.query(i, tb.qv[i], i >= i0 && i < i1 ? qs + i * hd : nullptr);
            jlo = std::min(jlo, tb.qv[i].lo);
            jhi = std::max(jhi, tb.qv[i].p);
          }
          const int64_t span = jhi - jlo + 1;
          barrier.wait(n_th);  // queries ready
          const auto [c0, c1] = ThreadPool::split((span + 15) / 16, ith, n_th);
          pr.score_keys(tb.qv.data(), qs, nq, jlo, span, jlo + 16 * c0, std::min(jhi + 1, jlo + 16 * c1), scores, tb);
          barrier.wait(n_th);  // scores ready
          for (int64_t i = i0; i < i1; ++i) {
            const Query& qq = tb.qv[i];
            const float inv = pr.softmax(qq, scores + i * span, jlo);
            a.kt->scale_round_f16(qq.p - qq.lo + 1, inv, scores + i * span + (qq.lo - jlo));
          }
          const auto [d0, d1] = ThreadPool::split(hd, ith, n_th, 16);
          for (int64_t i = 0; i < nq && d0 < d1; ++i) std::fill(acc + i * hd + d0, acc + i * hd + d1, 0.0f);
          barrier.wait(n_th);  // probabilities ready
          if (d0 < d1) pr.weight_values(tb.qv.data(), nq, jlo, jhi, span, scores, acc, d0, d1, tb);
          barrier.wait(n_th);  // accumulators ready
          for (int64_t i = i0; i < i1; ++i) pr.finish(tb.qv[i], acc + i * hd, out);
          barrier.wait(n_th);  // the shared buffers are free for the next pair
        }
    });
  } else {
    // Tasks: (batch row b, kv head g, block of that pair's queries). Rows are found from
    // token_row (tokens are packed row after row). A pair's keys are decoded once per
    // task: pairs are split into more tasks only when there are fewer than threads.
    struct Task {
      int32_t b;
      int64_t g, q0, q1;  // queries [q0, q1) of the pair
    };
    std::vector<Task> tasks;
    const int64_t n_pairs = std::max<int64_t>(1, static_cast<int64_t>(a.B) * a.n_kv_heads);
    for (int64_t m0 = 0; m0 < M;) {
      const int32_t b = a.token_row[m0];
      SPECULA_CHECK(a.offset[b] == m0);  // tokens are packed row after row
      int64_t m1 = m0;
      while (m1 < M && a.token_row[m1] == b) ++m1;
      const int64_t nq = (m1 - m0) * group;
      const int64_t split = std::max<int64_t>(1, std::min<int64_t>(nq, (nth + n_pairs - 1) / n_pairs));
      // The scores buffer holds queries x keys: fewer queries per task at long contexts
      // (at most kScoresMax floats per thread whatever the context).
      const int64_t keys = views[b].base + (m1 - m0);
      const int64_t cap = std::max<int64_t>(8, kScoresMax / std::max<int64_t>(1, keys));
      const int64_t per = std::min({kQueryBlock, cap, (nq + split - 1) / split});
      for (int64_t g = 0; g < a.n_kv_heads; ++g)
        for (int64_t q0 = 0; q0 < nq; q0 += per) tasks.push_back(Task{b, g, q0, std::min(nq, q0 + per)});
      m0 = m1;
    }

    const int64_t n_tasks = static_cast<int64_t>(tasks.size());
    // Tasks are taken dynamically (causal tasks differ in cost); a task's result does not
    // depend on the thread that runs it.
    std::atomic<int64_t> next_task{0};
    pool.run([&](int, int) {
      ThreadBufs& tb = thread_bufs();
      tb.kvbuf.resize(static_cast<size_t>(hd));
      for (;;) {
        const int64_t ti = next_task.fetch_add(1, std::memory_order_relaxed);
        if (ti >= n_tasks) break;
        const Task& task = tasks[static_cast<size_t>(ti)];
        const Pair pr = pair_of(task.b, task.g);
        const KvRowView& vw = views[task.b];
        const int64_t base = vw.base;
        const int64_t g = task.g;
        const int64_t nq = task.q1 - task.q0;
        const KvCodec& kc = *vw.k_codec;
        const KvCodec& vc = *vw.v_codec;
        tb.qv.resize(static_cast<size_t>(nq));
        tb.qs.resize(static_cast<size_t>(nq * hd));
        tb.acc.assign(static_cast<size_t>(nq * hd), 0.0f);
        int64_t jlo = INT64_MAX, jhi = -1;
        for (int64_t i = 0; i < nq; ++i) {
          pr.query(task.q0 + i, tb.qv[i], tb.qs.data() + i * hd);
          jlo = std::min(jlo, tb.qv[i].lo);
          jhi = std::max(jhi, tb.qv[i].p);
        }
        // The window never reaches overwritten ring slots.
        SPECULA_CHECK(jlo >= vw.lo || jlo >= base);
        const int64_t span = jhi - jlo + 1;
        tb.scores.resize(static_cast<size_t>(nq * span));
        tb.qptr.resize(static_cast<size_t>(nq));
        tb.aptr.resize(static_cast<size_t>(nq));
        tb.live.resize(static_cast<size_t>(nq));
        tb.sbuf.resize(static_cast<size_t>(nq));
        tb.pbuf.resize(static_cast<size_t>(nq));
        tb.inv.resize(static_cast<size_t>(nq));
        const Query* qv = tb.qv.data();
        float* scores = tb.scores.data();

        // Scores: scores[i * span + (j - jlo)] for the keys query i sees. With a delay, the
        // queries in `live` are split: [0, n_rec) see key j within `delay` positions and
        // read the f16 tier, [n_rec, n_live) read the quantized tier (queries are in
        // position order, so the ones closest to j come first).
        if (vw.delay == 0) pr.score_keys(qv, tb.qs.data(), nq, jlo, span, jlo, jhi + 1, scores, tb);
        for (int64_t j = jlo; j <= jhi && vw.delay > 0; ++j) {
          int64_t n_live = 0, n_rec = 0;
          for (int64_t i = 0; i < nq; ++i) {
            if (j < qv[i].lo || j > qv[i].p) continue;
            if (qv[i].p - j < vw.delay) ++n_rec;
            tb.live[n_live] = i;
            tb.qptr[n_live] = tb.qs.data() + i * hd;
            ++n_live;
          }
          if (n_live == 0) continue;
          if (n_rec > 0) {
            vw.k_recent_codec->decode(vw.k_recent.at(j, base, g), tb.kvbuf.data());
            a.kt->dot_f32_multi(hd, tb.kvbuf.data(), n_rec, tb.qptr.data(), tb.sbuf.data());
          }
          if (n_live > n_rec) {
            kc.decode(vw.k.at(j, base, g), tb.kvbuf.data());
            a.kt->dot_f32_multi(hd, tb.kvbuf.data(), n_live - n_rec, tb.qptr.data() + n_rec, tb.sbuf.data() + n_rec);
          }
          for (int64_t k = 0; k < n_live; ++k) scores[tb.live[k] * span + (j - jlo)] = tb.sbuf[k];
        }
        // Softmax per query over its own keys; probabilities rounded to half before
        // weighting V (as llama.cpp's V·softmax product does), accumulation stays f32.
        for (int64_t i = 0; i < nq; ++i) tb.inv[i] = pr.softmax(qv[i], scores + i * span, jlo);
        if (vw.delay == 0) {
          // One value tier: probabilities in place of the scores.
          for (int64_t i = 0; i < nq; ++i)
            a.kt->scale_round_f16(qv[i].p - qv[i].lo + 1, tb.inv[i], scores + i * span + (qv[i].lo - jlo));
          pr.weight_values(qv, nq, jlo, jhi, span, scores, tb.acc.data(), 0, hd, tb);
        }
        for (int64_t j = jlo; j <= jhi && vw.delay > 0; ++j) {
          int64_t n_live = 0, n_rec = 0;
          for (int64_t i = 0; i < nq; ++i) {
            if (j < qv[i].lo || j > qv[i].p) continue;
            if (qv[i].p - j < vw.delay) ++n_rec;
            tb.pbuf[n_live] = fp16_to_fp32(fp32_to_fp16(scores[i * span + (j - jlo)] * tb.inv[i]));
            tb.aptr[n_live] = tb.acc.data() + i * hd;
            ++n_live;
          }
          if (n_live == 0) continue;
          if (n_rec > 0) {
            vw.v_recent_codec->decode(vw.v_recent.at(j, base, g), tb.kvbuf.data());
            a.kt->axpy_f32_multi(hd, tb.pbuf.data(), tb.kvbuf.data(), n_rec, tb.aptr.data());
          }
          if (n_live > n_rec) {
            vc.decode(vw.v.at(j, base, g), tb.kvbuf.data());
            a.kt->axpy_f32_multi(hd, tb.pbuf.data() + n_rec, tb.kvbuf.data(), n_live - n_rec, tb.aptr.data() + n_rec);
          }
        }
        for (int64_t i = 0; i < nq; ++i) pr.finish(qv[i], tb.acc.data() + i * hd, out);
      }
    });
  }

  // The step's positions join each row's stored state.
  for (int32_t b = 0; b < a.B; ++b)
    L->commit(*scratch.layer_rows[b], scratch.stage, a.offset[b], a.offset[b + 1] - a.offset[b]);
}

}  // namespace specula
