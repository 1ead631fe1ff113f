// state/kv_codec.h — how one head vector of K or V is stored in a KV cache.
//
// A codec turns one f32 head vector x [dim] into `bytes()` stored bytes and back. The
// cache layouts (state/kv_layout.h) store every (position, kv head) through one codec for
// K and one for V; attention decodes stored rows to f32 and runs the same dot/axpy
// kernels whatever the codec.
//
// Codecs (the names are the `--cache-type-k/-v` values):
//   f32, f16, bf16   plain floats (f16 is llama.cpp's default cache type; decode is exact).
//   q8_0, q4_0       ggml's legacy blocks of 32 along head_dim (ggml `quantize_row_q8_0_ref`
//                    / `quantize_row_q4_0_ref`), so a user's numbers compare with llama.cpp's
//                    `-ctk q8_0` / `-ctk q4_0`. dim must be a multiple of 32.
//   turbo3, turbo4,  rotation-based scalar quantization, TurboQuant_mse (Zandieh, Daliri,
//   turbo5, and the  (the .5 types give half the rotated coordinates one bit more)
//                    Hadian, Mirrokni 2025, "TurboQuant: Online Vector Quantization with
//                    Near-optimal Distortion Rate", arXiv:2504.19874, Algorithm 1): the vector
//                    is rotated by a fixed random orthogonal matrix H = W·D/sqrt(dim) (D random
//                    signs, W the Walsh–Hadamard matrix), so each coordinate of the rotated unit
//                    vector follows the known density f(t) ∝ (1 − t²)^((dim−3)/2); each
//                    coordinate is replaced by the nearest of 2^b Lloyd–Max centroids of that
//                    density (b = 3, 4 or 5; turbo3.5 / turbo4.5 use b+1 bits for half the
//                    coordinates), and one f16 scale per vector is kept (the
//                    least-squares scale of the centroid vector, which also restores the norm).
//                    dim must be a power of two. Stored bits per value: b + 16/dim.
//                    Keys are the sensitive half of a cache (their error goes through the
//                    softmax): e.g. -ctk turbo4.5 -ctv turbo3 averages 3.8 bits per value.
//                    Stored vectors stay in the rotated basis: attention rotates each query
//                    once (q·k = Hq·Hk) and un-rotates its V accumulation once (Σp·Hv = H Σp·v).
// Does not know positions, rows or attention.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "specula/status.h"

namespace specula {

class KvCodec {
 public:
  virtual ~KvCodec() = default;
  const std::string& name() const { return name_; }
  int64_t dim() const { return dim_; }
  size_t bytes() const { return bytes_; }  // stored bytes per head vector
  double bits_per_value() const { return 8.0 * static_cast<double>(bytes_) / static_cast<double>(dim_); }
  // True when decode() returns the vector in a rotated basis (see to_storage_basis()).
  virtual bool rotated() const { return false; }

  // x [dim] f32 in the model's basis -> out [bytes()].
  virtual void encode(const float* x, uint8_t* out) const = 0;
  // in [bytes()] -> y [dim] f32 in the storage basis (the model's basis unless rotated()).
  virtual void decode(const uint8_t* in, float* y) const = 0;
  // Values [d0, d1) of decode(in) -> y [d1 - d0], bitwise those of decode() (0 <= d0 < d1
  // <= dim). Plain floats and block codecs (when d0 and d1 fall on block bounds) decode only
  // the range; otherwise the whole vector is decoded and the range copied.
  virtual void decode_range(const uint8_t* in, int64_t d0, int64_t d1, float* y) const;
  // In place: model basis -> storage basis (a query before its dot products with stored
  // keys) and back (an accumulation of stored values). Identity unless rotated().
  virtual void to_storage_basis(float* x) const { (void)x; }
  virtual void from_storage_basis(float* x) const { (void)x; }

 protected:
  KvCodec(std::string name, int64_t dim, size_t bytes) : name_(std::move(name)), dim_(dim), bytes_(bytes) {}

 private:
  std::string name_;
  int64_t dim_;
  size_t bytes_;
};

// A codec by name for head vectors of `dim` values. Errors: an unknown name (the message
// lists the valid ones), or a dim the codec cannot store ("q8_0 needs head_dim a multiple
// of 32, got 48").
Result<std::shared_ptr<const KvCodec>> make_kv_codec(const std::string& name, int64_t dim,
                                                     const kernels::KernelTable& kt);

// f16 storage in `basis`'s storage basis (the full-precision tier of a delayed layout whose
// quantized tier is `basis`): encode = basis rotation, then f16; decode = f16 to f32.
std::shared_ptr<const KvCodec> make_f16_codec_like(std::shared_ptr<const KvCodec> basis,
                                                   const kernels::KernelTable& kt);

// The valid codec names, in a stable order.
std::vector<std::string> kv_codec_names();

// TurboQuant centroids for one coordinate of a random unit vector in R^dim, 2^bits of them,
// ascending (exposed for tests). Computed once per (dim, bits) by Lloyd–Max iteration on
// the exact density, in double.
const std::vector<float>& turbo_centroids(int64_t dim, int bits);

}  // namespace specula
