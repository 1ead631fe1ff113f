// tests/kernels/packed_gemm_test.cpp — the packed-weight gemms of the avx512, avxvnni and
// avx2 tables against the generic reference.
//
// For each tier this CPU runs: pack + gemm_packed vs the generic gemm (NMSE) on random
// valid blocks for ragged row counts (n_rows not a multiple of the 16-row group), odd
// block counts and m = 1..9, 17, 64; batch invariance (a row's output bitwise the same at
// m = 1, inside any m, and whatever the split of rows into 16-aligned ranges, as threads
// split them); outputs past n_rows never written; the largest quants against the most
// negative / positive activation bytes (the avx2 tier emulates vpdpbusd with the saturating
// vpmaddubsw: exact only within its bound); and avxvnni and avx2 bitwise equal to avx512
// where they run. The avx2 tier has no packed Q5_0 / Q8_0 (bytes above 127). The row
// kernels of these tables are the AVX2 ones (avx2_test). Tiers the CPU lacks are skipped
// with a message naming its features.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <cstring>
#include <vector>

#include "core/tensor.h"
#include "kernel_test_util.h"
#include "kernels/kernels.h"

namespace specula::kernels {
namespace {

// The tables with packed gemms that this CPU runs.
std::vector<const KernelTable*> packed_tables() {
  std::vector<const KernelTable*> t;
  if (avx512_table() != nullptr) t.push_back(avx512_table());
  if (avxvnni_table() != nullptr) t.push_back(avxvnni_table());
  if (avx2_table() != nullptr) t.push_back(avx2_table());
  return t;
}

#define SKIP_WITHOUT_PACKED()     \
  if (packed_tables().empty()) \
  GTEST_SKIP() << "no AVX2 on this CPU (" << cpu_features() << ")"

const DType kPackedTypes[] = {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q4_0, DType::Q4_1,
                              DType::Q5_0, DType::Q8_0, DType::F16,  DType::BF16};

// Whether table k packs type t: every packed type in the VNNI tiers, all but the legacy
// byte form (Q5_0, Q8_0) in the avx2 tier.
bool packs(const KernelTable& k, DType t) {
  const bool avx2 = std::string(k.isa) == "avx2";
  return !(avx2 && (t == DType::Q5_0 || t == DType::Q8_0));
}

// The packed form of w [N, K] in a 64-byte aligned buffer (gemm_packed's requirement),
// packed in two group ranges as two threads would.
struct Packed {
  std::unique_ptr<uint8_t, AlignedFree> buf;
  Packed(const TypeKernels& tk, const std::vector<uint8_t>& w, DType t, int64_t N, int64_t K) {
    const size_t bytes = tk.packed_bytes(N, K);
    buf.reset(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
    const int64_t groups = (N + tk.pack_rows - 1) / tk.pack_rows;
    tk.pack(w.data(), row_bytes(t, K), N, K, 0, groups / 2, buf.get());
    tk.pack(w.data(), row_bytes(t, K), N, K, groups / 2, groups, buf.get());
  }
};

void packed_gemm(const TypeKernels& tk, const Packed& p, int64_t K, int64_t r0, int64_t n_rows,
                 const std::vector<uint8_t>& xq, size_t xs, int64_t m, std::vector<float>& y, int64_t ldy) {
  tk.gemm_packed(K, p.buf.get(), r0, n_rows, xq.data(), xs, m, y.data() + r0, ldy);
}

TEST(PackedGemm, TablesAreAvx2PlusPackedGemms) {
  SKIP_WITHOUT_PACKED();
  for (const KernelTable* table : packed_tables()) {
    const KernelTable& a = *table;
    SCOPED_TRACE(a.isa);
    for (int i = 0; i < kNumDTypeSlots; ++i) {
      SCOPED_TRACE(i);
      EXPECT_EQ(a.types[i].supported, generic_table().types[i].supported);
      EXPECT_EQ(a.types[i].vec_dot_type, generic_table().types[i].vec_dot_type);
    }
    for (DType t : kPackedTypes) {
      if (!packs(a, t)) continue;
      const TypeKernels& tk = a.of(t);
      EXPECT_EQ(tk.pack_rows, 16);
      EXPECT_NE(tk.pack, nullptr);
      EXPECT_NE(tk.gemm_packed, nullptr);
      EXPECT_NE(tk.packed_bytes, nullptr);
    }
    // Types without a packed form run the AVX2 entries unchanged.
    std::vector<DType> unpacked = {DType::Q2_K, DType::Q3_K, DType::IQ4_NL, DType::IQ4_XS};
    for (DType t : kPackedTypes)
      if (!packs(a, t)) unpacked.push_back(t);
    for (DType t : unpacked) {
      SCOPED_TRACE(dtype_name(t));
      const TypeKernels& tk = a.of(t);
      ASSERT_NE(avx2_table(), nullptr);
      EXPECT_EQ(tk.gemm, avx2_table()->of(t).gemm);
      EXPECT_EQ(tk.dequantize_row, avx2_table()->of(t).dequantize_row);
      EXPECT_EQ(tk.pack_rows, 0);
      EXPECT_EQ(tk.gemm_packed, nullptr);
    }
  }
}

TEST(PackedGemm, MatchesGeneric) {
  SKIP_WITHOUT_PACKED();
  for (const KernelTable* table : packed_tables()) {
    SCOPED_TRACE(table->isa);
    std::mt19937 rng(42);
    const KernelTable& k = *table;
    for (DType t : kPackedTypes) {
      if (!packs(k, t)) continue;
      const TypeKernels& tk = k.of(t);
      for (int64_t K : {256, 768, 2304, 96 /* legacy types: an odd block count */, 100 /* halves: a ragged unit */}) {
          if (K % dtype_info(t).block_size != 0) continue;
        for (int64_t n_rows : {1, 16, 17, 40, 67}) {
          const auto w = random_weights(t, K, n_rows, rng);
          const Packed p(tk, w, t, n_rows, K);
          for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 64}) {
            SCOPED_TRACE(::testing::Message() << dtype_name(t) << " K=" << K << " n_rows=" << n_rows << " m=" << m);
            const auto xq = quantized_acts(t, K, m, rng);
            const size_t xs = activation_row_bytes(t, K);
            const int64_t ldy = n_rows + 3;
            std::vector<float> ya(static_cast<size_t>(m * ldy), -7.0f), yg = ya;
            packed_gemm(tk, p, K, 0, n_rows, xq, xs, m, ya, ldy);
            generic_table().of(t).gemm(K, w.data(), row_bytes(t, K), n_rows, xq.data(), xs, m, yg.data(), ldy);
            expect_gemm_matches(ya, yg, m, ldy, n_rows);
          }
        }
      }
    }
  }
}

TEST(PackedGemm, IsBatchInvariant) {
  SKIP_WITHOUT_PACKED();
  for (const KernelTable* table : packed_tables()) {
    SCOPED_TRACE(table->isa);
    std::mt19937 rng(7);
    const KernelTable& k = *table;
    for (DType t : kPackedTypes) {
      if (!packs(k, t)) continue;
      SCOPED_TRACE(dtype_name(t));
      const TypeKernels& tk = k.of(t);
      const int64_t K = dtype_info(t).block_size == 32 ? 480 : dtype_info(t).block_size == 1 ? 300 : 512, n_rows = 83, m = 70;  // 6 groups, the last one ragged
      const auto w = random_weights(t, K, n_rows, rng);
      const Packed p(tk, w, t, n_rows, K);
      const auto xq = quantized_acts(t, K, m, rng);
      const size_t xs = activation_row_bytes(t, K);
      std::vector<float> full(static_cast<size_t>(m * n_rows));
      packed_gemm(tk, p, K, 0, n_rows, xq, xs, m, full, n_rows);
      // Each activation row alone (decode), and every sub-batch width the driver treats
      // differently (2..9 small-m tiles, 17 and 64 prefill tiles), starting at row 3.
      for (int64_t i = 0; i < m; ++i) {
        std::vector<uint8_t> xi(xq.begin() + static_cast<ptrdiff_t>(xs * i), xq.begin() + static_cast<ptrdiff_t>(xs * (i + 1)));
        std::vector<float> yi(static_cast<size_t>(n_rows));
        packed_gemm(tk, p, K, 0, n_rows, xi, xs, 1, yi, n_rows);
        for (int64_t r = 0; r < n_rows; ++r) ASSERT_EQ(yi[r], full[i * n_rows + r]) << "m=1 row " << i;
      }
      for (int64_t mb : {2, 3, 4, 5, 6, 7, 8, 9, 17, 64}) {
        std::vector<uint8_t> xb(xq.begin() + static_cast<ptrdiff_t>(xs * 3), xq.begin() + static_cast<ptrdiff_t>(xs * (3 + mb)));
        std::vector<float> yb(static_cast<size_t>(mb * n_rows));
        packed_gemm(tk, p, K, 0, n_rows, xb, xs, mb, yb, n_rows);
        for (int64_t i = 0; i < mb; ++i)
          for (int64_t r = 0; r < n_rows; ++r)
            ASSERT_EQ(yb[i * n_rows + r], full[(i + 3) * n_rows + r]) << "batch of " << mb << " row " << i;
      }
      // Rows split into 16-aligned ranges as the thread pool hands them out: [0,16) +
      // [16,64) + [64,83), for the prefill, small-m and decode paths.
      for (int64_t ms : {m, int64_t{5}, int64_t{1}}) {
        std::vector<float> split(static_cast<size_t>(ms * n_rows));
        packed_gemm(tk, p, K, 0, 16, xq, xs, ms, split, n_rows);
        packed_gemm(tk, p, K, 16, 48, xq, xs, ms, split, n_rows);
        packed_gemm(tk, p, K, 64, 19, xq, xs, ms, split, n_rows);
        for (size_t i = 0; i < split.size(); ++i) ASSERT_EQ(split[i], full[i]) << "m=" << ms << " split index " << i;
      }
    }
  }
}


// The largest stored quants (every nibble / fifth / sixth bit set, the largest sub-block
// scales) against activation blocks of -128 (a constant negative row quantizes to -128 in
// Q8_K) and of +127, and alternating: the int16 pair sums of the avx2 tier's vpmaddubsw
// are at their largest here, so a saturating sum would show as a large error.
TEST(PackedGemm, LargestQuantsAreExact) {
  SKIP_WITHOUT_PACKED();
  std::mt19937 rng(5);
  for (const KernelTable* table : packed_tables()) {
    SCOPED_TRACE(table->isa);
    for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q4_0, DType::Q4_1}) {
      SCOPED_TRACE(dtype_name(t));
      const int64_t K = dtype_info(t).block_size == 32 ? 256 : 512, n_rows = 20;
      auto w = random_weights(t, K, n_rows, rng);
      const int64_t nb = K / dtype_info(t).block_size * n_rows;
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* blk = w.data() + static_cast<size_t>(b) * row_bytes(t, dtype_info(t).block_size);
        switch (t) {
          case DType::Q4_K: {
            auto* q = reinterpret_cast<BlockQ4_K*>(blk);
            std::memset(q->qs, 0xFF, sizeof q->qs);
            std::memset(q->scales, 0xFF, sizeof q->scales);
            break;
          }
          case DType::Q5_K: {
            auto* q = reinterpret_cast<BlockQ5_K*>(blk);
            std::memset(q->qs, 0xFF, sizeof q->qs);
            std::memset(q->qh, 0xFF, sizeof q->qh);
            std::memset(q->scales, 0xFF, sizeof q->scales);
            break;
          }
          case DType::Q6_K: {
            auto* q = reinterpret_cast<BlockQ6_K*>(blk);
            std::memset(q->ql, 0xFF, sizeof q->ql);
            std::memset(q->qh, 0xFF, sizeof q->qh);
            std::memset(q->scales, 0x7F, sizeof q->scales);
            break;
          }
          case DType::Q4_0: std::memset(reinterpret_cast<BlockQ4_0*>(blk)->qs, 0xFF, kQK / 2); break;
          default: std::memset(reinterpret_cast<BlockQ4_1*>(blk)->qs, 0xFF, kQK / 2); break;
        }
      }
      const TypeKernels& tk = table->of(t);
      const Packed p(tk, w, t, n_rows, K);
      const DType vt = generic_table().of(t).vec_dot_type;
      const size_t xs = activation_row_bytes(t, K);
      std::vector<float> x(static_cast<size_t>(3 * K));
      for (int64_t k = 0; k < K; ++k) {
        x[k] = -1.0f;
        x[K + k] = 1.0f;
        x[2 * K + k] = (k & 1) ? -1.0f : 1.0f;
      }
      std::vector<uint8_t> xq(xs * 3);
      for (int i = 0; i < 3; ++i) generic_table().of(vt).quantize_row(x.data() + i * K, xq.data() + xs * i, K);
      for (int64_t m : {1, 3}) {
        const int64_t ldy = n_rows + 1;
        std::vector<float> ya(static_cast<size_t>(m * ldy), -7.0f), yg = ya;
        packed_gemm(tk, p, K, 0, n_rows, xq, xs, m, ya, ldy);
        generic_table().of(t).gemm(K, w.data(), row_bytes(t, K), n_rows, xq.data(), xs, m, yg.data(), ldy);
        expect_gemm_matches(ya, yg, m, ldy, n_rows);
      }
    }
  }
}

// The avxvnni and avx2 tiers run the avx512 tier's lanes on YMM pairs (avx2 with vpdpbusd
// emulated exactly): same packed bytes, same results bit for bit, at every m.
TEST(PackedGemm, YmmTiersEqualAvx512Bitwise) {
  if (avx512_table() == nullptr) GTEST_SKIP() << "needs AVX-512 VNNI (" << cpu_features() << ")";
  std::vector<const KernelTable*> ymm;
  if (avxvnni_table() != nullptr) ymm.push_back(avxvnni_table());
  if (avx2_table() != nullptr) ymm.push_back(avx2_table());
  std::mt19937 rng(23);
  for (const KernelTable* other : ymm) {
    SCOPED_TRACE(other->isa);
    for (DType t : kPackedTypes) {
      if (!packs(*other, t)) continue;
      SCOPED_TRACE(dtype_name(t));
      const int64_t K = dtype_info(t).block_size == 32 ? 352 : dtype_info(t).block_size == 1 ? 200 : 768, n_rows = 37;
      const auto w = random_weights(t, K, n_rows, rng);
      const Packed pa(avx512_table()->of(t), w, t, n_rows, K), pb(other->of(t), w, t, n_rows, K);
      for (int64_t m : {1, 3, 8, 21}) {
        const auto xq = quantized_acts(t, K, m, rng);
        const size_t xs = activation_row_bytes(t, K);
        std::vector<float> ya(static_cast<size_t>(m * n_rows)), yb = ya;
        packed_gemm(avx512_table()->of(t), pa, K, 0, n_rows, xq, xs, m, ya, n_rows);
        packed_gemm(other->of(t), pb, K, 0, n_rows, xq, xs, m, yb, n_rows);
        for (size_t i = 0; i < ya.size(); ++i) ASSERT_EQ(ya[i], yb[i]) << "m=" << m << " index " << i;
      }
    }
  }
}

}  // namespace
}  // namespace specula::kernels
