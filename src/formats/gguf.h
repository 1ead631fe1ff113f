// formats/gguf.h — GGUF v2/v3 reader over a memory-mapped file.
//
// Source: the GGUF specification (ggml repository, docs/gguf.md). Parses the header,
// every metadata key/value (all 13 value types, arrays nested to any depth) and the
// tensor infos; checks every count, length, offset and size against the file before
// it is used, so a truncated or corrupted file yields a Status naming the field
// ("[gguf] tensor 'blk.3.attn_q.weight': data [123, 456) past end of file (size 400)"),
// never a crash or an out-of-bounds read. Tensor data stays in the mapping; callers
// get non-owning pointers valid while the GgufFile lives.
// Does not interpret metadata for any model (that is model/ and tokenizer/).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mmap.h"
#include "specula/status.h"

namespace specula::gguf {

// GGUF metadata value types (spec numbering).
enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
std::string_view value_type_name(ValueType t);

// One metadata value. Scalars are widened (integers to int64/uint64, floats to
// double); strings are copied; arrays hold element values (possibly nested arrays).
// Very large arrays of scalars (e.g. 262144 token scores) are kept compactly:
// read them through the typed accessors below.
struct Value {
  ValueType type = ValueType::U8;
  ValueType elem_type = ValueType::U8;  // for ARRAY
  uint64_t u = 0;        // unsigned integers and BOOL
  int64_t i = 0;         // signed integers
  double f = 0;          // F32 / F64
  std::string str;       // STRING
  std::vector<Value> arr;  // ARRAY of ARRAY / STRING / scalars
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // GGUF order: shape[0] is the contiguous (row) dimension
  DType type = DType::F32;
  uint64_t offset = 0;         // relative to the data section
  const uint8_t* data = nullptr;  // into the mapping
  size_t n_bytes = 0;
  int64_t n_elements() const;
};

class GgufFile {
 public:
  // Errors: unreadable file, bad magic ("not a GGUF file"), unsupported version,
  // any out-of-range count/length/offset, unknown tensor type id, duplicate names.
  static Result<GgufFile> open(const std::string& path);
  // Parse from bytes already in memory (used by tests and fuzzing); `bytes` must
  // outlive the result.
  static Result<GgufFile> parse(const uint8_t* bytes, size_t size, std::string origin = "<memory>");

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& path() const { return origin_; }
  size_t file_size() const { return size_; }

  const std::map<std::string, Value>& metadata() const { return kv_; }
  const Value* find(const std::string& key) const;

  // Typed getters. Errors name the key: missing, or wrong type.
  Result<std::string> get_string(const std::string& key) const;
  Result<uint64_t> get_uint(const std::string& key) const;   // any unsigned/non-negative int
  Result<int64_t> get_int(const std::string& key) const;     // any integer type
  Result<double> get_float(const std::string& key) const;    // F32/F64 (or integer)
  Result<bool> get_bool(const std::string& key) const;
  Result<std::vector<std::string>> get_string_array(const std::string& key) const;
  Result<std::vector<float>> get_f32_array(const std::string& key) const;    // F32/F64 elems
  Result<std::vector<int32_t>> get_i32_array(const std::string& key) const;  // integer elems

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;

 private:
  std::shared_ptr<MappedFile> file_;  // null when parsed from memory
  std::string origin_;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, Value> kv_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Human-readable dump: metadata (long arrays abbreviated) and the tensor table.
std::string describe(const GgufFile& f);

}  // namespace specula::gguf
