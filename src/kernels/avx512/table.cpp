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
    auto set_packed = [&](DType type, size_t (*bytes)(int64_t, int64_t),
                          void (*pack)(const void*, size_t, int64_t, int64_t, int64_t, int64_t, void*),
                          decltype(TypeKernels::gemm_packed) gemm) {
      TypeKernels& tk = k.types[static_cast<uint32_t>(type)];
      tk.pack_rows = kPackRows;
      tk.packed_bytes = bytes;
      tk.pack = pack;
      tk.gemm_packed = gemm;
    };
    set_packed(DType::Q4_K, packed_bytes_q4_k, pack_q4_k, gemm_packed_q4_k);
    set_packed(DType::Q5_K, packed_bytes_q5_k, pack_q5_k, gemm_packed_q5_k);
    set_packed(DType::Q6_K, packed_bytes_q6_k, pack_q6_k, gemm_packed_q6_k);
    set_packed(DType::Q4_0, packed_bytes_q8, pack_q4_0, gemm_packed_q8);
    set_packed(DType::Q5_0, packed_bytes_q8, pack_q5_0, gemm_packed_q8);
    set_packed(DType::Q8_0, packed_bytes_q8, pack_q8_0, gemm_packed_q8);
    k.pv_f32_rows = pv_f32_rows;
    k.qk_rows16 = qk_rows16;
    return k;
  }();
  return &t;
}
}  // namespace avx512

}  // namespace specula::kernels
