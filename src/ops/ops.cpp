// ops/ops.cpp — implementations of ops.h (threaded matmul driver and row-wise ops).
#include "ops/ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>

namespace specula::ops {

void* Workspace::bytes(size_t n) {
  if (n > cap_) {
    const size_t cap = ((n + 4095) / 4096) * 4096 * 2;
    buf_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, cap)));
    SPECULA_CHECK(buf_ != nullptr);
    cap_ = cap;
  }
  return buf_.get();
}

void matmul(ThreadPool& pool, const kernels::KernelTable& kt, const TensorView& w, const float* x,
            int64_t M, float* y, Workspace& ws) {
  const kernels::TypeKernels& tk = kt.of(w.dtype);
  SPECULA_CHECK(tk.supported && tk.gemm != nullptr);
  const int64_t K = w.cols, N = w.rows;
  const kernels::TypeKernels& ak = kt.of(tk.vec_dot_type);
  const size_t xq_stride = row_bytes(tk.vec_dot_type, K);
  uint8_t* xq = static_cast<uint8_t*>(ws.bytes(xq_stride * static_cast<size_t>(M) + 64));
  const uint8_t* wdata = static_cast<const uint8_t*>(w.data);
  // Chunks of weight rows handed out dynamically: 2 cores rarely finish together.
  // Decode: large chunks (each is RD streams in the kernel) but at least ~8 per thread so
  // the two cores finish together; prefill: small chunks, the kernel tiles over M.
  const int64_t chunk = M >= 16 ? 32
                        : M == 1 ? std::clamp<int64_t>(N / (8 * pool.n_threads()) / 64 * 64, 64, 4096)
                                 : 64;
  const int64_t n_chunks = (N + chunk - 1) / chunk;
  std::atomic<int64_t> next{0};
  pool.run([&](int ith, int nth) {
    // 1. quantize activations, rows split across threads
    auto [m0, m1] = ThreadPool::split(M, ith, nth);
    for (int64_t i = m0; i < m1; ++i) ak.quantize_row(x + i * K, xq + i * xq_stride, K);
  });
  const bool packed = w.packed != nullptr && tk.gemm_packed != nullptr;
  SPECULA_CHECK(!packed || chunk % tk.pack_rows == 0);
  pool.run([&](int, int) {
    for (;;) {
      const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= n_chunks) break;
      const int64_t r0 = c * chunk, r1 = std::min(N, r0 + chunk);
      if (packed)
        tk.gemm_packed(K, w.packed, r0, r1 - r0, xq, xq_stride, M, y + r0, N);
      else
        tk.gemm(K, wdata + static_cast<size_t>(r0) * w.row_stride, w.row_stride, r1 - r0, xq, xq_stride, M, y + r0, N);
    }
  });
}

void get_rows(const kernels::KernelTable& kt, const TensorView& table, const int32_t* ids, int64_t n,
              float scale, float* out) {
  const kernels::TypeKernels& tk = kt.of(table.dtype);
  const uint8_t* base = static_cast<const uint8_t*>(table.data);
  for (int64_t i = 0; i < n; ++i) {
    float* o = out + i * table.cols;
    tk.dequantize_row(base + static_cast<size_t>(ids[i]) * table.row_stride, o, table.cols);
    if (scale != 1.0f)
      for (int64_t k = 0; k < table.cols; ++k) o[k] *= scale;
  }
}

void rms_norm(const float* x, const float* w, int64_t M, int64_t H, float eps, float* y) {
  for (int64_t i = 0; i < M; ++i) {
    const float* xi = x + i * H;
    double ss = 0.0;
    for (int64_t k = 0; k < H; ++k) ss += static_cast<double>(xi[k]) * xi[k];
    const float scale = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(H)) + eps);
    float* yi = y + i * H;
    for (int64_t k = 0; k < H; ++k) yi[k] = xi[k] * scale * w[k];
  }
}

void rope_table(const int32_t* positions, int64_t M, int64_t head_dim, float base, float freq_scale,
                float* cos_out, float* sin_out, const float* freq_factors) {
  const int64_t half = head_dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = std::pow(static_cast<double>(base),
                           -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  if (freq_factors != nullptr)
    for (int64_t i = 0; i < half; ++i) inv_freq[i] /= static_cast<double>(freq_factors[i]);
  for (int64_t m = 0; m < M; ++m) {
    const double pos = static_cast<double>(positions[m]) * freq_scale;
    for (int64_t i = 0; i < half; ++i) {
      const double theta = pos * inv_freq[i];
      cos_out[m * half + i] = static_cast<float>(std::cos(theta));
      sin_out[m * half + i] = static_cast<float>(std::sin(theta));
    }
  }
}

void rope_neox(float* x, int64_t M, int64_t n_heads, int64_t head_dim, const float* cos_t,
               const float* sin_t) {
  rope_neox_partial(x, M, n_heads, head_dim, head_dim, cos_t, sin_t);
}

void silu_mul(int64_t n, const float* gate, const float* up, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void rope_norm(float* x, int64_t M, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_t,
               const float* sin_t) {
  const int64_t half = n_rot / 2;
  for (int64_t m = 0; m < M; ++m) {
    const float* cs = cos_t + m * half;
    const float* sn = sin_t + m * half;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (m * n_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * cs[i] - x1 * sn[i];
        v[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
      }
    }
  }
}

void rope_neox_partial(float* x, int64_t M, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_t,
                       const float* sin_t) {
  const int64_t half = n_rot / 2;
  for (int64_t m = 0; m < M; ++m) {
    const float* cs = cos_t + m * half;
    const float* sn = sin_t + m * half;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (m * n_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = a * sn[i] + b * cs[i];
      }
    }
  }
}

}  // namespace specula::ops
