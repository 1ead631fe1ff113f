// formats/gguf.h — GGUF v2/v3 reader over a memory-mapped file.
//
// Source: the GGUF specification (ggml repository, docs/gguf.md). Parses the header,
// every metadata key/value (all 13 value types, arrays nested to any depth up to
// kMaxArrayDepth) and the tensor infos; checks every count, length, offset and size
// against the bytes that remain before it is used or allocated, so a truncated or
// corrupted file yields a Status naming the field
// ("[gguf] tensor 'blk.3.attn_q.weight': data [123, 456) past end of file (size 400)"),
// never a crash, an out-of-bounds read or a huge allocation. Tensor data stays in the
// mapping; callers get non-owning pointers valid while the GgufFile (or a copy of it)
// lives. Little-endian files only (a big-endian file is rejected by its version).
// Does not interpret metadata for any model (that is model/ and tokenizer/), and does
// not convert or validate tensor contents.
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
// Bytes of one scalar element (0 for STRING and ARRAY).
size_t value_type_size(ValueType t);

// Arrays nested deeper than this are rejected (keeps recursion bounded).
inline constexpr int kMaxArrayDepth = 16;

// One metadata value. Scalars are widened: unsigned integers and BOOL to `u`, signed
// integers to `i`, F32/F64 to `f`; strings are copied into `str`.
// Arrays are stored compactly by element kind (`count` elements of `elem_type`):
//   - scalars: `raw` holds the packed little-endian elements as in the file
//     (262144 token scores are one 1 MiB buffer, not 262144 Values);
//   - STRING: `strs`;
//   - ARRAY (nested): `arr`, one Value per element.
// Read arrays through GgufFile's typed getters, or element by element with at().
struct Value {
  ValueType type = ValueType::U8;
  ValueType elem_type = ValueType::U8;  // for ARRAY
  uint64_t u = 0;        // unsigned integers and BOOL
  int64_t i = 0;         // signed integers
  double f = 0;          // F32 / F64
  std::string str;       // STRING
  uint64_t count = 0;              // ARRAY: number of elements
  std::vector<uint8_t> raw;        // ARRAY of scalars: count * value_type_size(elem_type) bytes
  std::vector<std::string> strs;   // ARRAY of STRING
  std::vector<Value> arr;          // ARRAY of ARRAY

  bool is_array() const { return type == ValueType::ARRAY; }
  // Element i of an ARRAY as a standalone Value (a copy); i < count is checked.
  Value at(size_t i) const;
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
  // A file assembled in memory from metadata and tensors that point into memory owned by
  // `owner` (kept alive with the result): how a Hugging Face folder is presented to the
  // architectures (formats/hf_folder.h). Keys keep the order of `keys` (each must be in
  // `kv`); `version` 3, no data section (data_offset 0). Errors: a duplicate tensor name,
  // a key listed but not in `kv`, a tensor without data or whose n_bytes differs from
  // its shape and type.
  static Result<GgufFile> assemble(std::string origin, std::map<std::string, Value> kv,
                                   std::vector<std::string> keys, std::vector<TensorInfo> tensors,
                                   std::shared_ptr<const void> owner);
  // For an assembled file: the names its tensors and keys had in their source (a Hugging Face
  // folder's tensor names, config.json keys), so errors can name what the user has. Empty
  // for a file read from disk.
  const std::map<std::string, std::string>& source_names() const { return source_names_; }
  void set_source_names(std::map<std::string, std::string> names) { source_names_ = std::move(names); }

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& path() const { return origin_; }
  size_t file_size() const { return size_; }
  // Byte offset of the data section (aligned end of the header) in the file.
  uint64_t data_offset() const { return data_offset_; }

  const std::map<std::string, Value>& metadata() const { return kv_; }
  // Metadata keys in file order.
  const std::vector<std::string>& metadata_keys() const { return keys_; }
  const Value* find(const std::string& key) const;

  // Typed getters. Errors name the key: missing, or wrong type.
  Result<std::string> get_string(const std::string& key) const;
  Result<uint64_t> get_uint(const std::string& key) const;   // any unsigned/non-negative int
  Result<int64_t> get_int(const std::string& key) const;     // any integer type
  Result<double> get_float(const std::string& key) const;    // F32/F64 (or integer)
  Result<bool> get_bool(const std::string& key) const;
  Result<std::vector<std::string>> get_string_array(const std::string& key) const;
  Result<std::vector<float>> get_f32_array(const std::string& key) const;    // F32/F64 elems
  Result<std::vector<int32_t>> get_i32_array(const std::string& key) const;  // integer elems that fit (BOOL as 0/1)

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;

 private:
  friend class Parser;
  std::shared_ptr<MappedFile> file_;  // null when parsed from memory
  std::shared_ptr<const void> owner_;  // assemble(): what the tensors point into
  std::map<std::string, std::string> source_names_;
  std::string origin_;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, Value> kv_;
  std::vector<std::string> keys_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Human-readable dump for `specula info FILE`: version, alignment, every metadata key
// with its type and value (arrays: element type, length, first few elements; long
// strings abbreviated), then the tensor table (name, type, shape, offset, bytes) and
// totals per type.
std::string describe(const GgufFile& f);

}  // namespace specula::gguf
