// Tests for the attention/activation kernels (dot_f16_f32, axpy_f16_f32, gelu_tanh_mul,
// exp_sub_sum): the AVX2 table against the generic reference on random data, odd lengths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "kernels/kernels.h"

namespace specula::kernels {
namespace {

TEST(AttentionKernels, Avx2MatchesGeneric) {
  const KernelTable* fast = avx2_table();
  if (fast == nullptr) GTEST_SKIP() << "no AVX2 on this CPU";
  const KernelTable& ref = generic_table();
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int64_t n : {1, 7, 8, 15, 16, 33, 256, 1000}) {
    std::vector<float> a(n), b(n), up(n), y1(n), y2(n);
    std::vector<uint16_t> h(n);
    for (int64_t i = 0; i < n; ++i) {
      a[i] = nd(rng);
      b[i] = nd(rng);
      up[i] = nd(rng);
      h[i] = fp32_to_fp16(nd(rng));
    }
    const float d1 = ref.dot_f16_f32(n, h.data(), b.data()), d2 = fast->dot_f16_f32(n, h.data(), b.data());
    double mag = 0;
    for (int64_t i = 0; i < n; ++i) mag += std::fabs(fp16_to_fp32(h[i]) * b[i]);
    EXPECT_NEAR(d1, d2, 1e-5 * mag + 1e-6) << "dot n=" << n;
    y1 = a;
    y2 = a;
    ref.axpy_f16_f32(n, 0.37f, h.data(), y1.data());
    fast->axpy_f16_f32(n, 0.37f, h.data(), y2.data());
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y1[i], y2[i], 1e-5f * (1 + std::fabs(y1[i]))) << "axpy " << i;
    // GELU over a wide range including saturation
    std::vector<float> g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = (i % 5 == 0) ? nd(rng) * 10.0f : nd(rng);
    ref.gelu_tanh_mul(n, g.data(), up.data(), y1.data());
    fast->gelu_tanh_mul(n, g.data(), up.data(), y2.data());
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(y1[i], y2[i], 2e-6f * (std::fabs(g[i] * up[i]) + 1e-3f)) << "gelu g=" << g[i];
    // Element-wise: the same result however the range is split (models split it by rows
    // and threads), for both tables.
    for (const kernels::KernelTable* t : {&ref, fast}) {
      std::vector<float> whole(n), parts(n);
      t->gelu_tanh_mul(n, g.data(), up.data(), whole.data());
      for (int64_t a = 0; a < n;) {
        const int64_t b = std::min<int64_t>(n, a + 1 + (a * 7) % 13);
        t->gelu_tanh_mul(b - a, g.data() + a, up.data() + a, parts.data() + a);
        a = b;
      }
      EXPECT_EQ(whole, parts) << t->isa << " gelu split n=" << n;
    }
    // softmax numerators
    std::vector<float> s1(n), s2(n);
    for (int64_t i = 0; i < n; ++i) s1[i] = s2[i] = nd(rng) * 5.0f;
    float mx = s1[0];
    for (float v : s1) mx = std::max(mx, v);
    const float sum1 = ref.exp_sub_sum(n, mx, s1.data()), sum2 = fast->exp_sub_sum(n, mx, s2.data());
    EXPECT_NEAR(sum1, sum2, 1e-6f * sum1);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(s1[i], s2[i], 1e-6f * s1[i] + 1e-30f) << "exp " << i;
  }
}

// A KV row decoded to f32 and given to the f32 multi-query kernels is bitwise the half
// kernels' result (attention relies on it: f16 caches keep their numbers), per table.
TEST(AttentionKernels, F32MultiEqualsHalfKernelsBitwise) {
  std::vector<const KernelTable*> tables = {&generic_table()};
  if (avx2_table() != nullptr) tables.push_back(avx2_table());
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (const KernelTable* kt : tables) {
    for (int64_t n : {1, 7, 8, 15, 16, 17, 64, 100, 128, 256, 520, 1000}) {
      const int64_t nq = 5;
      std::vector<uint16_t> h(n);
      std::vector<float> hf(n);
      for (int64_t i = 0; i < n; ++i) {
        h[i] = fp32_to_fp16(nd(rng));
        hf[i] = fp16_to_fp32(h[i]);
      }
      std::vector<std::vector<float>> qs(nq, std::vector<float>(n));
      std::vector<const float*> qp;
      for (auto& q : qs) {
        for (float& x : q) x = nd(rng);
        qp.push_back(q.data());
      }
      std::vector<float> s1(nq), s2(nq);
      kt->dot_f16_f32_multi(n, h.data(), nq, qp.data(), s1.data());
      kt->dot_f32_multi(n, hf.data(), nq, qp.data(), s2.data());
      for (int64_t q = 0; q < nq; ++q) {
        EXPECT_EQ(s1[q], s2[q]) << kt->isa << " dot n=" << n << " q=" << q;
        EXPECT_EQ(s1[q], kt->dot_f16_f32(n, h.data(), qs[q].data())) << kt->isa << " single dot n=" << n;
      }
      std::vector<float> alpha(nq);
      for (float& a : alpha) a = nd(rng);
      std::vector<std::vector<float>> y1(nq, std::vector<float>(n)), y2;
      for (auto& y : y1)
        for (float& x : y) x = nd(rng);
      y2 = y1;
      std::vector<float*> p1, p2;
      for (int64_t q = 0; q < nq; ++q) {
        p1.push_back(y1[q].data());
        p2.push_back(y2[q].data());
      }
      kt->axpy_f16_f32_multi(n, alpha.data(), h.data(), nq, p1.data());
      kt->axpy_f32_multi(n, alpha.data(), hf.data(), nq, p2.data());
      for (int64_t q = 0; q < nq; ++q) EXPECT_EQ(y1[q], y2[q]) << kt->isa << " axpy n=" << n << " q=" << q;
    }
  }
}

TEST(AttentionKernels, GenericGeluMatchesFloat64) {
  const KernelTable& ref = generic_table();
  for (double x = -12; x <= 12; x += 0.37) {
    const float g = static_cast<float>(x), up = 1.5f;
    float out;
    ref.gelu_tanh_mul(1, &g, &up, &out);
    const double e = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))) * 1.5;
    EXPECT_NEAR(out, e, 1e-6 * (std::fabs(e) + 1)) << x;
  }
}


// The multi-query forms equal the single-query calls bitwise, in every table, for head
// sizes with and without tails and past the converted-row buffer (n > 512).
TEST(AttentionKernels, MultiQueryEqualsSingleQuery) {
  std::vector<const KernelTable*> tables = {&generic_table()};
  if (avx2_table() != nullptr) tables.push_back(avx2_table());
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (const KernelTable* k : tables) {
    SCOPED_TRACE(k->isa);
    for (int64_t n : {16, 64, 128, 80, 37, 256, 600}) {
      const int64_t nq = 7;
      std::vector<uint16_t> h(static_cast<size_t>(n));
      for (auto& v : h) v = fp32_to_fp16(nd(rng));
      std::vector<std::vector<float>> qs(nq, std::vector<float>(static_cast<size_t>(n)));
      std::vector<const float*> qp;
      for (auto& qv : qs) {
        for (auto& v : qv) v = nd(rng);
        qp.push_back(qv.data());
      }
      std::vector<float> s(nq);
      k->dot_f16_f32_multi(n, h.data(), nq, qp.data(), s.data());
      for (int64_t i = 0; i < nq; ++i) EXPECT_EQ(s[i], k->dot_f16_f32(n, h.data(), qs[i].data())) << "dot n=" << n;
      std::vector<std::vector<float>> y1 = qs, y2 = qs;
      std::vector<float*> yp;
      std::vector<float> alpha;
      for (int64_t i = 0; i < nq; ++i) {
        yp.push_back(y2[i].data());
        alpha.push_back(nd(rng));
      }
      k->axpy_f16_f32_multi(n, alpha.data(), h.data(), nq, yp.data());
      for (int64_t i = 0; i < nq; ++i) {
        k->axpy_f16_f32(n, alpha[i], h.data(), y1[i].data());
        for (int64_t j = 0; j < n; ++j) ASSERT_EQ(y1[i][j], y2[i][j]) << "axpy n=" << n << " q=" << i << " j=" << j;
      }
    }
  }
}

// pv_f32_rows (a block of value rows, per-query key ranges) is bitwise the per-key
// axpy_f32_multi calls in key order, dot_f32_multi for any number of queries (the
// four-at-a-time path and the tail) is bitwise each query alone, and qk_rows16 is
// bitwise the per-key dot — in every table here; avx2 and avx512 also agree bitwise.
TEST(AttentionKernels, BlockedPvAndMultiDotEqualPerKeyCalls) {
  std::vector<const KernelTable*> tables = {&generic_table()};
  if (avx2_table() != nullptr) tables.push_back(avx2_table());
  if (avx512_table() != nullptr) tables.push_back(avx512_table());
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (const KernelTable* k : tables) {
    SCOPED_TRACE(k->isa);
    for (int64_t n : {8, 37, 64, 128, 200, 256}) {
      const int64_t nk = 23, vs = n + 5;
      std::vector<float> v(static_cast<size_t>(nk * vs));
      for (auto& x : v) x = nd(rng);
      for (int64_t nq : {1, 3, 4, 5, 9}) {
        std::vector<std::vector<float>> y1(nq, std::vector<float>(static_cast<size_t>(n))), p(nq);
        std::vector<int64_t> k0(nq), k1(nq);
        for (int64_t q = 0; q < nq; ++q) {
          for (auto& x : y1[q]) x = nd(rng);
          k0[q] = q % 4;
          k1[q] = nk - (q * 3) % 7;
          p[q].resize(static_cast<size_t>(k1[q] - k0[q]));
          for (auto& x : p[q]) x = nd(rng);
        }
        auto y2 = y1;
        std::vector<float*> yp;
        std::vector<const float*> pp;
        for (int64_t q = 0; q < nq; ++q) {
          yp.push_back(y2[q].data());
          pp.push_back(p[q].data());
          for (int64_t kk = k0[q]; kk < k1[q]; ++kk) {
            float* yq = y1[q].data();
            k->axpy_f32_multi(n, &p[q][kk - k0[q]], v.data() + kk * vs, 1, &yq);
          }
        }
        k->pv_f32_rows(n, v.data(), vs, nq, pp.data(), k0.data(), k1.data(), yp.data());
        for (int64_t q = 0; q < nq; ++q)
          for (int64_t j = 0; j < n; ++j) ASSERT_EQ(y1[q][j], y2[q][j]) << "pv n=" << n << " nq=" << nq << " q=" << q;
        // dot_f32_multi against each query alone.
        std::vector<const float*> bq;
        for (int64_t q = 0; q < nq; ++q) bq.push_back(y1[q].data());
        std::vector<float> s(static_cast<size_t>(nq));
        k->dot_f32_multi(n, v.data(), nq, bq.data(), s.data());
        for (int64_t q = 0; q < nq; ++q) {
          float one;
          k->dot_f32_multi(n, v.data(), 1, &bq[q], &one);
          ASSERT_EQ(s[q], one) << "dot n=" << n << " nq=" << nq << " q=" << q;
        }
        // qk_rows16 over 16 and 11 contiguous key rows: bitwise the per-key dot.
        for (int64_t nk : {16, 11}) {
          std::vector<float> keys(static_cast<size_t>(nk * n));
          for (auto& x : keys) x = nd(rng);
          std::vector<std::vector<float>> sb(nq, std::vector<float>(16, -1.0f));
          std::vector<float*> sp;
          for (auto& r : sb) sp.push_back(r.data());
          k->qk_rows16(n, keys.data(), nk, nq, bq.data(), sp.data());
          for (int64_t q = 0; q < nq; ++q)
            for (int64_t j = 0; j < 16; ++j) {
              if (j >= nk) {
                ASSERT_EQ(sb[q][j], -1.0f) << "qk_rows16 wrote past nk";
                continue;
              }
              float one;
              k->dot_f32_multi(n, keys.data() + j * n, 1, &bq[q], &one);
              ASSERT_EQ(sb[q][j], one) << "qk n=" << n << " nk=" << nk << " q=" << q << " key " << j;
            }
        }
      }
    }
  }
}

TEST(AttentionKernels, Avx512BlockedKernelsEqualAvx2Bitwise) {
  if (avx2_table() == nullptr || avx512_table() == nullptr) GTEST_SKIP() << "needs AVX2 and AVX-512 (" << cpu_features() << ")";
  const KernelTable& a = *avx2_table();
  const KernelTable& b = *avx512_table();
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int64_t n : {37, 128, 256, 80}) {
    const int64_t nq = 6, nk = 13;
    std::vector<float> keys(static_cast<size_t>(nk * n));
    for (auto& x : keys) x = nd(rng);
    std::vector<std::vector<float>> qs(nq, std::vector<float>(static_cast<size_t>(n)));
    std::vector<const float*> qp;
    for (auto& q : qs) {
      for (auto& x : q) x = nd(rng);
      qp.push_back(q.data());
    }
    std::vector<std::vector<float>> sa(nq, std::vector<float>(16)), sb = sa;
    std::vector<float*> pa, pb;
    for (int64_t i = 0; i < nq; ++i) {
      pa.push_back(sa[i].data());
      pb.push_back(sb[i].data());
    }
    a.qk_rows16(n, keys.data(), nk, nq, qp.data(), pa.data());
    b.qk_rows16(n, keys.data(), nk, nq, qp.data(), pb.data());
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t j = 0; j < nk; ++j) ASSERT_EQ(sa[i][j], sb[i][j]) << "qk n=" << n;
    std::vector<const float*> pp;
    std::vector<int64_t> k0(nq, 1), k1(nq, nk);
    std::vector<std::vector<float>> ya = qs, yb = qs, pr(nq, std::vector<float>(static_cast<size_t>(nk)));
    std::vector<float*> yap, ybp;
    for (int64_t i = 0; i < nq; ++i) {
      for (auto& x : pr[i]) x = nd(rng);
      pp.push_back(pr[i].data());
      yap.push_back(ya[i].data());
      ybp.push_back(yb[i].data());
    }
    a.pv_f32_rows(n, keys.data(), n, nq, pp.data(), k0.data(), k1.data(), yap.data());
    b.pv_f32_rows(n, keys.data(), n, nq, pp.data(), k0.data(), k1.data(), ybp.data());
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t d = 0; d < n; ++d) ASSERT_EQ(ya[i][d], yb[i][d]) << "pv n=" << n;
  }
}

// scale_round_f16 is bitwise the software half round trip of the product, across the
// normal, subnormal, underflow and overflow ranges of half (probabilities are in [0, 1]).
TEST(AttentionKernels, ScaleRoundF16IsBitExact) {
  std::vector<const KernelTable*> tables = {&generic_table()};
  if (avx2_table() != nullptr) tables.push_back(avx2_table());
  if (avx512_table() != nullptr) tables.push_back(avx512_table());
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> ex(-30.0f, 17.0f), sg(-1.0f, 1.0f);
  std::vector<float> x(1003);
  for (auto& v : x) v = std::copysign(std::exp2(ex(rng)), sg(rng));
  x[0] = 0.0f;
  x[1] = std::ldexp(1.0f, -25);  // halfway to the smallest subnormal: ties to even (0)
  x[2] = 65520.0f;               // rounds to infinity
  for (const KernelTable* k : tables) {
    SCOPED_TRACE(k->isa);
    for (float alpha : {1.0f, 0.37f, 3.0f}) {
      std::vector<float> y = x;
      k->scale_round_f16(static_cast<int64_t>(y.size()), alpha, y.data());
      for (size_t i = 0; i < x.size(); ++i) {
        const float want = fp16_to_fp32(fp32_to_fp16(x[i] * alpha));
        ASSERT_EQ(std::memcmp(&y[i], &want, 4), 0) << "x=" << x[i] << " alpha=" << alpha << ": " << y[i] << " vs " << want;
      }
    }
  }
}

}  // namespace
}  // namespace specula::kernels
