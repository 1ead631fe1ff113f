// kernels/generic/dense.cpp — reference dense f32 helpers (dot, axpy, scale) used by
// attention and norms. Plain loops in index order; the dot accumulates in double and
// rounds once. Does not vectorize or thread.
#include "kernels/generic/generic.h"

namespace specula::kernels::generic {

float dot_f32(int64_t n, const float* a, const float* b) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return static_cast<float>(sum);
}

void axpy_f32(int64_t n, float alpha, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void scale_f32(int64_t n, float alpha, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] *= alpha;
}

}  // namespace specula::kernels::generic
