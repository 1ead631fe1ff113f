// Tests for model/attention over quantized layouts against a float64 reference: a key
// offset / key scale / value offset (AttentionSpec) leave attention unchanged in exact
// arithmetic and shrink the quantization error when keys carry a large constant or a few
// high-gain channels (as Qwen2's K bias and QK-norm gains do); plain float layouts ignore
// them (their results do not change at all).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "model/attention.h"

namespace specula {
namespace {

constexpr int64_t kHd = 64, kT = 48;

struct Data {
  std::vector<float> q, k, v;  // [T, hd] each (one head, one kv head)
};

// Keys: a constant of 150 in channels 60..63 plus N(0,1), channels 0..7 with gain 12;
// values: a constant of 30 in channels 0..3 plus N(0,1).
Data make_data() {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Data d;
  for (int64_t t = 0; t < kT; ++t)
    for (int64_t c = 0; c < kHd; ++c) {
      d.q.push_back(nd(rng));
      d.k.push_back((c >= 60 ? 150.0f : 0.0f) + (c < 8 ? 12.0f : 1.0f) * nd(rng));
      d.v.push_back((c < 4 ? 30.0f : 0.0f) + nd(rng));
    }
  return d;
}

// Causal attention in float64: out [T, hd].
std::vector<double> reference(const Data& d, double scale) {
  std::vector<double> out(kT * kHd, 0.0);
  for (int64_t t = 0; t < kT; ++t) {
    std::vector<double> s(t + 1);
    double mx = -1e300;
    for (int64_t j = 0; j <= t; ++j) {
      double acc = 0;
      for (int64_t c = 0; c < kHd; ++c) acc += static_cast<double>(d.q[t * kHd + c]) * d.k[j * kHd + c];
      s[j] = acc * scale;
      mx = std::max(mx, s[j]);
    }
    double sum = 0;
    for (double& x : s) sum += (x = std::exp(x - mx));
    for (int64_t j = 0; j <= t; ++j)
      for (int64_t c = 0; c < kHd; ++c) out[t * kHd + c] += s[j] / sum * d.v[j * kHd + c];
  }
  return out;
}

// specula's attention over one row with this spec and cache options; RMS error vs ref.
double rms_error(const Data& d, const AttentionSpec& spec, const CacheOptions& o, std::string* name = nullptr) {
  LayerSpec ls;
  ls.attention = spec;
  auto st = StateRows::create({ls}, o, kernels::active(), 256);
  EXPECT_TRUE(st.is_ok()) << st.message();
  EXPECT_TRUE(st->reserve(1).is_ok());
  st->insert(st->new_row().value());
  if (name) *name = st->layout(0).info().name;
  ThreadPool pool(2);
  const float scale = 1.0f / 8.0f;
  std::vector<int32_t> token_row(kT, 0);
  const int32_t rows[1] = {0};
  const int64_t offset[2] = {0, kT};
  AttentionArgs a;
  a.n_heads = 1;
  a.n_kv_heads = 1;
  a.head_dim = kHd;
  a.scale = scale;
  a.M = kT;
  a.B = 1;
  a.rows = rows;
  a.offset = offset;
  a.token_row = token_row.data();
  a.kt = &kernels::active();
  std::vector<float> out(kT * kHd);
  AttentionScratch scratch;
  attention(pool, a, *st, d.q.data(), d.k.data(), d.v.data(), out.data(), scratch);
  const auto ref = reference(d, scale);
  double e = 0;
  for (size_t i = 0; i < out.size(); ++i) e += (out[i] - ref[i]) * (out[i] - ref[i]);
  return std::sqrt(e / static_cast<double>(out.size()));
}

TEST(AttentionLayouts, OffsetsAndScalesShrinkQuantizationError) {
  const Data d = make_data();
  AttentionSpec plain = attention_spec(1, kHd, 0);
  AttentionSpec centred = plain;
  auto ko = std::make_shared<std::vector<float>>(kHd, 0.0f), vo = std::make_shared<std::vector<float>>(kHd, 0.0f);
  auto ks = std::make_shared<std::vector<float>>(kHd, 1.0f);
  for (int64_t c = 60; c < kHd; ++c) (*ko)[c] = 150.0f;
  for (int64_t c = 0; c < 4; ++c) (*vo)[c] = 30.0f;
  for (int64_t c = 0; c < 8; ++c) (*ks)[c] = 12.0f;
  centred.key_offset = ko;
  centred.value_offset = vo;
  centred.key_scale = ks;
  for (const char* t : {"q8_0", "q4_0", "turbo4"}) {
    CacheOptions o;
    o.type_k = o.type_v = t;
    std::string name;
    const double e_plain = rms_error(d, plain, o);
    const double e_centred = rms_error(d, centred, o, &name);
    std::printf("[attention %s] RMS error vs float64: plain %.5f, centred %.5f (%s)\n", t, e_plain, e_centred,
                name.c_str());
    EXPECT_LT(e_centred, 0.5 * e_plain) << t;
    EXPECT_NE(name.find("centred"), std::string::npos);
  }
  // f16 layouts ignore them: bitwise the same output, no "centred" in the name.
  CacheOptions f16;
  std::string name;
  EXPECT_EQ(rms_error(d, plain, f16), rms_error(d, centred, f16, &name));
  EXPECT_EQ(name.find("centred"), std::string::npos);
  EXPECT_LT(rms_error(d, plain, f16), 0.05);
}

}  // namespace
}  // namespace specula
