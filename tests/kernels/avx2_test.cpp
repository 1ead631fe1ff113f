// tests/kernels/avx2_test.cpp — the AVX2 kernel table against the generic reference.
//
// For every weight type: random valid blocks (finite fp16 scales), odd shapes, gemm
// NMSE vs generic; for Q2_K, Q3_K, IQ4_NL and IQ4_XS also extreme blocks (half-range,
// subnormal and zero scales, all-zero / all-one quant bytes, activations at +-127) and
// the float64 dot of the dequantized operands; batch invariance (a row's output is bitwise the same at m=1, inside
// m=13, and whatever the n_rows split). Activation quantizers and all dequantizers
// must match generic bit for bit (including rounding ties). Dense helpers within float
// rounding. Skipped when this CPU has no AVX2 table. Does not benchmark (bench/).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "kernels/kernels.h"
#include "core/quant_blocks.h"
#include "kernel_test_util.h"

namespace specula::kernels {
namespace {

const DType kWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0,   DType::Q4_1,
                              DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q2_K,   DType::Q3_K,
                              DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS,
                              DType::Q8_A};

// The types added with the low-bit kernels, with the byte offsets of their fp16 scale
// fields (d first, then Q2_K's dmin).
struct LowBitType {
  DType type;
  std::vector<int> scale_offsets;
};
const LowBitType kLowBitTypes[] = {
    {DType::Q2_K, {80, 82}}, {DType::Q3_K, {108}}, {DType::IQ4_NL, {0}}, {DType::IQ4_XS, {0}}};

#define SKIP_WITHOUT_AVX2()                                          \
  if (avx2_table() == nullptr) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU"

int64_t test_k(DType t) {
  const int64_t bs = dtype_info(t).block_size;
  if (bs == 1) return 100;  // not a multiple of 16: exercises the float tail
  return bs * 3;            // 96 for legacy types, 768 for K-quants
}

void gemm_with(const KernelTable& k, DType t, int64_t K, const std::vector<uint8_t>& w, int64_t n_rows,
               const std::vector<uint8_t>& xq, int64_t m, std::vector<float>& y, int64_t ldy,
               int64_t row0 = 0) {
  const size_t ws = row_bytes(t, K);
  const size_t xs = activation_row_bytes(t, K);
  k.of(t).gemm(K, w.data() + ws * static_cast<size_t>(row0), ws, n_rows, xq.data(), xs, m,
               y.data() + row0, ldy);
}

TEST(Avx2Kernels, TableCoversGeneric) {
  SKIP_WITHOUT_AVX2();
  const KernelTable& a = *avx2_table();
  const KernelTable& g = generic_table();
  EXPECT_STREQ(a.isa, "avx2");
  for (int i = 0; i < kNumDTypeSlots; ++i) {
    if (!g.types[i].supported) continue;
    SCOPED_TRACE(i);
    EXPECT_TRUE(a.types[i].supported);
    EXPECT_EQ(a.types[i].dequantize_row != nullptr, g.types[i].dequantize_row != nullptr);
    EXPECT_EQ(a.types[i].quantize_row != nullptr, g.types[i].quantize_row != nullptr);
    EXPECT_EQ(a.types[i].gemm != nullptr, g.types[i].gemm != nullptr);
    EXPECT_EQ(a.types[i].vec_dot_type, g.types[i].vec_dot_type);
  }
  EXPECT_NE(a.dot_f32, nullptr);
  EXPECT_NE(a.axpy_f32, nullptr);
  EXPECT_NE(a.scale_f32, nullptr);
}

TEST(Avx2Kernels, GemmMatchesGeneric) {
  SKIP_WITHOUT_AVX2();
  std::mt19937 rng(42);
  for (DType t : kWeightTypes) {
    for (int64_t K : {test_k(t), test_k(t) == 100 ? int64_t{640} : test_k(t) / 3 * 8}) {
      for (int64_t n_rows : {1, 3, 17, 64}) {
        const auto w = random_weights(t, K, n_rows, rng);
        for (int64_t m : {1, 2, 3, 5, 8, 13}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(t) << " K=" << K << " n_rows=" << n_rows
                                            << " m=" << m);
          const auto xq = quantized_acts(t, K, m, rng);
          const int64_t ldy = n_rows + 3;
          std::vector<float> ya(static_cast<size_t>(m * ldy), -7.0f), yg = ya;
          gemm_with(*avx2_table(), t, K, w, n_rows, xq, m, ya, ldy);
          gemm_with(generic_table(), t, K, w, n_rows, xq, m, yg, ldy);
          expect_gemm_matches(ya, yg, m, ldy, n_rows);
        }
      }
    }
  }
}

TEST(Avx2Kernels, GemmIsBatchInvariant) {
  SKIP_WITHOUT_AVX2();
  std::mt19937 rng(7);
  const KernelTable& k = *avx2_table();
  for (DType t : kWeightTypes) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t K = test_k(t), n_rows = 17, m = 13;
    const auto w = random_weights(t, K, n_rows, rng);
    const auto xq = quantized_acts(t, K, m, rng);
    const size_t xs = activation_row_bytes(t, K);
    std::vector<float> full(static_cast<size_t>(m * n_rows));
    gemm_with(k, t, K, w, n_rows, xq, m, full, n_rows);
    // Each activation row alone (m = 1).
    for (int64_t i = 0; i < m; ++i) {
      std::vector<uint8_t> xi(xq.begin() + static_cast<ptrdiff_t>(xs * i),
                              xq.begin() + static_cast<ptrdiff_t>(xs * (i + 1)));
      std::vector<float> yi(static_cast<size_t>(n_rows));
      gemm_with(k, t, K, w, n_rows, xi, 1, yi, n_rows);
      for (int64_t r = 0; r < n_rows; ++r) ASSERT_EQ(yi[r], full[i * n_rows + r]) << "m=1 row " << i;
    }
    // Sub-batches of every size the kernels treat differently (decode, small-m column
    // groups of 1..6, panels), starting at row 4.
    for (int64_t mb : {2, 3, 4, 5, 6, 7, 8, 9}) {
      std::vector<uint8_t> xb(xq.begin() + static_cast<ptrdiff_t>(xs * 4),
                              xq.begin() + static_cast<ptrdiff_t>(xs * (4 + mb)));
      std::vector<float> yb(static_cast<size_t>(mb * n_rows));
      gemm_with(k, t, K, w, n_rows, xb, mb, yb, n_rows);
      for (int64_t i = 0; i < mb; ++i)
        for (int64_t r = 0; r < n_rows; ++r)
          ASSERT_EQ(yb[i * n_rows + r], full[(i + 4) * n_rows + r]) << "batch of " << mb << " row " << i;
    }
    // n_rows split as a thread pool would: [0,5) + [5,6) + [6,17), for the panel (m = 13),
    // small-m (5) and decode (1) paths.
    for (int64_t ms : {m, int64_t{5}, int64_t{1}}) {
      std::vector<float> split(static_cast<size_t>(ms * n_rows));
      gemm_with(k, t, K, w, 5, xq, ms, split, n_rows, 0);
      gemm_with(k, t, K, w, 1, xq, ms, split, n_rows, 5);
      gemm_with(k, t, K, w, 11, xq, ms, split, n_rows, 6);
      for (size_t i = 0; i < split.size(); ++i) ASSERT_EQ(split[i], full[i]) << "m=" << ms << " split index " << i;
    }
  }
}

// Extreme blocks: every block gets one of the given quant byte fills (0x00, 0xFF or random)
// and scale halves cycling through +-65504, the smallest subnormal, zero and a normal
// value. Activations: random, or every quant at +-127 (the largest maddubs pair sums).
// Compared with generic by NMSE (1e-10), or exactly when the reference is all zero.
TEST(Avx2Kernels, LowBitExtremeBlocks) {
  SKIP_WITHOUT_AVX2();
  std::mt19937 rng(21);
  const uint16_t kHalves[] = {0x7BFF, 0xFBFF, 0x0001, 0x0000, 0x8000, 0x3C00, 0x1400};
  for (const LowBitType& lt : kLowBitTypes) {
    const DType t = lt.type;
    const DTypeInfo& info = dtype_info(t);
    const int64_t K = 4 * 256, n_rows = 19;
    const DType vt = generic_table().of(t).vec_dot_type;
    for (int fill : {0x00, 0xFF, -1}) {
      std::vector<uint8_t> w = random_weights(t, K, n_rows, rng);
      const size_t nblocks = w.size() / info.type_size;
      for (size_t b = 0; b < nblocks; ++b) {
        uint8_t* blk = w.data() + b * info.type_size;
        if (fill >= 0) std::memset(blk, fill, info.type_size);
        for (size_t f = 0; f < lt.scale_offsets.size(); ++f) {
          const uint16_t h = kHalves[(b + 3 * f) % std::size(kHalves)];
          std::memcpy(blk + lt.scale_offsets[f], &h, 2);
        }
      }
      for (int act = 0; act < 3; ++act) {
        const int64_t m = 13;
        std::vector<float> x = random_floats(K * m, rng);
        if (act == 1) for (auto& v : x) v = v < 0 ? -1.0f : 1.0f;  // every quant +-127
        if (act == 2) for (auto& v : x) v = 1000.0f;                // one sign, large d
        const size_t xs = row_bytes(vt, K);
        std::vector<uint8_t> xq(xs * m);
        for (int64_t i = 0; i < m; ++i) generic_table().of(vt).quantize_row(x.data() + i * K, xq.data() + xs * i, K);
        for (int64_t mm : {int64_t{1}, int64_t{5}, m}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(t) << " fill=" << fill << " act=" << act << " m=" << mm);
          std::vector<float> ya(static_cast<size_t>(mm * n_rows), -7.0f), yg = ya;
          gemm_with(*avx2_table(), t, K, w, n_rows, xq, mm, ya, n_rows);
          gemm_with(generic_table(), t, K, w, n_rows, xq, mm, yg, n_rows);
          double ref = 0;
          for (float g : yg) ref += double(g) * g;
          if (ref == 0.0) {
            for (size_t i = 0; i < ya.size(); ++i) ASSERT_EQ(ya[i], yg[i]) << i;
          } else {
            expect_gemm_matches(ya, yg, mm, n_rows, n_rows);
          }
        }
      }
    }
  }
}

// The AVX2 gemm of the low-bit types within 1e-6 * sum_k |w_k * x_k| of the float64 dot of
// the dequantized weights and activations (w_k x_k for Q2_K counted as its scale and min
// parts, |dl*q*x| + |ml*x|, since the kernel sums those separately): float rounding of
// the per-block scale products and of the float accumulation over K / 256 (or K / 32)
// blocks is a few ulps (6e-8) of that magnitude.
TEST(Avx2Kernels, LowBitGemmMatchesFloat64) {
  SKIP_WITHOUT_AVX2();
  std::mt19937 rng(33);
  for (const LowBitType& lt : kLowBitTypes) {
    const DType t = lt.type;
    const DTypeInfo& info = dtype_info(t);
    const DType vt = generic_table().of(t).vec_dot_type;
    for (int64_t K : {int64_t{256}, int64_t{2816}}) {
      const int64_t n_rows = 9, m = 11;
      const auto w = random_weights(t, K, n_rows, rng);
      const auto xq = quantized_acts(t, K, m, rng);
      const size_t ws = row_bytes(t, K), xs = row_bytes(vt, K);
      // Dequantized weights, and for Q2_K the scale part (dmin zeroed) and min part (d zeroed).
      std::vector<float> wf(K * n_rows), wd(K * n_rows), wm(K * n_rows), xf(K * m);
      for (int64_t r = 0; r < n_rows; ++r) {
        const uint8_t* row = w.data() + ws * r;
        generic_table().of(t).dequantize_row(row, wf.data() + K * r, K);
        std::copy(wf.begin() + K * r, wf.begin() + K * (r + 1), wd.begin() + K * r);
        std::fill(wm.begin() + K * r, wm.begin() + K * (r + 1), 0.0f);
        if (t == DType::Q2_K) {
          for (int field = 0; field < 2; ++field) {
            std::vector<uint8_t> part(row, row + ws);
            for (size_t b = 0; b < ws / info.type_size; ++b) std::memset(part.data() + b * info.type_size + lt.scale_offsets[1 - field], 0, 2);
            generic_table().of(t).dequantize_row(part.data(), (field == 0 ? wd : wm).data() + K * r, K);
          }
        }
      }
      for (int64_t i = 0; i < m; ++i) generic_table().of(vt).dequantize_row(xq.data() + xs * i, xf.data() + K * i, K);
      std::vector<float> y(static_cast<size_t>(m * n_rows));
      gemm_with(*avx2_table(), t, K, w, n_rows, xq, m, y, n_rows);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t r = 0; r < n_rows; ++r) {
          double ref = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double xv = xf[K * i + k];
            ref += double(wf[K * r + k]) * xv;
            mag += std::fabs(double(wd[K * r + k]) * xv) + std::fabs(double(wm[K * r + k]) * xv);
          }
          EXPECT_LE(std::fabs(y[n_rows * i + r] - ref), 1e-6 * mag + 1e-30)
              << dtype_name(t) << " K=" << K << " y[" << i << "," << r << "]=" << y[n_rows * i + r] << " ref=" << ref;
        }
    }
  }
}

void expect_quantize_exact(DType t, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  const size_t rb = row_bytes(t, n);
  std::vector<uint8_t> a(rb, 0xAA), g(rb, 0x55);
  avx2_table()->of(t).quantize_row(x.data(), a.data(), n);
  generic_table().of(t).quantize_row(x.data(), g.data(), n);
  for (size_t i = 0; i < rb; ++i) ASSERT_EQ(a[i], g[i]) << dtype_name(t) << " byte " << i;
}

TEST(Avx2Kernels, QuantizeRowIsBitExact) {
  SKIP_WITHOUT_AVX2();
  std::mt19937 rng(3);
  for (DType t : {DType::F32, DType::Q8_0, DType::Q8_1, DType::Q8_K}) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t n = 256 * 4;
    std::vector<float> x = random_floats(n, rng);
    expect_quantize_exact(t, x);
    // Scaled widely, with zero blocks and a block of huge values.
    for (int64_t i = 0; i < n; ++i) x[i] *= std::ldexp(1.0f, static_cast<int>(i / 64) - 8);
    std::fill(x.begin(), x.begin() + 256, 0.0f);
    expect_quantize_exact(t, x);
    // Rounding ties: amax 127 makes the scale exactly 1 (Q8_0/Q8_1) or -1 (Q8_K).
    for (int64_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(static_cast<int>(i % 253) - 126) + ((i % 3 == 0) ? 0.5f : -0.5f);
      if (i % 32 == 0) x[i] = (i % 64 == 0) ? 127.0f : -127.0f;
    }
    expect_quantize_exact(t, x);
    // Ties in |x| between elements of opposite sign (Q8_K picks the first).
    for (int64_t i = 0; i < n; ++i) x[i] = (i % 5 == 0) ? 2.0f : -1.0f;
    for (int64_t i = 0; i < n; i += 7) x[i] = -2.0f;
    expect_quantize_exact(t, x);
  }
}

TEST(Avx2Kernels, DequantizeRowIsBitExact) {
  SKIP_WITHOUT_AVX2();
  std::mt19937 rng(5);
  std::vector<DType> types(std::begin(kWeightTypes), std::end(kWeightTypes));
  types.push_back(DType::Q8_1);
  types.push_back(DType::Q8_K);
  for (DType t : types) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t n = 256 * 3;
    std::vector<uint8_t> w;
    if (t == DType::Q8_1 || t == DType::Q8_K) {
      const std::vector<float> x = random_floats(n, rng);
      w.resize(row_bytes(t, n));
      generic_table().of(t).quantize_row(x.data(), w.data(), n);
    } else {
      w = random_weights(t, n, 1, rng);
    }
    std::vector<float> a(static_cast<size_t>(n)), g(static_cast<size_t>(n));
    avx2_table()->of(t).dequantize_row(w.data(), a.data(), n);
    generic_table().of(t).dequantize_row(w.data(), g.data(), n);
    ASSERT_EQ(std::memcmp(a.data(), g.data(), a.size() * sizeof(float)), 0);
  }
}

TEST(Avx2Kernels, DenseHelpers) {
  SKIP_WITHOUT_AVX2();
  std::mt19937 rng(9);
  const KernelTable& a = *avx2_table();
  const KernelTable& g = generic_table();
  for (int64_t n : {1, 7, 8, 31, 33, 256, 1000}) {
    SCOPED_TRACE(n);
    const auto x = random_floats(n, rng), y = random_floats(n, rng);
    const float da = a.dot_f32(n, x.data(), y.data()), dg = g.dot_f32(n, x.data(), y.data());
    double mag = 0;
    for (int64_t i = 0; i < n; ++i) mag += std::fabs(double(x[i]) * y[i]);
    EXPECT_NEAR(da, dg, 1e-6 * mag + 1e-30);
    auto ya = y, yg = y;
    a.axpy_f32(n, 0.37f, x.data(), ya.data());
    g.axpy_f32(n, 0.37f, x.data(), yg.data());
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(ya[i], yg[i], 1e-6f * (std::fabs(yg[i]) + 1.0f));
    a.scale_f32(n, -1.7f, ya.data());
    g.scale_f32(n, -1.7f, yg.data());
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(ya[i], yg[i], 2e-6f * (std::fabs(yg[i]) + 1.0f));
  }
}

}  // namespace
}  // namespace specula::kernels
