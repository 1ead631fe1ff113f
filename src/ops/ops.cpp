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

namespace {

// Weight rows per chunk handed out (dynamically: 2 cores rarely finish together).
// Decode (M = 1): about four chunks per thread, each a few long sequential streams in the
// kernel (the hardware prefetchers need long streams: on Zen 4 a Qwen 1.5B [1536 x 1536]
// Q4_K matmul took 51 us in chunks of N / 16 rows and 40 us in chunks of N / 8); prefill:
// small chunks, the kernel tiles over M.
int64_t chunk_rows(int64_t N, int64_t M, int n_threads) {
  if (M >= 16) return 32;
  if (M == 1) return std::clamp<int64_t>(N / (4 * n_threads) / 64 * 64, 64, 4096);
  return 64;
}

}  // namespace

void matmul(ThreadPool& pool, const kernels::KernelTable& kt, const TensorView& w, const float* x,
            int64_t M, float* y, Workspace& ws) {
  matmul_many(pool, kt, x, M, {MatmulOut{&w, y}}, ws);
}

void matmul_many(ThreadPool& pool, const kernels::KernelTable& kt, const float* x, int64_t M,
                 std::initializer_list<MatmulOut> outs, Workspace& ws) {
  constexpr size_t kMaxOuts = 4;
  SPECULA_CHECK(outs.size() >= 1 && outs.size() <= kMaxOuts);
  const MatmulOut* o = outs.begin();
  const int64_t K = o[0].w->cols;
  const DType dot_type = kt.of(o[0].w->dtype).vec_dot_type;
  for (const MatmulOut& e : outs) {
    if (kt.of(e.w->dtype).vec_dot_type != dot_type) {  // no shared activation form: one at a time
      for (const MatmulOut& f : outs) matmul_many(pool, kt, x, M, {f}, ws);
      return;
    }
  }
  struct Part {
    const kernels::TypeKernels* tk;
    const TensorView* w;
    float* y;
    int64_t chunk, first;  // rows per chunk; index of its first chunk in the job
    bool packed;
  };
  Part parts[kMaxOuts];
  const size_t n = outs.size();
  int64_t n_chunks = 0;
  for (size_t i = 0; i < n; ++i) {
    const TensorView& w = *o[i].w;
    const kernels::TypeKernels& tk = kt.of(w.dtype);
    SPECULA_CHECK(tk.supported && tk.gemm != nullptr && w.cols == K);
    const int64_t chunk = chunk_rows(w.rows, M, pool.n_threads());
    const bool packed = w.packed != nullptr && tk.gemm_packed != nullptr;
    SPECULA_CHECK(!packed || chunk % tk.pack_rows == 0);
    parts[i] = Part{&tk, &w, o[i].y, chunk, n_chunks, packed};
    n_chunks += (w.rows + chunk - 1) / chunk;
  }
  const kernels::TypeKernels& ak = kt.of(dot_type);
  const size_t xq_stride = row_bytes(dot_type, K);
  uint8_t* xq = static_cast<uint8_t*>(ws.bytes(xq_stride * static_cast<size_t>(M) + 64));
  pool.run([&](int ith, int nth) {
    // 1. quantize activations, rows split across threads
    auto [m0, m1] = ThreadPool::split(M, ith, nth);
    for (int64_t i = m0; i < m1; ++i) ak.quantize_row(x + i * K, xq + i * xq_stride, K);
  });
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    size_t p = 0;
    for (;;) {
      const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= n_chunks) break;
      while (p + 1 < n && c >= parts[p + 1].first) ++p;
      const Part& part = parts[p];
      const TensorView& w = *part.w;
      const int64_t r0 = (c - part.first) * part.chunk, r1 = std::min(w.rows, r0 + part.chunk);
      if (part.packed)
        part.tk->gemm_packed(K, w.packed, r0, r1 - r0, xq, xq_stride, M, part.y + r0, w.rows);
      else
        part.tk->gemm(K, static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r0) * w.row_stride, w.row_stride,
                      r1 - r0, xq, xq_stride, M, part.y + r0, w.rows);
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
