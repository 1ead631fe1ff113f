// kernels/avx2/table.cpp — the AVX2/FMA/F16C kernel table (placeholder).
#include "kernels/kernels.h"

namespace specula::kernels::avx2 {
const KernelTable* table_if_built() { return nullptr; }
}  // namespace specula::kernels::avx2
