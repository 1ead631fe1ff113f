// state/kv_codec.cpp — the KV codecs (see kv_codec.h).
#include "state/kv_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <utility>

#include "core/fp16.h"

namespace specula {
namespace {

constexpr int64_t kMaxDim = 4096;

// --- plain floats --------------------------------------------------------------------------

class F32Codec final : public KvCodec {
 public:
  explicit F32Codec(int64_t dim) : KvCodec("f32", dim, static_cast<size_t>(dim) * 4) {}
  void encode(const float* x, uint8_t* out) const override { std::memcpy(out, x, bytes()); }
  void decode(const uint8_t* in, float* y) const override { std::memcpy(y, in, bytes()); }
  void decode_range(const uint8_t* in, int64_t d0, int64_t d1, float* y) const override {
    std::memcpy(y, in + d0 * 4, static_cast<size_t>(d1 - d0) * 4);
  }
};

// Through the kernel table's row converters (dequantize exact; encode = the activation
// quantizer of that type, or a scalar conversion for f16/bf16).
class TableCodec final : public KvCodec {
 public:
  TableCodec(std::string name, int64_t dim, DType type, const kernels::KernelTable& kt,
             void (*encode_fn)(const float*, void*, int64_t))
      : KvCodec(std::move(name), dim, row_bytes(type, dim)),
        decode_(kt.of(type).dequantize_row),
        encode_(encode_fn),
        type_(type),
        block_(dtype_info(type).block_size) {}
  void encode(const float* x, uint8_t* out) const override { encode_(x, out, dim()); }
  void decode(const uint8_t* in, float* y) const override { decode_(in, y, dim()); }
  void decode_range(const uint8_t* in, int64_t d0, int64_t d1, float* y) const override {
    // Every element of these types is decoded from its own block alone.
    if (d0 % block_ != 0 || d1 % block_ != 0) return KvCodec::decode_range(in, d0, d1, y);
    decode_(in + row_bytes(type_, d0), y, d1 - d0);
  }

 private:
  void (*decode_)(const void*, float*, int64_t);
  void (*encode_)(const float*, void*, int64_t);
  DType type_;
  int64_t block_;
};

void encode_f16(const float* x, void* y, int64_t n) {
  auto* h = static_cast<uint16_t*>(y);
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(x[i]);
}
void encode_bf16(const float* x, void* y, int64_t n) {
  auto* h = static_cast<uint16_t*>(y);
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(x[i]);
}

// --- TurboQuant_mse -------------------------------------------------------------------------

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// In-place unnormalized fast Walsh–Hadamard transform of n = 2^k values.
void fwht(float* x, int64_t n) {
  for (int64_t h = 1; h < n; h *= 2)
    for (int64_t i = 0; i < n; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
}

// Lloyd–Max quantizer of the density f(t) ∝ (1 − t²)^((dim−3)/2) on [−1, 1] (a coordinate of
// a uniformly random unit vector in R^dim), on a fine grid, in double.
std::vector<float> lloyd_max(int64_t dim, int bits) {
  const int levels = 1 << bits;
  const double sd = 1.0 / std::sqrt(static_cast<double>(dim));
  const double T = std::min(1.0, 12.0 * sd);
  constexpr int kGrid = 40001;
  std::vector<double> t(kGrid), w(kGrid);
  const double e = (static_cast<double>(dim) - 3.0) / 2.0;
  double wsum = 0.0;
  for (int i = 0; i < kGrid; ++i) {
    t[i] = -T + 2.0 * T * i / (kGrid - 1);
    const double one = 1.0 - t[i] * t[i];
    w[i] = one > 0.0 ? std::exp(e * std::log(one)) : 0.0;
    wsum += w[i];
  }
  for (double& x : w) x /= wsum;
  // Start from quantiles.
  std::vector<double> c(levels);
  {
    double cum = 0.0;
    int k = 0;
    for (int i = 0; i < kGrid && k < levels; ++i) {
      cum += w[i];
      while (k < levels && cum >= (k + 0.5) / levels) c[k++] = t[i];
    }
    for (; k < levels; ++k) c[k] = T;
  }
  std::vector<double> num(levels), den(levels);
  for (int it = 0; it < 500; ++it) {
    std::fill(num.begin(), num.end(), 0.0);
    std::fill(den.begin(), den.end(), 0.0);
    int k = 0;
    for (int i = 0; i < kGrid; ++i) {
      while (k + 1 < levels && t[i] > 0.5 * (c[k] + c[k + 1])) ++k;
      num[k] += w[i] * t[i];
      den[k] += w[i];
    }
    double moved = 0.0;
    for (int j = 0; j < levels; ++j) {
      const double nc = den[j] > 0.0 ? num[j] / den[j] : c[j];
      moved = std::max(moved, std::fabs(nc - c[j]));
      c[j] = nc;
    }
    if (moved < 1e-12 * sd) break;
  }
  // Exact symmetry (the density is even).
  std::vector<float> out(levels);
  for (int j = 0; j < levels / 2; ++j) {
    const double m = 0.5 * (c[levels - 1 - j] - c[j]);
    out[j] = static_cast<float>(-m);
    out[levels - 1 - j] = static_cast<float>(m);
  }
  return out;
}

// Codes are a little-endian bitstream (code i at bit offset sum of the widths before it):
// the first n_hi coordinates of the rotated vector use hi bits, the rest lo bits (after the
// rotation every coordinate has the same distribution, so which ones get the extra bit
// does not matter). turbo4 = 4/4, turbo4.5 = 5 bits for half the coordinates, 4 for the rest.
class TurboCodec final : public KvCodec {
 public:
  TurboCodec(std::string name, int64_t dim, int hi, int lo)
      : KvCodec(std::move(name), dim, 2 + static_cast<size_t>((dim / 2 * hi + dim / 2 * lo + 7) / 8)),
        hi_(hi), lo_(lo), n_hi_(dim / 2),
        c_hi_(turbo_centroids(dim, hi)), c_lo_(turbo_centroids(dim, lo)),
        signs_(static_cast<size_t>(dim)),
        inv_sqrt_(1.0f / std::sqrt(static_cast<float>(dim))) {
    uint64_t s = 0x7E4B0C0DE5EEDULL ^ static_cast<uint64_t>(dim);
    for (int64_t i = 0; i < dim; i += 64) {
      const uint64_t r = splitmix64(s);
      for (int64_t j = i; j < std::min(dim, i + 64); ++j) signs_[j] = ((r >> (j - i)) & 1) ? -1.0f : 1.0f;
    }
    for (size_t j = 0; j + 1 < c_hi_.size(); ++j) b_hi_.push_back(0.5f * (c_hi_[j] + c_hi_[j + 1]));
    for (size_t j = 0; j + 1 < c_lo_.size(); ++j) b_lo_.push_back(0.5f * (c_lo_[j] + c_lo_[j + 1]));
  }
  bool rotated() const override { return true; }

  void to_storage_basis(float* x) const override {
    const int64_t n = dim();
    for (int64_t i = 0; i < n; ++i) x[i] *= signs_[i];
    fwht(x, n);
    for (int64_t i = 0; i < n; ++i) x[i] *= inv_sqrt_;
  }
  void from_storage_basis(float* x) const override {
    const int64_t n = dim();
    fwht(x, n);
    for (int64_t i = 0; i < n; ++i) x[i] *= inv_sqrt_ * signs_[i];
  }

  void encode(const float* x, uint8_t* out) const override {
    const int64_t n = dim();
    float u[kMaxDim];
    std::memcpy(u, x, static_cast<size_t>(n) * sizeof(float));
    to_storage_basis(u);
    double norm2 = 0.0;
    for (int64_t i = 0; i < n; ++i) norm2 += static_cast<double>(u[i]) * u[i];
    const double norm = std::sqrt(norm2);
    double uc = 0.0, cc = 0.0;
    std::memset(out, 0, bytes());
    uint8_t* q = out + 2;
    int64_t bit = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool hi = i < n_hi_;
      const std::vector<float>& bounds = hi ? b_hi_ : b_lo_;
      const float t = norm > 0.0 ? static_cast<float>(u[i] / norm) : 0.0f;
      const uint32_t k = static_cast<uint32_t>(std::upper_bound(bounds.begin(), bounds.end(), t) - bounds.begin());
      const double c = (hi ? c_hi_ : c_lo_)[k];
      uc += static_cast<double>(u[i]) * c;
      cc += c * c;
      const int w = hi ? hi_ : lo_;
      for (int b = 0; b < w; ++b, ++bit)
        if ((k >> b) & 1u) q[bit >> 3] = static_cast<uint8_t>(q[bit >> 3] | (1u << (bit & 7)));
    }
    // One scale per vector: the least-squares fit of the centroid vector to u (it also
    // restores the norm).
    const float scale = cc > 0.0 ? static_cast<float>(uc / cc) : 0.0f;
    const uint16_t h = fp32_to_fp16(scale);
    std::memcpy(out, &h, 2);
  }

  void decode(const uint8_t* in, float* y) const override {
    const int64_t n = dim();
    uint16_t h;
    std::memcpy(&h, in, 2);
    const float s = fp16_to_fp32(h);
    float lut_hi[256], lut_lo[256];
    for (size_t j = 0; j < c_hi_.size(); ++j) lut_hi[j] = s * c_hi_[j];
    for (size_t j = 0; j < c_lo_.size(); ++j) lut_lo[j] = s * c_lo_[j];
    const uint8_t* q = in + 2;
    if (hi_ == lo_ && hi_ == 4) {  // the common case, a byte holds two codes
      for (int64_t i = 0; i < n; i += 2) {
        y[i] = lut_hi[q[i / 2] & 15];
        y[i + 1] = lut_hi[q[i / 2] >> 4];
      }
      return;
    }
    uint64_t buf = 0;
    int have = 0;
    size_t pos = 0;
    const size_t nbytes = bytes() - 2;
    for (int64_t i = 0; i < n; ++i) {
      const int w = i < n_hi_ ? hi_ : lo_;
      while (have < w) {
        buf |= static_cast<uint64_t>(pos < nbytes ? q[pos] : 0) << have;
        ++pos;
        have += 8;
      }
      const uint32_t k = static_cast<uint32_t>(buf & ((1u << w) - 1));
      buf >>= w;
      have -= w;
      y[i] = (i < n_hi_ ? lut_hi : lut_lo)[k];
    }
  }

 private:
  int hi_, lo_;
  int64_t n_hi_;
  const std::vector<float>& c_hi_;
  const std::vector<float>& c_lo_;
  std::vector<float> b_hi_, b_lo_;  // midpoints between consecutive centroids
  std::vector<float> signs_;        // D: ±1 per coordinate
  float inv_sqrt_;
};

class F16LikeCodec final : public KvCodec {
 public:
  F16LikeCodec(std::shared_ptr<const KvCodec> basis, const kernels::KernelTable& kt)
      : KvCodec("f16", basis->dim(), static_cast<size_t>(basis->dim()) * 2),
        basis_(std::move(basis)),
        decode_(kt.of(DType::F16).dequantize_row) {}
  bool rotated() const override { return basis_->rotated(); }
  void to_storage_basis(float* x) const override { basis_->to_storage_basis(x); }
  void from_storage_basis(float* x) const override { basis_->from_storage_basis(x); }
  void encode(const float* x, uint8_t* out) const override {
    float u[kMaxDim];
    std::memcpy(u, x, static_cast<size_t>(dim()) * sizeof(float));
    basis_->to_storage_basis(u);
    encode_f16(u, out, dim());
  }
  void decode(const uint8_t* in, float* y) const override { decode_(in, y, dim()); }
  void decode_range(const uint8_t* in, int64_t d0, int64_t d1, float* y) const override {
    decode_(in + d0 * 2, y, d1 - d0);
  }

 private:
  std::shared_ptr<const KvCodec> basis_;
  void (*decode_)(const void*, float*, int64_t);
};

using Factory = std::function<Result<std::shared_ptr<const KvCodec>>(int64_t, const kernels::KernelTable&)>;

Status need_multiple(const char* name, int64_t dim, int64_t m) {
  if (dim % m != 0)
    return Status::error(std::string("[kv_codec] ") + name + " needs head_dim a multiple of " + std::to_string(m) +
                         ", got " + std::to_string(dim));
  return Status::ok();
}

Factory turbo_factory(std::string name, int hi, int lo) {
  return [name, hi, lo](int64_t d, const kernels::KernelTable&) -> Result<std::shared_ptr<const KvCodec>> {
    if (d < 8 || (d & (d - 1)) != 0)
      return Status::error("[kv_codec] " + name + " needs head_dim a power of two >= 8, got " + std::to_string(d));
    return std::shared_ptr<const KvCodec>(new TurboCodec(name, d, hi, lo));
  };
}

const std::vector<std::pair<std::string, Factory>>& factories() {
  static const std::vector<std::pair<std::string, Factory>> f = {
      {"f16",
       [](int64_t d, const kernels::KernelTable& kt) -> Result<std::shared_ptr<const KvCodec>> {
         return std::shared_ptr<const KvCodec>(new TableCodec("f16", d, DType::F16, kt, encode_f16));
       }},
      {"f32",
       [](int64_t d, const kernels::KernelTable&) -> Result<std::shared_ptr<const KvCodec>> {
         return std::shared_ptr<const KvCodec>(new F32Codec(d));
       }},
      {"bf16",
       [](int64_t d, const kernels::KernelTable& kt) -> Result<std::shared_ptr<const KvCodec>> {
         return std::shared_ptr<const KvCodec>(new TableCodec("bf16", d, DType::BF16, kt, encode_bf16));
       }},
      {"q8_0",
       [](int64_t d, const kernels::KernelTable& kt) -> Result<std::shared_ptr<const KvCodec>> {
         SPECULA_RETURN_IF_ERROR(need_multiple("q8_0", d, 32));
         return std::shared_ptr<const KvCodec>(
             new TableCodec("q8_0", d, DType::Q8_0, kt, kt.of(DType::Q8_0).quantize_row));
       }},
      {"q4_0",
       [](int64_t d, const kernels::KernelTable& kt) -> Result<std::shared_ptr<const KvCodec>> {
         SPECULA_RETURN_IF_ERROR(need_multiple("q4_0", d, 32));
         return std::shared_ptr<const KvCodec>(
             new TableCodec("q4_0", d, DType::Q4_0, kt, kt.of(DType::Q4_0).quantize_row));
       }},
      {"turbo3", turbo_factory("turbo3", 3, 3)},
      {"turbo3.5", turbo_factory("turbo3.5", 4, 3)},
      {"turbo4", turbo_factory("turbo4", 4, 4)},
      {"turbo4.5", turbo_factory("turbo4.5", 5, 4)},
      {"turbo5", turbo_factory("turbo5", 5, 5)},
  };
  return f;
}

}  // namespace

void KvCodec::decode_range(const uint8_t* in, int64_t d0, int64_t d1, float* y) const {
  float full[kMaxDim];
  decode(in, full);
  std::copy(full + d0, full + d1, y);
}

std::vector<std::string> kv_codec_names() {
  std::vector<std::string> n;
  for (const auto& [name, f] : factories()) n.push_back(name);
  return n;
}

Result<std::shared_ptr<const KvCodec>> make_kv_codec(const std::string& name, int64_t dim,
                                                     const kernels::KernelTable& kt) {
  if (dim <= 0 || dim > kMaxDim)
    return Status::error("[kv_codec] head_dim " + std::to_string(dim) + " outside [1, " + std::to_string(kMaxDim) + "]");
  for (const auto& [n, f] : factories())
    if (n == name) return f(dim, kt);
  std::string valid;
  for (const auto& n : kv_codec_names()) valid += (valid.empty() ? "" : ", ") + n;
  return Status::error("[kv_codec] unknown cache type '" + name + "' (valid: " + valid + ")");
}

std::shared_ptr<const KvCodec> make_f16_codec_like(std::shared_ptr<const KvCodec> basis,
                                                   const kernels::KernelTable& kt) {
  return std::make_shared<F16LikeCodec>(std::move(basis), kt);
}

const std::vector<float>& turbo_centroids(int64_t dim, int bits) {
  static std::mutex mu;
  static std::map<std::pair<int64_t, int>, std::unique_ptr<std::vector<float>>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[{dim, bits}];
  if (!slot) slot = std::make_unique<std::vector<float>>(lloyd_max(dim, bits));
  return *slot;
}

}  // namespace specula
