// core/dtype.h — tensor element types and their block geometry.
//
// Numeric ids equal GGML's `ggml_type` values as stored in GGUF tensor infos
// (GGUF spec, docs/gguf.md in the ggml repository). Quantized types store blocks
// of `block_size` elements in `type_size` bytes; layouts are in
// core/quant_blocks.h. Does not convert or compute anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace specula {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,   // activations only (not loaded from files)
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,  // activations only (not loaded from files)
  IQ4_NL = 20,
  IQ4_XS = 23,
  // Integer tensors (GGML's I32 / I64): data such as an index map (an EAGLE-3 head's d2t),
  // never a matmul weight or an activation.
  I32 = 26,
  I64 = 27,
  BF16 = 30,
  // specula's own (not a GGML type; refused in GGUF files): affine 8-bit blocks of 32,
  // x = d * q + m with q int8 and f32 d, m (core/quant_blocks.h BlockQ8_A) — what MLX
  // 8-bit weights load as (formats/hf_folder.h).
  Q8_A = 40,
};

struct DTypeInfo {
  DType type;
  std::string_view name;
  int64_t block_size;  // elements per block (1 for F32/F16/BF16)
  size_t type_size;    // bytes per block
};

// Info for a type, or nullopt for an id specula does not know.
std::optional<DTypeInfo> dtype_info(uint32_t ggml_type_id);
const DTypeInfo& dtype_info(DType t);
std::string_view dtype_name(DType t);

// Bytes for a row of n elements; n must be a multiple of block_size (checked by callers).
inline size_t row_bytes(DType t, int64_t n) {
  const DTypeInfo& i = dtype_info(t);
  return static_cast<size_t>(n / i.block_size) * i.type_size;
}

}  // namespace specula
