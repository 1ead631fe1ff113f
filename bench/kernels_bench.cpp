// bench/kernels_bench.cpp — Google Benchmark of the CPU kernels on Gemma 3 270M
// shapes (hidden 640, ffn 2048, q 1024, vocab 262144), single-threaded.
//
// BM_MemRead / BM_Memcpy measure this machine's single-core memory bandwidth (a
// 512 MiB buffer) so decode gemms can be read as a fraction of it: m=1 gemms report
// weight bytes/s (SetBytesProcessed); m>1 gemms also report FLOP/s as items/s
// (2*N*K*m). Weights are random valid blocks; activations are quantized once outside
// the timed loop. Does not thread (callers split n_rows) and does not check results
// (tests/kernels/ does).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "core/fp16.h"
#include "kernels/kernels.h"
#include "model/attention.h"
#include "state/kv_layout.h"

namespace specula::kernels {
namespace {

constexpr size_t kBwBytes = size_t{512} << 20;

std::vector<uint64_t>& bw_buffer() {
  static std::vector<uint64_t> buf = [] {
    std::vector<uint64_t> b(kBwBytes / 8);
    for (size_t i = 0; i < b.size(); ++i) b[i] = i * 0x9E3779B97F4A7C15ULL;
    return b;
  }();
  return buf;
}

void BM_MemRead(benchmark::State& state) {
  const auto& b = bw_buffer();
  for (auto _ : state) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i < b.size(); i += 4) {
      s0 += b[i];
      s1 += b[i + 1];
      s2 += b[i + 2];
      s3 += b[i + 3];
    }
    benchmark::DoNotOptimize(s0 + s1 + s2 + s3);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kBwBytes));
}
BENCHMARK(BM_MemRead)->Unit(benchmark::kMillisecond);

void BM_Memcpy(benchmark::State& state) {
  auto& b = bw_buffer();
  std::vector<uint8_t> dst(kBwBytes / 2);
  for (auto _ : state) {
    std::memcpy(dst.data(), b.data(), dst.size());
    benchmark::ClobberMemory();
  }
  // Bytes read + written.
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kBwBytes));
}
BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond);

// Random bytes, then every 16-bit word forced to a normal half of magnitude ~2^-7
// (the scale fields sit at different offsets per type; speed does not depend on the
// quant values, and this avoids inf/nan/denormal scales).
std::vector<uint8_t> random_weights(DType t, int64_t K, int64_t n) {
  std::vector<uint8_t> w(row_bytes(t, K) * static_cast<size_t>(n));
  std::mt19937_64 rng(1);
  for (size_t i = 0; i + 8 <= w.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(&w[i], &v, 8);
  }
  for (size_t i = 0; i + 1 < w.size(); i += 2) {
    uint16_t h;
    std::memcpy(&h, &w[i], 2);
    h = static_cast<uint16_t>((h & 0x83ffu) | 0x2000u);
    std::memcpy(&w[i], &h, 2);
  }
  return w;
}

struct GemmSetup {
  std::vector<uint8_t> w, xq;
  std::vector<float> y;
  size_t ws, xs;
};

GemmSetup make_setup(const KernelTable& k, DType t, int64_t n, int64_t K, int64_t m) {
  GemmSetup s;
  s.w = random_weights(t, K, n);
  s.ws = row_bytes(t, K);
  const DType vt = k.of(t).vec_dot_type;
  s.xs = row_bytes(vt, K);
  s.xq.resize(s.xs * static_cast<size_t>(m));
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(K));
  for (int64_t i = 0; i < m; ++i) {
    for (auto& v : x) v = nd(rng);
    k.of(vt).quantize_row(x.data(), s.xq.data() + s.xs * static_cast<size_t>(i), K);
  }
  s.y.resize(static_cast<size_t>(n * m));
  return s;
}

void run_gemm(benchmark::State& state, const KernelTable* k, DType t, int64_t n, int64_t K) {
  if (k == nullptr) {
    state.SkipWithError("table not available on this CPU");
    return;
  }
  const int64_t m = state.range(0);
  GemmSetup s = make_setup(*k, t, n, K, m);
  const auto gemm = k->of(t).gemm;
  for (auto _ : state) {
    gemm(K, s.w.data(), s.ws, n, s.xq.data(), s.xs, m, s.y.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(s.w.size()));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 2 * n * K * m);
}

// Output projection / token embedding: Q8_0 [262144 x 640], decode.
void BM_Avx2_Q8_0_Output(benchmark::State& state) { run_gemm(state, avx2_table(), DType::Q8_0, 262144, 640); }
BENCHMARK(BM_Avx2_Q8_0_Output)->Arg(1)->Unit(benchmark::kMillisecond)->MinTime(1.0);

// ffn_gate / ffn_up: Q5_0 [2048 x 640]; attn_q: Q5_0 [1024 x 640].
void BM_Avx2_Q5_0_FfnUp(benchmark::State& state) { run_gemm(state, avx2_table(), DType::Q5_0, 2048, 640); }
BENCHMARK(BM_Avx2_Q5_0_FfnUp)->Arg(1)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
void BM_Avx2_Q5_0_AttnQ(benchmark::State& state) { run_gemm(state, avx2_table(), DType::Q5_0, 1024, 640); }
BENCHMARK(BM_Avx2_Q5_0_AttnQ)->Arg(1)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
// attn_output: Q4_K [640 x 1024].
void BM_Avx2_Q4_K_AttnOut(benchmark::State& state) { run_gemm(state, avx2_table(), DType::Q4_K, 640, 1024); }
BENCHMARK(BM_Avx2_Q4_K_AttnOut)->Arg(1)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
// ffn_down: Q6_K [640 x 2048].
void BM_Avx2_Q6_K_FfnDown(benchmark::State& state) { run_gemm(state, avx2_table(), DType::Q6_K, 640, 2048); }
BENCHMARK(BM_Avx2_Q6_K_FfnDown)->Arg(1)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
// attn_v (some layers): Q8_0 [256 x 640].
void BM_Avx2_Q8_0_AttnV(benchmark::State& state) { run_gemm(state, avx2_table(), DType::Q8_0, 256, 640); }
BENCHMARK(BM_Avx2_Q8_0_AttnV)->Arg(1)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);

// Qwen2.5 1.5B shapes at decode and speculative-verify widths (m = 1 + drafts):
// ffn_up Q4_K [8960 x 1536], ffn_down Q6_K [1536 x 8960], output Q8_0-sized draft
// projection Q8_0 [151936 x 896] and the Q5_0 ffn_up of the 0.5B draft [4864 x 896].
void BM_Avx2_Q4_K_QwenFfnUp(benchmark::State& state) { run_gemm(state, avx2_table(), DType::Q4_K, 8960, 1536); }
BENCHMARK(BM_Avx2_Q4_K_QwenFfnUp)->DenseRange(1, 8)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
void BM_Avx2_Q6_K_QwenFfnDown(benchmark::State& state) { run_gemm(state, avx2_table(), DType::Q6_K, 1536, 8960); }
BENCHMARK(BM_Avx2_Q6_K_QwenFfnDown)->DenseRange(1, 8)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
void BM_Avx2_Q5_0_QwenDraftFfnUp(benchmark::State& state) { run_gemm(state, avx2_table(), DType::Q5_0, 4864, 896); }
BENCHMARK(BM_Avx2_Q5_0_QwenDraftFfnUp)->DenseRange(1, 8)->Unit(benchmark::kMicrosecond);
void BM_Avx2_Q8_0_QwenDraftOutput(benchmark::State& state) { run_gemm(state, avx2_table(), DType::Q8_0, 151936, 896); }
BENCHMARK(BM_Avx2_Q8_0_QwenDraftOutput)->DenseRange(1, 5)->Unit(benchmark::kMillisecond);

// The low-bit types on the Qwen 1.5B ffn_up shape [8960 x 1536] (compare Q4_K above);
// AVX2 in every tier (no packed form).
void BM_Avx2_Q2_K_QwenFfnUp(benchmark::State& state) { run_gemm(state, avx2_table(), DType::Q2_K, 8960, 1536); }
BENCHMARK(BM_Avx2_Q2_K_QwenFfnUp)->Arg(1)->Arg(4)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
void BM_Avx2_Q3_K_QwenFfnUp(benchmark::State& state) { run_gemm(state, avx2_table(), DType::Q3_K, 8960, 1536); }
BENCHMARK(BM_Avx2_Q3_K_QwenFfnUp)->Arg(1)->Arg(4)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
void BM_Avx2_IQ4_NL_QwenFfnUp(benchmark::State& state) { run_gemm(state, avx2_table(), DType::IQ4_NL, 8960, 1536); }
BENCHMARK(BM_Avx2_IQ4_NL_QwenFfnUp)->Arg(1)->Arg(4)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
void BM_Avx2_IQ4_XS_QwenFfnUp(benchmark::State& state) { run_gemm(state, avx2_table(), DType::IQ4_XS, 8960, 1536); }
BENCHMARK(BM_Avx2_IQ4_XS_QwenFfnUp)->Arg(1)->Arg(4)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);

// A table's repacked gemms (avx512, or avx2's with vpdpbusd emulated) on the Qwen 1.5B and Gemma shapes (decode, verify
// widths, prefill 64 / 512): packed once outside the timed loop; bytes/s counts the
// packed bytes read.
void run_packed(benchmark::State& state, const KernelTable* k, DType t, int64_t n, int64_t K) {
  if (k == nullptr || k->of(t).gemm_packed == nullptr) {
    state.SkipWithError("no packed gemm for this type on this CPU");
    return;
  }
  const TypeKernels& tk = k->of(t);
  const int64_t m = state.range(0);
  GemmSetup s = make_setup(*k, t, n, K, m);
  const size_t bytes = tk.packed_bytes(n, K);
  std::unique_ptr<uint8_t, void (*)(void*)> packed(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)),
                                                   std::free);
  tk.pack(s.w.data(), s.ws, n, K, 0, (n + tk.pack_rows - 1) / tk.pack_rows, packed.get());
  // Row chunks as ops::matmul hands them to threads (32 rows for prefill, whole for decode here).
  const int64_t chunk = m >= 16 ? 32 : n;
  for (auto _ : state) {
    for (int64_t r0 = 0; r0 < n; r0 += chunk)
      tk.gemm_packed(K, packed.get(), r0, std::min(chunk, n - r0), s.xq.data(), s.xs, m, s.y.data() + r0, n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 2 * n * K * m);
}
void BM_Avx512_Q4_K_QwenFfnUp(benchmark::State& state) { run_packed(state, avx512_table(), DType::Q4_K, 8960, 1536); }
BENCHMARK(BM_Avx512_Q4_K_QwenFfnUp)->DenseRange(1, 8)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
void BM_Avx512_Q6_K_QwenFfnDown(benchmark::State& state) { run_packed(state, avx512_table(), DType::Q6_K, 1536, 8960); }
BENCHMARK(BM_Avx512_Q6_K_QwenFfnDown)->DenseRange(1, 8)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
// Gemma 3 270M: the Q8_0 output projection (decode) and Q5_0 ffn_up (decode / prefill).
// The avx2 tier's packed gemms (vpdpbusd emulated with vpmaddubsw + vpmaddwd): same shapes.
void BM_Avx2Packed_Q4_K_QwenFfnUp(benchmark::State& state) { run_packed(state, avx2_table(), DType::Q4_K, 8960, 1536); }
BENCHMARK(BM_Avx2Packed_Q4_K_QwenFfnUp)->Arg(1)->Arg(4)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
void BM_Avx2Packed_Q6_K_QwenFfnDown(benchmark::State& state) { run_packed(state, avx2_table(), DType::Q6_K, 1536, 8960); }
BENCHMARK(BM_Avx2Packed_Q6_K_QwenFfnDown)->Arg(1)->Arg(4)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
void BM_Avx2Packed_F16_FfnUp(benchmark::State& state) { run_packed(state, avx2_table(), DType::F16, 2048, 640); }
BENCHMARK(BM_Avx2Packed_F16_FfnUp)->Arg(1)->Arg(64)->Unit(benchmark::kMicrosecond);
void BM_Avx512_Q8_0_Output(benchmark::State& state) { run_packed(state, avx512_table(), DType::Q8_0, 262144, 640); }
BENCHMARK(BM_Avx512_Q8_0_Output)->Arg(1)->Unit(benchmark::kMillisecond)->MinTime(1.0);
void BM_Avx512_Q5_0_FfnUp(benchmark::State& state) { run_packed(state, avx512_table(), DType::Q5_0, 2048, 640); }
BENCHMARK(BM_Avx512_Q5_0_FfnUp)->Arg(1)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
// An F16 matrix of the same shape (f16 / bf16 GGUF conversions), packed vs the AVX2 gemm.
void BM_Avx512_F16_FfnUp(benchmark::State& state) { run_packed(state, avx512_table(), DType::F16, 2048, 640); }
BENCHMARK(BM_Avx512_F16_FfnUp)->Arg(1)->Arg(64)->Unit(benchmark::kMicrosecond);
void BM_Avx2_F16_FfnUp(benchmark::State& state) { run_gemm(state, avx2_table(), DType::F16, 2048, 640); }
BENCHMARK(BM_Avx2_F16_FfnUp)->Arg(1)->Arg(64)->Unit(benchmark::kMicrosecond);

// The thread pool's cost per job (one synchronisation: publish, run an empty job on
// every thread, wait), with 2 threads — decode issues one or two per matmul.
void BM_PoolRun(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  std::atomic<int64_t> sink{0};
  for (auto _ : state) pool.run([&](int ith, int) { sink.fetch_add(ith, std::memory_order_relaxed); });
  benchmark::DoNotOptimize(sink.load());
}
BENCHMARK(BM_PoolRun)->Arg(2)->Unit(benchmark::kMicrosecond);

// Reference point: the generic table on one shape.
void BM_Generic_Q5_0_FfnUp(benchmark::State& state) { run_gemm(state, &generic_table(), DType::Q5_0, 2048, 640); }
BENCHMARK(BM_Generic_Q5_0_FfnUp)->Arg(1)->Arg(64)->Unit(benchmark::kMicrosecond);

// Activation quantization of a [64 x 2048] batch to Q8_K and [64 x 640] to Q8_0.
void run_quantize(benchmark::State& state, DType t, int64_t K) {
  const KernelTable* k = avx2_table();
  if (k == nullptr) {
    state.SkipWithError("table not available on this CPU");
    return;
  }
  const int64_t m = 64;
  std::vector<float> x(static_cast<size_t>(K * m));
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : x) v = nd(rng);
  const size_t rb = row_bytes(t, K);
  std::vector<uint8_t> y(rb * static_cast<size_t>(m));
  for (auto _ : state) {
    for (int64_t i = 0; i < m; ++i) k->of(t).quantize_row(x.data() + i * K, y.data() + rb * i, K);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * K * m);
}
void BM_Avx2_Quantize_Q8_K(benchmark::State& state) { run_quantize(state, DType::Q8_K, 2048); }
BENCHMARK(BM_Avx2_Quantize_Q8_K)->Unit(benchmark::kMicrosecond);
void BM_Avx2_Quantize_Q8_0(benchmark::State& state) { run_quantize(state, DType::Q8_0, 640); }
BENCHMARK(BM_Avx2_Quantize_Q8_0)->Unit(benchmark::kMicrosecond);

// One decode step of attention (model/attention.cpp) for one row at a context of
// range(0) positions, on 2 threads, best kernel table: Qwen2.5 1.5B's shape (12 query
// heads, 2 kv heads, head_dim 128) and Gemma 3's global layers (4 / 1 / 256), with an f16
// or q8_0 cache. Reports the K/V bytes read per second (SetBytesProcessed).
void run_attention_decode(benchmark::State& state, int64_t nh, int64_t nkv, int64_t hd, const char* type) {
  const int64_t ctx = state.range(0);
  const KernelTable& kt = active();
  LayerSpec ls;
  ls.attention = attention_spec(nkv, hd, 0);
  CacheOptions o;
  o.type_k = o.type_v = type;
  auto st = StateRows::create({ls}, o, kt, ctx + 100000);
  if (!st.is_ok() || !st->reserve(1).is_ok()) {
    state.SkipWithError("state rows");
    return;
  }
  st->insert(st->new_row().value());
  ThreadPool pool(2);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  {
    // Fill the context through the layout directly (no attention over it).
    const KvLayout* L = st->layout_as<KvLayout>(0);
    std::vector<float> k(static_cast<size_t>(ctx * nkv * hd)), v(k.size());
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    KvStage stage;
    L->encode(pool, k.data(), v.data(), ctx, stage);
    L->commit(st->layer_row(0, 0), stage, 0, ctx);
    st->advance(0, ctx);
  }
  std::vector<float> q(static_cast<size_t>(nh * hd)), kn(static_cast<size_t>(nkv * hd)), vn(kn.size()), out(q.size());
  for (auto& x : q) x = nd(rng);
  for (auto& x : kn) x = nd(rng);
  for (auto& x : vn) x = nd(rng);
  const int32_t rows[1] = {0}, token_row[1] = {0};
  const int64_t offset[2] = {0, 1};
  AttentionArgs a;
  a.n_heads = nh;
  a.n_kv_heads = nkv;
  a.head_dim = hd;
  a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  a.M = 1;
  a.B = 1;
  a.rows = rows;
  a.offset = offset;
  a.token_row = token_row;
  a.kt = &kt;
  AttentionScratch scratch;
  for (auto _ : state) {
    // The step's position is cut off again after each step, so the context stays ctx + 1.
    attention(pool, a, *st, q.data(), kn.data(), vn.data(), out.data(), scratch);
    if (!st->layer_row(0, 0).truncate(ctx).is_ok()) state.SkipWithError("truncate");
    benchmark::ClobberMemory();
  }
  const double per_pos = static_cast<double>(st->layout(0).info().bytes_per_token);
  state.SetBytesProcessed(static_cast<int64_t>(static_cast<double>(state.iterations()) * per_pos * static_cast<double>(ctx)));
}
void BM_AttnDecode_Qwen_F16(benchmark::State& state) { run_attention_decode(state, 12, 2, 128, "f16"); }
BENCHMARK(BM_AttnDecode_Qwen_F16)->Arg(1024)->Arg(8192)->Unit(benchmark::kMicrosecond);
void BM_AttnDecode_Qwen_Q8_0(benchmark::State& state) { run_attention_decode(state, 12, 2, 128, "q8_0"); }
BENCHMARK(BM_AttnDecode_Qwen_Q8_0)->Arg(1024)->Arg(8192)->Unit(benchmark::kMicrosecond);
void BM_AttnDecode_Gemma_F16(benchmark::State& state) { run_attention_decode(state, 4, 1, 256, "f16"); }
BENCHMARK(BM_AttnDecode_Gemma_F16)->Arg(1024)->Arg(8192)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace specula::kernels
