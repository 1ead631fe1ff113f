// kernels/generic/table.cpp — the reference kernel table (placeholder; filled by the
// generic kernels work).
#include "kernels/kernels.h"

namespace specula::kernels {
const KernelTable& generic_table() {
  static const KernelTable t = [] {
    KernelTable k;
    k.isa = "generic";
    return k;
  }();
  return t;
}
}  // namespace specula::kernels
