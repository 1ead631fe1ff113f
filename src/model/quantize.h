// model/quantize.h — load-time quantization of a model's float weights (`--quantize`), so a
// bf16 / f16 Hugging Face folder decodes as fast as a quantized GGUF of the same model.
//
// Every matrix (2-D, or 3-D stacked experts) stored as F32, F16 or BF16 whose rows are whole
// blocks of the target type is quantized row by row (dequantized to f32, then Q8_0:
// d = max|x| / 127 per 32; or Q4_K: kernels/generic quantize_row_q4_k, per 256, with rows
// that are not whole 256s in Q5_0 as llama.cpp's quantizer falls back), on the pool's
// threads, into buffers owned by the returned file. Kept as they are: 1-D tensors (norms,
// biases), MoE routers (ffn_gate_inp, as llama.cpp's quantizer keeps them), and rows that are
// not whole blocks (counted in `skipped`). Metadata is copied unchanged.
// Does not requantize already quantized tensors.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "specula/status.h"

namespace specula {

struct QuantizeStats {
  int64_t quantized = 0;   // tensors quantized
  int64_t fallback = 0;    // of those, in the fallback type (Q5_0 for q4_k rows that are not 256s)
  int64_t skipped = 0;     // float matrices left as they are (rows not whole blocks)
  size_t bytes_before = 0, bytes_after = 0;  // of the quantized tensors
  double seconds = 0;
};

// "q8_0" -> Q8_0, "q4_k" -> Q4_K (case-insensitive). Errors name the value and the choices.
Result<DType> parse_quantize_type(const std::string& name);

// The file with its float matrices quantized to `type` (Q8_0 or Q4_K).
Result<gguf::GgufFile> quantize_weights(const gguf::GgufFile& file, DType type, ThreadPool& pool,
                                        QuantizeStats* stats);

}  // namespace specula
