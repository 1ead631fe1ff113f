// tests/kernels/kernel_test_util.h — random weights and activations for the kernel tests
// (avx2_test.cpp, avx512_test.cpp): valid blocks of every weight type with finite fp16
// scales, normal activations quantized by the generic quantizers.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "kernels/kernels.h"
#include "core/quant_blocks.h"

namespace specula::kernels {

inline uint16_t rand_half(std::mt19937& rng, float lo, float hi) {
  return fp32_to_fp16(std::uniform_real_distribution<float>(lo, hi)(rng));
}

// n_rows rows of K elements of type t with random quants and finite scales.
inline std::vector<uint8_t> random_weights(DType t, int64_t K, int64_t n_rows, std::mt19937& rng) {
  const size_t rb = row_bytes(t, K);
  std::vector<uint8_t> w(rb * static_cast<size_t>(n_rows));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = K * n_rows;
  switch (t) {
    case DType::F32: {
      auto* f = reinterpret_cast<float*>(w.data());
      for (int64_t i = 0; i < n; ++i) f[i] = nd(rng);
      break;
    }
    case DType::F16: {
      auto* h = reinterpret_cast<uint16_t*>(w.data());
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(nd(rng));
      break;
    }
    case DType::BF16: {
      auto* h = reinterpret_cast<uint16_t*>(w.data());
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(nd(rng));
      break;
    }
    case DType::Q4_0:
      for (auto* b = reinterpret_cast<BlockQ4_0*>(w.data()); b < reinterpret_cast<BlockQ4_0*>(w.data() + w.size()); ++b)
        b->d = rand_half(rng, -0.1f, 0.1f);
      break;
    case DType::Q4_1:
      for (auto* b = reinterpret_cast<BlockQ4_1*>(w.data()); b < reinterpret_cast<BlockQ4_1*>(w.data() + w.size()); ++b) {
        b->d = rand_half(rng, 0.0f, 0.1f);
        b->m = rand_half(rng, -1.0f, 0.0f);
      }
      break;
    case DType::Q8_A: {
      std::uniform_real_distribution<float> d(0.0f, 0.01f), m(-1.0f, 1.0f);
      for (auto* b = reinterpret_cast<BlockQ8_A*>(w.data()); b < reinterpret_cast<BlockQ8_A*>(w.data() + w.size()); ++b) {
        b->d = d(rng);
        b->m = m(rng);
      }
      break;
    }
    case DType::Q5_0:
      for (auto* b = reinterpret_cast<BlockQ5_0*>(w.data()); b < reinterpret_cast<BlockQ5_0*>(w.data() + w.size()); ++b)
        b->d = rand_half(rng, -0.1f, 0.1f);
      break;
    case DType::Q5_1:
      for (auto* b = reinterpret_cast<BlockQ5_1*>(w.data()); b < reinterpret_cast<BlockQ5_1*>(w.data() + w.size()); ++b) {
        b->d = rand_half(rng, 0.0f, 0.1f);
        b->m = rand_half(rng, -1.0f, 0.0f);
      }
      break;
    case DType::Q8_0:
      for (auto* b = reinterpret_cast<BlockQ8_0*>(w.data()); b < reinterpret_cast<BlockQ8_0*>(w.data() + w.size()); ++b)
        b->d = rand_half(rng, -0.01f, 0.01f);
      break;
    case DType::Q4_K:
      for (auto* b = reinterpret_cast<BlockQ4_K*>(w.data()); b < reinterpret_cast<BlockQ4_K*>(w.data() + w.size()); ++b) {
        b->d = rand_half(rng, 0.0f, 0.01f);
        b->dmin = rand_half(rng, 0.0f, 0.01f);
      }
      break;
    case DType::Q5_K:
      for (auto* b = reinterpret_cast<BlockQ5_K*>(w.data()); b < reinterpret_cast<BlockQ5_K*>(w.data() + w.size()); ++b) {
        b->d = rand_half(rng, 0.0f, 0.01f);
        b->dmin = rand_half(rng, 0.0f, 0.01f);
      }
      break;
    case DType::Q6_K:
      for (auto* b = reinterpret_cast<BlockQ6_K*>(w.data()); b < reinterpret_cast<BlockQ6_K*>(w.data() + w.size()); ++b)
        b->d = rand_half(rng, -0.01f, 0.01f);
      break;
    case DType::Q2_K:
      for (auto* b = reinterpret_cast<BlockQ2_K*>(w.data()); b < reinterpret_cast<BlockQ2_K*>(w.data() + w.size()); ++b) {
        b->d = rand_half(rng, 0.0f, 0.01f);
        b->dmin = rand_half(rng, 0.0f, 0.01f);
      }
      break;
    case DType::Q3_K:
      for (auto* b = reinterpret_cast<BlockQ3_K*>(w.data()); b < reinterpret_cast<BlockQ3_K*>(w.data() + w.size()); ++b)
        b->d = rand_half(rng, -0.01f, 0.01f);
      break;
    case DType::IQ4_NL:
      for (auto* b = reinterpret_cast<BlockIQ4_NL*>(w.data()); b < reinterpret_cast<BlockIQ4_NL*>(w.data() + w.size()); ++b)
        b->d = rand_half(rng, -0.01f, 0.01f);
      break;
    case DType::IQ4_XS:
      for (auto* b = reinterpret_cast<BlockIQ4_XS*>(w.data()); b < reinterpret_cast<BlockIQ4_XS*>(w.data() + w.size()); ++b)
        b->d = rand_half(rng, -0.01f, 0.01f);
      break;
    default:
      ADD_FAILURE() << "unexpected type";
  }
  return w;
}

inline std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = nd(rng);
  return x;
}

// m activation rows of K, quantized by the generic quantizer to vec_dot_type of w.
inline std::vector<uint8_t> quantized_acts(DType w, int64_t K, int64_t m, std::mt19937& rng) {
  const DType vt = generic_table().of(w).vec_dot_type;
  const size_t rb = row_bytes(vt, K);
  std::vector<uint8_t> xq(rb * static_cast<size_t>(m));
  const std::vector<float> x = random_floats(K * m, rng);
  for (int64_t i = 0; i < m; ++i) {
    generic_table().of(vt).quantize_row(x.data() + i * K, xq.data() + rb * static_cast<size_t>(i), K);
  }
  return xq;
}

// y [m, ldy] of a gemm under test against the reference yg: outputs past n_rows in each
// row untouched (both started at -7), the others finite with NMSE below 1e-10.
inline void expect_gemm_matches(const std::vector<float>& y, const std::vector<float>& yg, int64_t m, int64_t ldy,
                                int64_t n_rows) {
  double err = 0, ref = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < ldy; ++r) {
      const float a = y[i * ldy + r], g = yg[i * ldy + r];
      if (r >= n_rows) {
        ASSERT_EQ(a, -7.0f) << "wrote outside n_rows";
        continue;
      }
      ASSERT_TRUE(std::isfinite(a));
      err += (double(a) - g) * (double(a) - g);
      ref += double(g) * g;
    }
  ASSERT_GT(ref, 0.0);
  EXPECT_LT(err / ref, 1e-10);
}

}  // namespace specula::kernels
