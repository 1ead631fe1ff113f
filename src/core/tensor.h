// core/tensor.h — owning f32 buffers and non-owning typed views.
//
// `Tensor` owns an aligned buffer, is move-only, and copies only through clone().
// `TensorView` is {data, dtype, shape} passed by value; it never outlives its owner.
// Shapes here are listed outermost first: a view of shape {N, K} is N rows of K
// contiguous elements (GGUF lists the same tensor as [K, N]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "specula/status.h"

namespace specula {

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

// Owning, 64-byte aligned, move-only float buffer with a shape.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::vector<int64_t> shape) : shape_(std::move(shape)) {
    size_t n = 1;
    for (int64_t d : shape_) n *= static_cast<size_t>(d);
    n_ = n;
    const size_t bytes = ((n * sizeof(float) + 63) / 64) * 64 + 64;
    data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    SPECULA_CHECK(data_ != nullptr);
    std::memset(data_.get(), 0, bytes);
  }
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  Tensor clone() const {
    Tensor t(shape_);
    if (n_) std::memcpy(t.data(), data(), n_ * sizeof(float));
    return t;
  }
  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  size_t size() const { return n_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_[i]; }

 private:
  std::vector<int64_t> shape_;
  size_t n_ = 0;
  std::unique_ptr<float, AlignedFree> data_;
};

// Non-owning view of a (possibly quantized) row-major matrix [rows, cols].
struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0;       // N (outer)
  int64_t cols = 0;       // K (contiguous, in elements)
  size_t row_stride = 0;  // bytes between rows
  // The same matrix repacked by the kernel table the model runs with (kernels.h,
  // TypeKernels::pack; the avx512 and avxvnni tiers share one layout), or null. Owned by
  // the model that packed it; `data` stays valid and is what every non-gemm use (row
  // lookup, dequantization) reads.
  const void* packed = nullptr;
};

}  // namespace specula
