// core/dtype.cpp — the table of element types (see dtype.h).
#include "core/dtype.h"

#include "specula/status.h"

namespace specula {
namespace {
constexpr DTypeInfo kTypes[] = {
    {DType::F32, "F32", 1, 4},      {DType::F16, "F16", 1, 2},
    {DType::Q4_0, "Q4_0", 32, 18},  {DType::Q4_1, "Q4_1", 32, 20},
    {DType::Q5_0, "Q5_0", 32, 22},  {DType::Q5_1, "Q5_1", 32, 24},
    {DType::Q8_0, "Q8_0", 32, 34},  {DType::Q8_1, "Q8_1", 32, 36},
    {DType::Q2_K, "Q2_K", 256, 84},  {DType::Q3_K, "Q3_K", 256, 110},
    {DType::Q4_K, "Q4_K", 256, 144}, {DType::Q5_K, "Q5_K", 256, 176},
    {DType::Q6_K, "Q6_K", 256, 210}, {DType::Q8_K, "Q8_K", 256, 292},
    {DType::IQ4_NL, "IQ4_NL", 32, 18}, {DType::IQ4_XS, "IQ4_XS", 256, 136},
    {DType::I32, "I32", 1, 4},       {DType::I64, "I64", 1, 8},
    {DType::BF16, "BF16", 1, 2},     {DType::Q8_A, "Q8_A", 32, 40},
};
}  // namespace

std::optional<DTypeInfo> dtype_info(uint32_t id) {
  for (const auto& t : kTypes)
    if (static_cast<uint32_t>(t.type) == id) return t;
  return std::nullopt;
}

const DTypeInfo& dtype_info(DType t) {
  for (const auto& i : kTypes)
    if (i.type == t) return i;
  SPECULA_CHECK(false && "unknown DType");
  return kTypes[0];
}

std::string_view dtype_name(DType t) { return dtype_info(t).name; }

}  // namespace specula
