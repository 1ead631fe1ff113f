// kernels/dispatch.cpp — choose the kernel table once from CPU features.
// Detection: cpuid leaf 1 (FMA, F16C, OSXSAVE, AVX), xgetbv (YMM state enabled by
// the OS), leaf 7 (AVX2, BMI2). SPECULA_ISA is read once here, never on the hot path.
#include <cpuid.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/quant_blocks.h"

namespace specula::kernels {
namespace avx2 {
const KernelTable* table_if_built();  // kernels/avx2/table.cpp
}

namespace {
bool cpu_has_avx2_fma_f16c() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28),
             f16c = c & (1u << 29);
  if (!(fma && osxsave && avx && f16c)) return false;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 0x6u) != 0x6u) return false;  // XMM and YMM state
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool avx2 = b & (1u << 5), bmi2 = b & (1u << 8);
  return avx2 && bmi2;
}

const KernelTable& choose() {
  const char* env = std::getenv("SPECULA_ISA");
  const KernelTable* avx2 = avx2_table();
  if (env != nullptr && *env != '\0') {
    if (std::strcmp(env, "generic") == 0) return generic_table();
    if (std::strcmp(env, "avx2") == 0) {
      if (avx2 != nullptr) return *avx2;
      std::fprintf(stderr, "[kernels] SPECULA_ISA=avx2 but this CPU lacks AVX2/FMA/F16C; using generic\n");
      return generic_table();
    }
    std::fprintf(stderr, "[kernels] SPECULA_ISA=%s is not one of generic, avx2; detecting\n", env);
  }
  return avx2 != nullptr ? *avx2 : generic_table();
}
}  // namespace

const KernelTable* avx2_table() {
  static const KernelTable* t = cpu_has_avx2_fma_f16c() ? avx2::table_if_built() : nullptr;
  return t;
}

const KernelTable& active() {
  static const KernelTable& t = choose();
  return t;
}

size_t activation_row_bytes(DType w, int64_t K) {
  return row_bytes(generic_table().of(w).vec_dot_type, K);
}

}  // namespace specula::kernels
