// kernels/dispatch.cpp — choose the kernel table once from CPU features.
// Detection: cpuid leaf 1 (FMA, F16C, OSXSAVE, AVX), xgetbv (YMM state enabled by
// the OS; opmask/ZMM state for AVX-512), leaf 7 (AVX2, BMI2, AVX512F/DQ/BW/VL, AVX512_VNNI,
// AMX), leaf 7.1 (AVX-VNNI). SPECULA_ISA is read once here, never on the hot path.
// Tiers, best first: avx512 (AVX-512 VNNI), avxvnni (AVX2 + AVX-VNNI), avx2, generic.
// The packed tiers' decode prefetch (packed_gemm.h's gemm vs gemm_prefetch) follows the CPU
// vendor (cpuid leaf 0), unless SPECULA_DECODE_PREFETCH says otherwise.
#include <cpuid.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/kernels.h"

#include "core/runtime_config.h"
#include "core/quant_blocks.h"
#include "kernels/avx512/avx512.h"
#include "kernels/packed/packed_gemm.h"

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

uint64_t xcr0() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0;  // OSXSAVE
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// F, DQ, BW, VL and VNNI, with XMM/YMM/opmask/ZMM state enabled by the OS.
bool cpu_has_avx512_vnni() {
  if (!cpu_has_avx2_fma_f16c()) return false;
  if ((xcr0() & 0xE6u) != 0xE6u) return false;
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31),
             vnni = c & (1u << 11);
  return f && dq && bw && vl && vnni;
}

// AVX2/FMA/F16C plus AVX-VNNI (cpuid 7.1 EAX bit 4: VEX-encoded vpdpbusd on YMM).
bool cpu_has_avx_vnni() {
  if (!cpu_has_avx2_fma_f16c()) return false;
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
  return a & (1u << 4);
}

std::string detect_features() {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    add(c & (1u << 28), "avx");
    add(c & (1u << 12), "fma");
    add(c & (1u << 29), "f16c");
  }
  const uint64_t x = xcr0();
  const bool zmm = (x & 0xE6u) == 0xE6u;
  unsigned b7 = 0, c7 = 0, d7 = 0, a71 = 0;
  if (__get_cpuid_count(7, 0, &a, &b7, &c7, &d7)) {
    add(b7 & (1u << 5), "avx2");
    add(zmm && (b7 & (1u << 16)), "avx512f");
    add(zmm && (b7 & (1u << 30)), "avx512bw");
    add(zmm && (b7 & (1u << 31)), "avx512vl");
    add(zmm && (c7 & (1u << 11)), "avx512vnni");
    unsigned b1, c1, d1;
    if (__get_cpuid_count(7, 1, &a71, &b1, &c1, &d1)) {
      add(zmm && (a71 & (1u << 5)), "avx512bf16");
      add(a71 & (1u << 4), "avx_vnni");
    }
    add(d7 & (1u << 24), "amx");
  }
  return s.empty() ? "none" : s;
}

const KernelTable& best() {
  if (const KernelTable* t = avx512_table()) return *t;
  if (const KernelTable* t = avxvnni_table()) return *t;
  if (const KernelTable* t = avx2_table()) return *t;
  return generic_table();
}

const KernelTable& choose() {
  const std::string& isa = runtime_config().isa;  // SPECULA_ISA
  const char* env = isa.c_str();
  if (!isa.empty()) {
    if (std::strcmp(env, "generic") == 0) return generic_table();
    if (std::strcmp(env, "avx2") == 0 || std::strcmp(env, "avx512") == 0 || std::strcmp(env, "avxvnni") == 0) {
      const KernelTable* t = std::strcmp(env, "avx2") == 0     ? avx2_table()
                             : std::strcmp(env, "avx512") == 0 ? avx512_table()
                                                               : avxvnni_table();
      if (t != nullptr) return *t;
      std::fprintf(stderr, "[kernels] SPECULA_ISA=%s but this CPU lacks it (features: %s); using %s\n", env,
                   cpu_features(), best().isa);
      return best();
    }
    std::fprintf(stderr, "[kernels] SPECULA_ISA=%s is not one of generic, avx2, avxvnni, avx512; detecting\n", env);
  }
  return best();
}

bool cpu_is_intel() {
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
  char v[13];
  std::memcpy(v, &b, 4);
  std::memcpy(v + 4, &d, 4);
  std::memcpy(v + 8, &c, 4);
  v[12] = '\0';
  return std::strcmp(v, "GenuineIntel") == 0;
}

bool decode_prefetch() {
  const std::string& e = runtime_config().decode_prefetch;  // SPECULA_DECODE_PREFETCH
  if (e == "0") return false;
  if (e == "1") return true;
  if (!e.empty()) std::fprintf(stderr, "[kernels] SPECULA_DECODE_PREFETCH=%s is not 0 or 1; choosing by CPU\n", e.c_str());
  // Measured (packed_gemm.inc): software prefetch helps decode on Intel (Sapphire Rapids)
  // and slows it on AMD (Zen 4), whose hardware prefetchers keep the streams busy alone.
  return cpu_is_intel();
}

}  // namespace

// The tables built on the AVX2 one are assembled here, in a translation unit compiled
// without ISA flags: code shared through headers (KernelTable's copy, its inline members)
// must never be emitted from an AVX-512 translation unit, where the compiler may use
// instructions a non-AVX-512 CPU lacks.
void add_packed_gemms(KernelTable& k, PackedGemm (*packed_gemm)(DType)) {
  k.decode_prefetch = decode_prefetch();
  for (int i = 0; i < kNumDTypeSlots; ++i) {
    const PackedGemm p = packed_gemm(static_cast<DType>(i));
    if (p.gemm == nullptr) continue;
    TypeKernels& tk = k.types[i];
    tk.pack_rows = kPackRows;
    tk.packed_bytes = p.bytes;
    tk.pack = p.pack;
    tk.gemm_packed = k.decode_prefetch ? p.gemm_prefetch : p.gemm;
  }
}

// The AVX2 table plus a tier's packed gemms.
KernelTable packed_tier(const char* isa, PackedGemm (*packed_gemm)(DType)) {
  KernelTable k = *avx2::table_if_built();
  k.isa = isa;
  add_packed_gemms(k, packed_gemm);
  return k;
}

// The AVX2 row kernels plus the packed gemms with vpdpbusd emulated (kernels/avx2/gemm_packed.cpp).
const KernelTable* avx2_table() {
  static const KernelTable* t = []() -> const KernelTable* {
    if (!cpu_has_avx2_fma_f16c()) return nullptr;
    static const KernelTable k = packed_tier("avx2", avx2::packed_gemm);
    return &k;
  }();
  return t;
}

const KernelTable* avx512_table() {
  static const KernelTable* t = []() -> const KernelTable* {
    if (!cpu_has_avx512_vnni()) return nullptr;
    static KernelTable k = packed_tier("avx512", avx512::packed_gemm);
    k.pv_f32_rows = avx512::pv_f32_rows;
    k.qk_rows16 = avx512::qk_rows16;
    return &k;
  }();
  return t;
}

const KernelTable* avxvnni_table() {
  static const KernelTable* t = []() -> const KernelTable* {
    if (!cpu_has_avx_vnni()) return nullptr;
    static const KernelTable k = packed_tier("avxvnni", avxvnni::packed_gemm);
    return &k;
  }();
  return t;
}

const char* cpu_features() {
  static const std::string s = detect_features();
  return s.c_str();
}

const KernelTable& active() {
  static const KernelTable& t = choose();
  return t;
}

size_t activation_row_bytes(DType w, int64_t K) {
  return row_bytes(generic_table().of(w).vec_dot_type, K);
}

}  // namespace specula::kernels
