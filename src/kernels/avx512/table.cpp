// kernels/avx512/table.cpp — the AVX-512 kernel table: the AVX2 table (every type, the
// dense helpers) plus repacked VNNI gemms for Q4_K, Q5_K, Q6_K, Q4_0, Q5_0 and Q8_0. Does not
// detect CPU features (dispatch.cpp calls this only on a capable CPU).
#include "kernels/avx512/avx512.h"
#include "kernels/kernels.h"

namespace specula::kernels {
namespace avx2 {
const KernelTable* table_if_built();
}

namespace avx512 {
const KernelTable* table_if_built() {
  static const KernelTable t = [] {
    KernelTable k = *avx2::table_if_built();
    k.isa = "avx512";
    for (int i = 0; i < kNumDTypeSlots; ++i) {
      const PackedGemm p = packed_gemm(static_cast<DType>(i));
      if (p.gemm == nullptr) continue;
      TypeKernels& tk = k.types[i];
      tk.pack_rows = kPackRows;
      tk.packed_bytes = p.bytes;
      tk.pack = p.pack;
      tk.gemm_packed = p.gemm;
    }
    k.pv_f32_rows = pv_f32_rows;
    k.qk_rows16 = qk_rows16;
    return k;
  }();
  return &t;
}
}  // namespace avx512

}  // namespace specula::kernels
