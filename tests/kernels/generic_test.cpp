// tests/kernels/generic_test.cpp — tests of the reference (generic) kernel table.
//
// Oracles: gguf-py's dequantizers and Q8_0 quantizer (fixtures made by
// tools/make_quant_fixtures.py), ggml's Q8_1/Q8_K definitions (checked as properties),
// and a float64 dot product of dequantized weights and activations for gemm.
// Also checks odd shapes, strides and batch invariance. Does not test the AVX2 table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "kernels/kernels.h"
#include "core/quant_blocks.h"

namespace specula::kernels {
namespace {

const KernelTable& table() { return generic_table(); }

std::vector<uint8_t> read_fixture(const std::string& name) {
  const std::string path = std::string(SPECULA_FIXTURES_DIR) + "/quant/" + name;
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "missing fixture " << path
                        << " (run python3 tools/make_quant_fixtures.py)";
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

struct WeightType {
  DType type;
  const char* fixture;
  // Byte offsets of fp16 fields inside a block, and whether each must be positive.
  std::vector<std::pair<int, bool>> fp16_fields;
};

const std::vector<WeightType>& weight_types() {
  static const std::vector<WeightType> kTypes = {
      {DType::F32, "f32.blocks", {}},
      {DType::F16, "f16.blocks", {}},
      {DType::BF16, "bf16.blocks", {}},
      {DType::Q4_0, "q4_0.blocks", {{0, false}}},
      {DType::Q4_1, "q4_1.blocks", {{0, false}, {2, false}}},
      {DType::Q5_0, "q5_0.blocks", {{0, false}}},
      {DType::Q5_1, "q5_1.blocks", {{0, false}, {2, false}}},
      {DType::Q8_0, "q8_0.blocks", {{0, false}}},
      {DType::Q4_K, "q4_k.blocks", {{0, false}, {2, true}}},
      {DType::Q5_K, "q5_k.blocks", {{0, false}, {2, true}}},
      {DType::Q6_K, "q6_k.blocks", {{208, false}}},
      {DType::Q2_K, "q2_k.blocks", {{80, false}, {82, true}}},
      {DType::Q3_K, "q3_k.blocks", {{108, false}}},
      {DType::IQ4_NL, "iq4_nl.blocks", {{0, false}}},
      {DType::IQ4_XS, "iq4_xs.blocks", {{0, false}}},
  };
  return kTypes;
}

// A random but valid row of `type` with n elements: random quant bytes, fp16 scales
// in [-2, 2] (or (0, 2] for K-quant dmin); dense types get N(0,1) values.
std::vector<uint8_t> random_row(const WeightType& wt, int64_t n, std::mt19937& rng) {
  const DTypeInfo& info = dtype_info(wt.type);
  std::vector<uint8_t> row(row_bytes(wt.type, n));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if (wt.type == DType::F32 || wt.type == DType::F16 || wt.type == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = normal(rng);
      if (wt.type == DType::F32) {
        std::memcpy(row.data() + 4 * i, &v, 4);
      } else {
        const uint16_t h = wt.type == DType::F16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
        std::memcpy(row.data() + 2 * i, &h, 2);
      }
    }
    return row;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : row) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> signed_scale(-2.0f, 2.0f), positive_scale(1e-3f, 2.0f);
  for (size_t blk = 0; blk < row.size() / info.type_size; ++blk) {
    for (auto [offset, positive] : wt.fp16_fields) {
      const uint16_t h = fp32_to_fp16(positive ? positive_scale(rng) : signed_scale(rng));
      std::memcpy(row.data() + blk * info.type_size + offset, &h, 2);
    }
  }
  return row;
}

std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

// ---- (1) dequantize_row equals gguf-py bit for bit.
TEST(GenericKernels, DequantizeMatchesGguf) {
  for (const WeightType& wt : weight_types()) {
    SCOPED_TRACE(std::string(dtype_name(wt.type)));
    const TypeKernels& k = table().of(wt.type);
    ASSERT_TRUE(k.supported);
    ASSERT_NE(k.dequantize_row, nullptr);
    const std::vector<uint8_t> file = read_fixture(wt.fixture);
    const DTypeInfo& info = dtype_info(wt.type);
    const size_t per_block = info.type_size + 4 * static_cast<size_t>(info.block_size);
    ASSERT_GT(file.size(), 0u);
    ASSERT_EQ(file.size() % per_block, 0u);
    const int64_t n = static_cast<int64_t>(file.size() / per_block) * info.block_size;
    const size_t raw_bytes = row_bytes(wt.type, n);
    std::vector<float> expected(n), got(n, -12345.0f);
    std::memcpy(expected.data(), file.data() + raw_bytes, 4 * static_cast<size_t>(n));
    k.dequantize_row(file.data(), got.data(), n);
    int mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t a, b;
      std::memcpy(&a, &got[i], 4);
      std::memcpy(&b, &expected[i], 4);
      if (a != b && mismatches++ < 5) {
        ADD_FAILURE() << "element " << i << ": got " << got[i] << " want " << expected[i];
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

// ---- (2) Q8_0 quantize_row equals gguf-py's bytes (roundf ties away from zero).
TEST(GenericKernels, QuantizeQ8_0MatchesGguf) {
  const std::vector<uint8_t> file = read_fixture("q8_0_quantize.blocks");
  constexpr size_t kPerBlock = 4 * kQK + sizeof(BlockQ8_0);
  ASSERT_GT(file.size(), 0u);
  ASSERT_EQ(file.size() % kPerBlock, 0u);
  const int64_t nb = static_cast<int64_t>(file.size() / kPerBlock);
  std::vector<float> x(nb * kQK);
  std::memcpy(x.data(), file.data(), x.size() * 4);
  const uint8_t* expected = file.data() + x.size() * 4;
  std::vector<uint8_t> got(nb * sizeof(BlockQ8_0), 0xAA);
  table().of(DType::Q8_0).quantize_row(x.data(), got.data(), nb * kQK);
  for (int64_t b = 0; b < nb; ++b) {
    EXPECT_EQ(0, std::memcmp(got.data() + b * sizeof(BlockQ8_0), expected + b * sizeof(BlockQ8_0),
                             sizeof(BlockQ8_0)))
        << "block " << b;
  }
}

// ---- Q4_0 quantize_row (the q4_0 KV cache's encoder) equals gguf-py's bytes (truncation
// after + 8.5, d = the signed extreme / -8), including exact .5 edges.
TEST(GenericKernels, QuantizeQ4_0MatchesGguf) {
  const std::vector<uint8_t> file = read_fixture("q4_0_quantize.blocks");
  constexpr size_t kPerBlock = 4 * kQK + sizeof(BlockQ4_0);
  ASSERT_GT(file.size(), 0u);
  ASSERT_EQ(file.size() % kPerBlock, 0u);
  const int64_t nb = static_cast<int64_t>(file.size() / kPerBlock);
  std::vector<float> x(nb * kQK);
  std::memcpy(x.data(), file.data(), x.size() * 4);
  const uint8_t* expected = file.data() + x.size() * 4;
  for (const kernels::KernelTable* kt : {&table(), &kernels::active()}) {
    ASSERT_NE(kt->of(DType::Q4_0).quantize_row, nullptr) << kt->isa;
    std::vector<uint8_t> got(nb * sizeof(BlockQ4_0), 0xAA);
    kt->of(DType::Q4_0).quantize_row(x.data(), got.data(), nb * kQK);
    for (int64_t b = 0; b < nb; ++b)
      EXPECT_EQ(0, std::memcmp(got.data() + b * sizeof(BlockQ4_0), expected + b * sizeof(BlockQ4_0), sizeof(BlockQ4_0)))
          << kt->isa << " block " << b;
  }
}

// Q8_1: d = fp16(amax/127), q = roundf(x/d), s = fp16(d * sum q) (ggml quantize_row_q8_1_ref).
TEST(GenericKernels, QuantizeQ8_1Definition) {
  std::mt19937 rng(7);
  const int64_t n = 8 * kQK;
  std::vector<float> x = random_floats(n, rng);
  for (int j = 0; j < kQK; ++j) x[kQK + j] = 0.0f;  // an all-zero block
  std::vector<BlockQ8_1> q(n / kQK);
  std::vector<BlockQ8_0> q0(n / kQK);
  table().of(DType::Q8_1).quantize_row(x.data(), q.data(), n);
  table().of(DType::Q8_0).quantize_row(x.data(), q0.data(), n);
  for (int64_t b = 0; b < n / kQK; ++b) {
    float amax = 0.0f;
    int sum = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[b * kQK + j]));
    EXPECT_EQ(q[b].d, fp32_to_fp16(amax / 127.0f));
    EXPECT_EQ(q[b].d, q0[b].d);
    EXPECT_EQ(0, std::memcmp(q[b].qs, q0[b].qs, kQK)) << "qs as Q8_0, block " << b;
    for (int j = 0; j < kQK; ++j) sum += q[b].qs[j];
    EXPECT_EQ(q[b].s, fp32_to_fp16(static_cast<float>(sum) * (amax / 127.0f))) << "block " << b;
  }
  std::vector<float> back(n);
  table().of(DType::Q8_1).dequantize_row(q.data(), back.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const float d = fp16_to_fp32(q[i / kQK].d);
    EXPECT_LE(std::fabs(back[i] - x[i]), 0.5f * d + 1e-3f * std::fabs(x[i]) + 1e-30f) << i;
  }
}

// Q8_K: iscale = -127 / (element of largest |x|), q = min(127, nearest(iscale*x)),
// d = 1/iscale, bsums = sums of 16 (ggml quantize_row_q8_K_ref).
TEST(GenericKernels, QuantizeQ8_KDefinition) {
  std::mt19937 rng(11);
  const int64_t n = 3 * kQKK;
  std::vector<float> x = random_floats(n, rng);
  for (int j = 0; j < kQKK; ++j) x[kQKK + j] = 0.0f;  // block 1: zeros
  x[2 * kQKK + 5] = -9.0f;                              // block 2: negative extreme
  std::vector<BlockQ8_K> q(n / kQKK);
  table().of(DType::Q8_K).quantize_row(x.data(), q.data(), n);
  EXPECT_EQ(q[1].d, 0.0f);
  for (int j = 0; j < kQKK; ++j) EXPECT_EQ(q[1].qs[j], 0);
  EXPECT_EQ(q[2].qs[5], -127);
  EXPECT_GT(q[2].d, 0.0f);  // max element negative -> iscale positive
  for (int64_t b = 0; b < n / kQKK; ++b) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQKK; ++j) {
      if (std::fabs(x[b * kQKK + j]) > amax) {
        amax = std::fabs(x[b * kQKK + j]);
        max = x[b * kQKK + j];
      }
    }
    if (amax == 0.0f) continue;
    const float iscale = -127.0f / max;
    EXPECT_EQ(q[b].d, 1.0f / iscale) << "block " << b;
    for (int j = 0; j < kQKK; ++j) {
      const float v = iscale * x[b * kQKK + j];
      EXPECT_LE(std::fabs(static_cast<float>(q[b].qs[j]) - v), 0.5f) << "block " << b << " j " << j;
    }
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += q[b].qs[16 * g + l];
      EXPECT_EQ(q[b].bsums[g], sum);
    }
  }
  std::vector<float> back(n);
  table().of(DType::Q8_K).dequantize_row(q.data(), back.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_LE(std::fabs(back[i] - x[i]), 0.5001f * std::fabs(q[i / kQKK].d) + 1e-30f) << i;
  }
}

TEST(GenericKernels, TableShape) {
  const struct {
    DType w, act;
  } kPairs[] = {{DType::F32, DType::F32},   {DType::F16, DType::F32},   {DType::BF16, DType::F32},
                {DType::Q4_0, DType::Q8_0}, {DType::Q5_0, DType::Q8_0}, {DType::Q8_0, DType::Q8_0},
                {DType::Q4_1, DType::Q8_1}, {DType::Q5_1, DType::Q8_1}, {DType::Q4_K, DType::Q8_K},
                {DType::Q5_K, DType::Q8_K}, {DType::Q6_K, DType::Q8_K}, {DType::Q2_K, DType::Q8_K},
                {DType::Q3_K, DType::Q8_K}, {DType::IQ4_NL, DType::Q8_0}, {DType::IQ4_XS, DType::Q8_K},
                {DType::Q8_A, DType::Q8_1}};
  EXPECT_STREQ(table().isa, "generic");
  for (auto p : kPairs) {
    EXPECT_EQ(table().of(p.w).vec_dot_type, p.act) << dtype_name(p.w);
    EXPECT_NE(table().of(p.w).gemm, nullptr) << dtype_name(p.w);
    EXPECT_NE(table().of(p.act).quantize_row, nullptr) << dtype_name(p.act);
    EXPECT_NE(table().of(p.act).dequantize_row, nullptr) << dtype_name(p.act);
  }
  EXPECT_EQ(table().of(DType::Q8_K).gemm, nullptr);  // activation-only type
}

// ---- (3, 4) gemm against float64 of dequantized operands, odd shapes and strides.
struct GemmCase {
  std::vector<uint8_t> w;    // n_rows rows, w_stride bytes apart
  std::vector<uint8_t> xq;   // m rows of vec_dot_type, xq_stride bytes apart
  size_t w_stride, xq_stride;
  std::vector<double> ref;   // [m, n_rows] float64 reference
  std::vector<double> tol;   // [m, n_rows] allowed |y - ref|
};

GemmCase make_case(const WeightType& wt, int64_t K, int64_t n_rows, int64_t m, std::mt19937& rng) {
  const TypeKernels& k = table().of(wt.type);
  const DType act = k.vec_dot_type;
  GemmCase c;
  c.w_stride = row_bytes(wt.type, K) + 8;  // padded strides: rows are not contiguous
  c.xq_stride = row_bytes(act, K) + 4;
  c.w.assign(c.w_stride * n_rows, 0xCD);
  c.xq.assign(c.xq_stride * m, 0xCD);
  std::vector<float> wf(n_rows * K), xf(m * K);
  for (int64_t r = 0; r < n_rows; ++r) {
    const std::vector<uint8_t> row = random_row(wt, K, rng);
    std::memcpy(c.w.data() + r * c.w_stride, row.data(), row.size());
    k.dequantize_row(row.data(), wf.data() + r * K, K);
  }
  for (int64_t i = 0; i < m; ++i) {
    const std::vector<float> x = random_floats(K, rng);
    table().of(act).quantize_row(x.data(), c.xq.data() + i * c.xq_stride, K);
    table().of(act).dequantize_row(c.xq.data() + i * c.xq_stride, xf.data() + i * K, K);
  }
  c.ref.assign(m * n_rows, 0.0);
  c.tol.assign(m * n_rows, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < n_rows; ++r) {
      double sum = 0.0, mag = 0.0, extra = 0.0;
      for (int64_t j = 0; j < K; ++j) {
        const double p = static_cast<double>(wf[r * K + j]) * xf[i * K + j];
        sum += p;
        mag += std::fabs(p);
      }
      if (act == DType::Q8_1) {
        // llama.cpp folds the weight min m_w into s_x = fp16(d_x * sum q_x): one fp16
        // rounding (unit roundoff 2^-11; 2^-10 allowed) of m_w * s_x per block.
        for (int64_t b = 0; b < K / kQK; ++b) {
          const auto* wb = c.w.data() + r * c.w_stride + b * dtype_info(wt.type).type_size;
          const auto* xb = reinterpret_cast<const BlockQ8_1*>(c.xq.data() + i * c.xq_stride) + b;
          uint16_t mh;
          std::memcpy(&mh, wb + 2, 2);
          extra += std::ldexp(std::fabs(static_cast<double>(fp16_to_fp32(mh)) * fp16_to_fp32(xb->s)), -10);
        }
      }
      c.ref[i * n_rows + r] = sum;
      // Float accumulation over K/32 blocks: a few ulps of the magnitudes.
      c.tol[i * n_rows + r] = 1e-6 * mag + extra + 1e-30;
    }
  }
  return c;
}

std::vector<int64_t> test_ks(DType t) {
  const int64_t bs = dtype_info(t).block_size;
  if (bs == kQKK) return {256, 768};
  if (bs == kQK) return {32, 96, 160, 512};
  return {1, 7, 96, 300};
}

TEST(GenericKernels, GemmMatchesFloat64Reference) {
  std::mt19937 rng(1234);
  for (const WeightType& wt : weight_types()) {
    for (int64_t K : test_ks(wt.type)) {
      for (int64_t n_rows : {1, 5, 17}) {
        for (int64_t m : {1, 3, 7}) {
          SCOPED_TRACE(std::string(dtype_name(wt.type)) + " K=" + std::to_string(K) +
                       " n_rows=" + std::to_string(n_rows) + " m=" + std::to_string(m));
          GemmCase c = make_case(wt, K, n_rows, m, rng);
          const int64_t ldy = n_rows + 3;
          std::vector<float> y(m * ldy, -777.0f);
          table().of(wt.type).gemm(K, c.w.data(), c.w_stride, n_rows, c.xq.data(), c.xq_stride,
                                   m, y.data(), ldy);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t r = 0; r < n_rows; ++r) {
              const double err = std::fabs(y[i * ldy + r] - c.ref[i * n_rows + r]);
              EXPECT_LE(err, c.tol[i * n_rows + r])
                  << "y[" << i << "," << r << "]=" << y[i * ldy + r]
                  << " ref=" << c.ref[i * n_rows + r];
            }
            for (int64_t r = n_rows; r < ldy; ++r) {
              EXPECT_EQ(y[i * ldy + r], -777.0f) << "gemm wrote past n_rows";
            }
          }
        }
      }
    }
  }
}

// ---- (5) batch invariance: row i computed alone equals row i within m = 7, bitwise.
TEST(GenericKernels, GemmBatchInvariant) {
  std::mt19937 rng(99);
  for (const WeightType& wt : weight_types()) {
    SCOPED_TRACE(std::string(dtype_name(wt.type)));
    const int64_t K = dtype_info(wt.type).block_size == 1 ? 96 : 2 * kQKK;
    const int64_t n_rows = 17, m = 7;
    GemmCase c = make_case(wt, K, n_rows, m, rng);
    const auto& gemm = table().of(wt.type).gemm;
    std::vector<float> all(m * n_rows);
    gemm(K, c.w.data(), c.w_stride, n_rows, c.xq.data(), c.xq_stride, m, all.data(), n_rows);
    for (int64_t i = 0; i < m; ++i) {
      std::vector<float> one(n_rows);
      gemm(K, c.w.data(), c.w_stride, n_rows, c.xq.data() + i * c.xq_stride, c.xq_stride, 1,
           one.data(), n_rows);
      EXPECT_EQ(0, std::memcmp(one.data(), all.data() + i * n_rows, n_rows * sizeof(float)))
          << "row " << i;
      // A single weight row (n_rows = 1) gives the same value too.
      float single;
      gemm(K, c.w.data() + 3 * c.w_stride, c.w_stride, 1, c.xq.data() + i * c.xq_stride,
           c.xq_stride, 1, &single, 1);
      EXPECT_EQ(0, std::memcmp(&single, all.data() + i * n_rows + 3, sizeof(float)));
    }
  }
}

TEST(GenericKernels, DenseHelpers) {
  std::mt19937 rng(5);
  const int64_t n = 37;
  const std::vector<float> a = random_floats(n, rng), b = random_floats(n, rng);
  double ref = 0.0;
  for (int64_t i = 0; i < n; ++i) ref += static_cast<double>(a[i]) * b[i];
  EXPECT_NEAR(table().dot_f32(n, a.data(), b.data()), ref, 1e-6 * std::fabs(ref) + 1e-6);
  EXPECT_EQ(table().dot_f32(0, a.data(), b.data()), 0.0f);
  std::vector<float> y = b;
  table().axpy_f32(n, 0.5f, a.data(), y.data());
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], b[i] + 0.5f * a[i]);
  table().scale_f32(n, -2.0f, y.data());
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], -2.0f * (b[i] + 0.5f * a[i]));
}

}  // namespace
}  // namespace specula::kernels
