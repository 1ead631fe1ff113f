// formats/safetensors.h — safetensors reader over a memory-mapped file, and model folders
// of one file or of shards listed by a model.safetensors.index.json.
//
// Source: the safetensors format description (huggingface/safetensors, README "Format"):
// an 8-byte little-endian u64 header length N, N bytes of UTF-8 JSON, then the data
// buffer. The JSON is an object mapping each tensor name to
// {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]} (offsets relative to the
// data buffer, end exclusive), plus an optional "__metadata__" object of string -> string.
//
// Everything is checked before use, and a bad file yields a Status that names the file
// and the tensor or field, never a crash or an out-of-bounds read:
//   "[safetensors] /m/model.safetensors: tensor 'w': data_offsets [0, 400] past the end
//    of the data buffer (100 bytes)".
// Checked: the header length (inside the file, at most kMaxHeaderSize), the JSON syntax
// and UTF-8, duplicate keys at any level (JSON allows them; we refuse), the header starts
// with '{', every entry is an object with a known dtype, a shape of non-negative integers
// whose element count and byte size do not overflow, two ordered integer data_offsets
// inside the data buffer spanning exactly product(shape) * element size bytes, and, as the
// format requires, tensors that cover the data buffer exactly (no overlap, no hole, no
// trailing bytes); "__metadata__" must be an object of strings. Unknown keys inside a
// tensor entry are ignored, as the reference reader does.
//
// Tensor data stays in the mapping; callers get non-owning pointers valid while the File
// (or a copy of it) lives. Alignment: the data buffer starts at file offset 8 + N, and
// neither the format nor all writers align it, so `TensorInfo::data` may be misaligned for
// its element type (e.g. an F32 tensor after an odd-length F16 one). `alignment` records
// the largest power of two (up to 64) dividing the address: read through memcpy, or copy,
// unless `alignment >= element size` (for vector loads, check what the kernel needs).
//
// Shapes are row-major as in the file: shape[0] is the outermost dimension and
// shape.back() the contiguous one (the reverse of GGUF's order).
//
// Does not interpret metadata or config.json, convert or validate tensor contents (BOOL
// bytes are not checked), or know any model's tensor names; big-endian hosts unsupported.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mmap.h"
#include "specula/status.h"

namespace specula::safetensors {

// Headers (and index files) longer than this are refused, as the reference reader does.
inline constexpr uint64_t kMaxHeaderSize = 100'000'000;

// The element types of the format, spelled as in the file ("F32", "U32", ...).
enum class ElementType : uint8_t {
  F64, F32, F16, BF16, F8_E4M3, F8_E5M2,
  I64, I32, I16, I8, U64, U32, U16, U8, BOOL,
};
std::string_view element_type_name(ElementType t);
size_t element_size(ElementType t);  // bytes per element
// The type for a dtype string, or nullopt when unknown.
std::optional<ElementType> parse_element_type(std::string_view s);
// specula's DType for F32/F16/BF16; nullopt for every other type (integers, F64, FP8,
// BOOL), which callers read raw: MLX quantized weights are U32 words of packed codes.
std::optional<DType> to_dtype(ElementType t);

struct TensorInfo {
  std::string name;
  ElementType type = ElementType::F32;
  std::optional<DType> dtype;     // to_dtype(type)
  std::vector<int64_t> shape;     // row-major: shape.back() is contiguous; [] is a scalar
  uint64_t begin = 0, end = 0;    // data_offsets, relative to the data buffer
  uint64_t file_offset = 0;       // absolute offset of the first byte in the file
  const uint8_t* data = nullptr;  // into the mapping (not null, even when n_bytes == 0)
  size_t n_bytes = 0;             // end - begin == n_elements() * element_size(type)
  size_t alignment = 1;           // largest power of two <= 64 dividing `data`'s address
  int64_t n_elements() const;     // 1 for a scalar, 0 when any dimension is 0
};

class File {
 public:
  // Errors: the file cannot be mapped ("[mmap] PATH: ..."), or any check above fails
  // ("[safetensors] PATH: ...").
  static Result<File> open(const std::string& path);
  // Parse bytes already in memory (tests, fuzzing); `bytes` must outlive the result.
  // Messages name `origin` where they would name the path.
  static Result<File> parse(const uint8_t* bytes, size_t size, std::string origin = "<memory>");

  const std::string& path() const { return origin_; }
  size_t file_size() const { return size_; }
  uint64_t header_size() const { return header_size_; }  // N
  uint64_t data_offset() const { return 8 + header_size_; }

  // In data order (by begin offset; empty tensors at the same offset by name).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  // "__metadata__" (empty when absent), e.g. {"format": "pt"} or {"format": "mlx"}.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  friend class HeaderParser;
  std::shared_ptr<MappedFile> file_;  // null when parsed from memory
  std::string origin_;
  size_t size_ = 0;
  uint64_t header_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// File::open.
inline Result<File> open(const std::string& path) { return File::open(path); }

// A model folder: `model.safetensors`, or else `model.safetensors.index.json`
// ({"metadata": {...}, "weight_map": {tensor name: shard file name}}) and its shards, each
// opened once. When both exist the single file wins (as transformers does). The tensors
// are those of the shards; the index is checked against them.
//
// Errors (naming the folder or the index file): neither file present (naming both); an
// index that is not an object, lacks "weight_map", or maps a name to a non-string; a shard
// name that is empty, ".", "..", or holds '/', '\\' or NUL; a missing shard (naming the
// file and one tensor mapped to it); a tensor mapped to a shard that does not hold it; a
// tensor present in two shards. Tensors present in a shard but not named by the index are
// kept (transformers loads them too); shard files that the index does not name are not
// opened. Files may be symlinks (the Hugging Face cache's layout); they are followed.
class Folder {
 public:
  static constexpr const char* kSingleFile = "model.safetensors";
  static constexpr const char* kIndexFile = "model.safetensors.index.json";

  static Result<Folder> open(const std::string& dir);

  Folder(Folder&&) = default;
  Folder& operator=(Folder&&) = default;
  Folder(const Folder&) = delete;  // tensors_ points into shards_
  Folder& operator=(const Folder&) = delete;

  const std::string& dir() const { return dir_; }
  bool sharded() const { return sharded_; }
  // The opened files: one, or the shards in file-name order.
  const std::vector<File>& shards() const { return shards_; }
  // Every tensor of every shard, by name.
  const std::vector<const TensorInfo*>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  // The file holding a tensor, or null.
  const File* shard_of(std::string_view name) const;
  // The index's "metadata" (empty for a single file): strings as they are, other values
  // as JSON text (e.g. "total_size" -> "123456").
  const std::map<std::string, std::string>& index_metadata() const { return index_metadata_; }

 private:
  Folder() = default;
  std::string dir_;
  bool sharded_ = false;
  std::vector<File> shards_;
  std::vector<const TensorInfo*> tensors_;
  std::map<std::string, std::pair<size_t, size_t>, std::less<>> where_;  // name -> (shard, tensor)
  std::map<std::string, std::string> index_metadata_;
};

}  // namespace specula::safetensors
