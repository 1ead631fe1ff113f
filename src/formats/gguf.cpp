// formats/gguf.cpp — GGUF v2/v3 parser, typed metadata getters and describe().
//
// Layout (GGUF spec, ggml docs/gguf.md; all little-endian):
//   magic "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count x { string key | u32 type | value }
//   tensor_count x { string name | u32 n_dims | u64 dims[n_dims] | u32 type | u64 offset }
//   padding to general.alignment | tensor data
// string = u64 length + bytes; array = u32 elem_type + u64 count + elements.
// Every read goes through Parser::need(), which compares against the bytes that remain,
// and every count is checked against the smallest encoding of its elements before any
// allocation. Does not interpret metadata or touch tensor contents.
#include "formats/gguf.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

namespace specula::gguf {
namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::F64); }

std::string str_u64(uint64_t v) { return std::to_string(v); }

// Printable rendering of raw bytes (for the magic and for describe()).
std::string escape(std::string_view s, size_t max_chars) {
  std::string out;
  size_t n = 0;
  for (char ch : s) {
    if (n++ >= max_chars) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);  // UTF-8 bytes pass through
    }
  }
  return out;
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Decode scalar element `idx` of a packed little-endian buffer into a Value.
Value scalar_from_raw(ValueType t, const uint8_t* p) {
  Value v;
  v.type = t;
  switch (t) {
    case ValueType::U8: v.u = load<uint8_t>(p); break;
    case ValueType::BOOL: v.u = load<uint8_t>(p) != 0 ? 1 : 0; break;
    case ValueType::I8: v.i = load<int8_t>(p); break;
    case ValueType::U16: v.u = load<uint16_t>(p); break;
    case ValueType::I16: v.i = load<int16_t>(p); break;
    case ValueType::U32: v.u = load<uint32_t>(p); break;
    case ValueType::I32: v.i = load<int32_t>(p); break;
    case ValueType::U64: v.u = load<uint64_t>(p); break;
    case ValueType::I64: v.i = load<int64_t>(p); break;
    case ValueType::F32: v.f = load<float>(p); break;
    case ValueType::F64: v.f = load<double>(p); break;
    case ValueType::STRING:
    case ValueType::ARRAY: break;
  }
  return v;
}

bool is_unsigned(ValueType t) {
  return t == ValueType::U8 || t == ValueType::U16 || t == ValueType::U32 || t == ValueType::U64;
}
bool is_signed(ValueType t) {
  return t == ValueType::I8 || t == ValueType::I16 || t == ValueType::I32 || t == ValueType::I64;
}
bool is_float(ValueType t) { return t == ValueType::F32 || t == ValueType::F64; }

}  // namespace

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8: return "U8";
    case ValueType::I8: return "I8";
    case ValueType::U16: return "U16";
    case ValueType::I16: return "I16";
    case ValueType::U32: return "U32";
    case ValueType::I32: return "I32";
    case ValueType::F32: return "F32";
    case ValueType::BOOL: return "BOOL";
    case ValueType::STRING: return "STRING";
    case ValueType::ARRAY: return "ARRAY";
    case ValueType::U64: return "U64";
    case ValueType::I64: return "I64";
    case ValueType::F64: return "F64";
  }
  return "?";
}

size_t value_type_size(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::STRING: case ValueType::ARRAY: return 0;
  }
  return 0;
}

Value Value::at(size_t idx) const {
  SPECULA_CHECK(type == ValueType::ARRAY && idx < count);
  if (elem_type == ValueType::ARRAY) return arr[idx];
  if (elem_type == ValueType::STRING) {
    Value v;
    v.type = ValueType::STRING;
    v.str = strs[idx];
    return v;
  }
  return scalar_from_raw(elem_type, raw.data() + idx * value_type_size(elem_type));
}

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // overflow excluded by the parser
  return n;
}

// ---------------------------------------------------------------------------------
// Parser

class Parser {
 public:
  Parser(const uint8_t* p, size_t size) : p_(p), size_(size) {}

  Status run(GgufFile& f);

 private:
  size_t remaining() const { return size_ - pos_; }
  bool has(uint64_t n) const { return n <= remaining(); }

  Status truncated(const std::string& ctx, const std::string& what) const {
    return Status::invalid_argument("[gguf] " + ctx + ": " + what + " truncated at byte " + str_u64(pos_) +
                         " (file size " + str_u64(size_) + ")");
  }

  template <typename T>
  Status read(const std::string& ctx, const char* what, T* out) {
    if (!has(sizeof(T))) return truncated(ctx, what);
    *out = load<T>(p_ + pos_);
    pos_ += sizeof(T);
    return Status::ok();
  }

  Status read_string(const std::string& ctx, const char* what, std::string* out) {
    uint64_t len = 0;
    SPECULA_RETURN_IF_ERROR(read(ctx, what, &len));
    if (!has(len)) {
      return Status::invalid_argument("[gguf] " + ctx + ": " + what + " of " + str_u64(len) +
                           " bytes truncated at byte " + str_u64(pos_) + " (file size " +
                           str_u64(size_) + ")");
    }
    out->assign(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return Status::ok();
  }

  Status read_value(const std::string& ctx, ValueType t, int depth, Value* v);
  Status read_array(const std::string& ctx, int depth, Value* v);

  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
};

Status Parser::read_value(const std::string& ctx, ValueType t, int depth, Value* v) {
  v->type = t;
  switch (t) {
    case ValueType::STRING: return read_string(ctx, "string", &v->str);
    case ValueType::ARRAY: return read_array(ctx, depth, v);
    default: {
      const size_t n = value_type_size(t);
      if (!has(n)) return truncated(ctx, std::string(value_type_name(t)) + " value");
      if (t == ValueType::BOOL && p_[pos_] > 1)  // the spec's bool is one byte, 0 or 1
        return Status::invalid_argument("[gguf] " + ctx + ": bool value " + std::to_string(p_[pos_]) + " at byte " +
                             str_u64(pos_) + " is neither 0 nor 1");
      Value s = scalar_from_raw(t, p_ + pos_);
      v->u = s.u;
      v->i = s.i;
      v->f = s.f;
      pos_ += n;
      return Status::ok();
    }
  }
}

Status Parser::read_array(const std::string& ctx, int depth, Value* v) {
  if (depth >= kMaxArrayDepth) {
    return Status::invalid_argument("[gguf] " + ctx + ": arrays nested deeper than " +
                         std::to_string(kMaxArrayDepth) + " levels at byte " + str_u64(pos_));
  }
  uint32_t et = 0;
  SPECULA_RETURN_IF_ERROR(read(ctx, "array element type", &et));
  if (!valid_value_type(et)) {
    return Status::invalid_argument("[gguf] " + ctx + ": unknown array element type " + std::to_string(et) +
                         " at byte " + str_u64(pos_ - 4));
  }
  const auto elem = static_cast<ValueType>(et);
  uint64_t count = 0;
  SPECULA_RETURN_IF_ERROR(read(ctx, "array length", &count));
  v->elem_type = elem;
  v->count = count;
  // Smallest encoding of one element: scalars their size, a string its u64 length,
  // a nested array its u32 type + u64 count.
  const size_t scalar = value_type_size(elem);
  const uint64_t min_elem = elem == ValueType::STRING ? 8 : elem == ValueType::ARRAY ? 12 : scalar;
  const std::string what = "array of " + str_u64(count) + " " +
                           (elem == ValueType::STRING ? std::string("strings")
                            : elem == ValueType::ARRAY ? std::string("arrays")
                                                       : std::string(value_type_name(elem)));
  if (count > remaining() / min_elem) return truncated(ctx, what);
  const size_t n = static_cast<size_t>(count);
  if (elem == ValueType::STRING) {
    v->strs.resize(n);
    for (size_t k = 0; k < n; ++k) {
      uint64_t len = 0;
      if (!has(8)) return truncated(ctx, what);
      len = load<uint64_t>(p_ + pos_);
      pos_ += 8;
      if (!has(len)) return truncated(ctx, what);
      v->strs[k].assign(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(len));
      pos_ += static_cast<size_t>(len);
    }
  } else if (elem == ValueType::ARRAY) {
    v->arr.resize(n);
    for (size_t k = 0; k < n; ++k) {
      SPECULA_RETURN_IF_ERROR(read_value(ctx + " [" + std::to_string(k) + "]", ValueType::ARRAY,
                                         depth + 1, &v->arr[k]));
    }
  } else {
    const size_t bytes = n * scalar;
    if (elem == ValueType::BOOL)
      for (size_t k = 0; k < bytes; ++k)
        if (p_[pos_ + k] > 1)
          return Status::invalid_argument("[gguf] " + ctx + " [" + std::to_string(k) + "]: bool value " +
                               std::to_string(p_[pos_ + k]) + " at byte " + str_u64(pos_ + k) +
                               " is neither 0 nor 1");
    v->raw.assign(p_ + pos_, p_ + pos_ + bytes);
    pos_ += bytes;
  }
  return Status::ok();
}

Status Parser::run(GgufFile& f) {
  f.size_ = size_;
  if (size_ < 4) {
    return Status::invalid_argument("[gguf] not a GGUF file (only " + str_u64(size_) + " bytes)");
  }
  if (std::memcmp(p_, "GGUF", 4) != 0) {
    return Status::invalid_argument("[gguf] not a GGUF file (magic '" +
                         escape(std::string_view(reinterpret_cast<const char*>(p_), 4), 4) + "')");
  }
  pos_ = 4;
  const std::string hdr = "header";
  uint32_t version = 0;
  SPECULA_RETURN_IF_ERROR(read(hdr, "version", &version));
  if (version == 1) {
    return Status::invalid_argument("[gguf] GGUF version 1 is not supported (only versions 2 and 3)");
  }
  if (version != 2 && version != 3) {
    const uint32_t swapped = __builtin_bswap32(version);
    if (swapped == 2 || swapped == 3) {
      return Status::invalid_argument("[gguf] big-endian GGUF file (version " + std::to_string(swapped) +
                           ") is not supported");
    }
    return Status::invalid_argument("[gguf] unsupported GGUF version " + std::to_string(version) +
                         " (only versions 2 and 3)");
  }
  f.version_ = version;
  uint64_t tensor_count = 0, kv_count = 0;
  SPECULA_RETURN_IF_ERROR(read(hdr, "tensor_count", &tensor_count));
  SPECULA_RETURN_IF_ERROR(read(hdr, "kv_count", &kv_count));
  // Smallest key/value: u64 key length + u32 type + 1-byte value. Smallest tensor info:
  // u64 name length + u32 n_dims + one u64 dim + u32 type + u64 offset.
  constexpr uint64_t kMinKv = 8 + 4 + 1, kMinTensor = 8 + 4 + 8 + 4 + 8;
  if (kv_count > remaining() / kMinKv) {
    return Status::invalid_argument("[gguf] header: kv_count " + str_u64(kv_count) +
                         " cannot fit in the remaining " + str_u64(remaining()) +
                         " bytes (file size " + str_u64(size_) + ")");
  }
  if (tensor_count > (remaining() - kv_count * kMinKv) / kMinTensor) {
    return Status::invalid_argument("[gguf] header: tensor_count " + str_u64(tensor_count) +
                         " cannot fit in the remaining " + str_u64(remaining()) +
                         " bytes (file size " + str_u64(size_) + ")");
  }

  // Metadata.
  f.keys_.reserve(static_cast<size_t>(kv_count));
  for (uint64_t k = 0; k < kv_count; ++k) {
    std::string key;
    SPECULA_RETURN_IF_ERROR(read_string("metadata key #" + str_u64(k), "key", &key));
    const std::string ctx = "metadata key '" + escape(key, 200) + "'";
    uint32_t type = 0;
    SPECULA_RETURN_IF_ERROR(read(ctx, "value type", &type));
    if (!valid_value_type(type)) {
      return Status::invalid_argument("[gguf] " + ctx + ": unknown value type " + std::to_string(type) +
                           " at byte " + str_u64(pos_ - 4));
    }
    Value v;
    SPECULA_RETURN_IF_ERROR(read_value(ctx, static_cast<ValueType>(type), 0, &v));
    auto [it, inserted] = f.kv_.emplace(key, std::move(v));
    if (!inserted) return Status::invalid_argument("[gguf] " + ctx + ": duplicate key");
    f.keys_.push_back(std::move(key));
  }

  // general.alignment.
  f.alignment_ = kDefaultAlignment;
  if (auto it = f.kv_.find("general.alignment"); it != f.kv_.end()) {
    const Value& a = it->second;
    uint64_t al = 0;
    if (is_unsigned(a.type)) {
      al = a.u;
    } else if (is_signed(a.type) && a.i > 0) {
      al = static_cast<uint64_t>(a.i);
    } else if (!is_signed(a.type)) {
      return Status::invalid_argument("[gguf] metadata key 'general.alignment': expected an integer, got " +
                           std::string(value_type_name(a.type)));
    }
    if (al == 0 || (al & (al - 1)) != 0) {
      return Status::invalid_argument("[gguf] metadata key 'general.alignment': " +
                           (is_signed(a.type) ? std::to_string(a.i) : str_u64(al)) +
                           " is not a nonzero power of two");
    }
    f.alignment_ = al;
  }

  // Tensor infos.
  f.tensors_.resize(static_cast<size_t>(tensor_count));
  for (uint64_t t = 0; t < tensor_count; ++t) {
    TensorInfo& ti = f.tensors_[static_cast<size_t>(t)];
    SPECULA_RETURN_IF_ERROR(read_string("tensor #" + str_u64(t), "name", &ti.name));
    const std::string ctx = "tensor '" + escape(ti.name, 200) + "'";
    uint32_t n_dims = 0;
    SPECULA_RETURN_IF_ERROR(read(ctx, "n_dims", &n_dims));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return Status::invalid_argument("[gguf] " + ctx + ": n_dims " + std::to_string(n_dims) +
                           " out of range [1, " + std::to_string(kMaxDims) + "]");
    }
    ti.shape.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      SPECULA_RETURN_IF_ERROR(read(ctx, "dimension", &dim));
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Status::invalid_argument("[gguf] " + ctx + ": dimension " + std::to_string(d) + " = " +
                             str_u64(dim) + " too large");
      }
      ti.shape[d] = static_cast<int64_t>(dim);
    }
    uint32_t type_id = 0;
    SPECULA_RETURN_IF_ERROR(read(ctx, "type", &type_id));
    std::optional<DTypeInfo> info = dtype_info(type_id);
    if (info && info->type == DType::Q8_A) info.reset();  // specula's own type, never in a file
    if (!info) {
      // GGML types specula does not implement yet, named so the user knows what the file needs.
      static const char* const kKnown[] = {
          nullptr, nullptr, nullptr, nullptr, "Q4_2", "Q4_3", nullptr, nullptr, nullptr, nullptr,
          "Q2_K", "Q3_K", nullptr, nullptr, nullptr, nullptr, "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
          "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M",
          nullptr, nullptr, nullptr, nullptr, "TQ1_0", "TQ2_0", nullptr, nullptr, nullptr, "MXFP4"};
      if (type_id < sizeof(kKnown) / sizeof(kKnown[0]) && kKnown[type_id] != nullptr)
        return Status::invalid_argument("[gguf] " + ctx + ": tensor type " + kKnown[type_id] + " (id " +
                             std::to_string(type_id) + ") is not supported");
      return Status::invalid_argument("[gguf] " + ctx + ": unknown type id " + std::to_string(type_id));
    }
    ti.type = info->type;
    SPECULA_RETURN_IF_ERROR(read(ctx, "offset", &ti.offset));

    // Element count and byte size, overflow-checked.
    uint64_t n_el = 1;
    for (int64_t d : ti.shape) {
      const auto ud = static_cast<uint64_t>(d);
      if (ud != 0 && n_el > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / ud) {
        return Status::invalid_argument("[gguf] " + ctx + ": element count overflows int64");
      }
      n_el *= ud;
    }
    const auto block = static_cast<uint64_t>(info->block_size);
    if (static_cast<uint64_t>(ti.shape[0]) % block != 0) {
      return Status::invalid_argument("[gguf] " + ctx + ": shape[0] = " + std::to_string(ti.shape[0]) +
                           " is not a multiple of the " + std::string(info->name) +
                           " block size " + str_u64(block));
    }
    const uint64_t n_blocks = n_el / block;
    if (info->type_size != 0 && n_blocks > std::numeric_limits<uint64_t>::max() / info->type_size) {
      return Status::invalid_argument("[gguf] " + ctx + ": byte size overflows");
    }
    const uint64_t n_bytes = n_blocks * info->type_size;
    if (n_bytes > size_) {
      return Status::invalid_argument("[gguf] " + ctx + ": size " + str_u64(n_bytes) +
                           " bytes exceeds the file size " + str_u64(size_));
    }
    ti.n_bytes = static_cast<size_t>(n_bytes);
    if (ti.offset % f.alignment_ != 0) {
      return Status::invalid_argument("[gguf] " + ctx + ": offset " + str_u64(ti.offset) +
                           " is not a multiple of the alignment " + str_u64(f.alignment_));
    }
    if (!f.tensor_index_.emplace(ti.name, static_cast<size_t>(t)).second) {
      return Status::invalid_argument("[gguf] " + ctx + ": duplicate tensor name");
    }
  }

  // Data section: the aligned end of the header.
  const uint64_t header_end = pos_;
  const uint64_t data_start = (header_end + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  if (data_start < header_end) {
    return Status::invalid_argument("[gguf] alignment " + str_u64(f.alignment_) + " overflows the data offset");
  }
  f.data_offset_ = data_start;
  for (TensorInfo& ti : f.tensors_) {
    // data_start <= header_end + alignment; both offsets are bounded before adding.
    const uint64_t begin = data_start + ti.offset;
    const bool overflow = ti.offset > std::numeric_limits<uint64_t>::max() - data_start ||
                          ti.n_bytes > std::numeric_limits<uint64_t>::max() - begin;
    if (overflow || begin + ti.n_bytes > size_) {
      return Status::invalid_argument("[gguf] tensor '" + escape(ti.name, 200) + "': data [" +
                           (overflow ? std::string("overflow") : str_u64(begin)) + ", " +
                           (overflow ? std::string("overflow") : str_u64(begin + ti.n_bytes)) +
                           ") past end of file (size " + str_u64(size_) + ")");
    }
    ti.data = p_ + begin;
  }
  return Status::ok();
}

// ---------------------------------------------------------------------------------
// GgufFile

Result<GgufFile> GgufFile::parse(const uint8_t* bytes, size_t size, std::string origin) {
  if (bytes == nullptr && size != 0) return Status::invalid_argument("[gguf] null buffer");
  static const uint8_t kEmpty[1] = {0};
  GgufFile f;
  f.origin_ = std::move(origin);
  Parser parser(bytes != nullptr ? bytes : kEmpty, size);
  Status st = parser.run(f);
  if (!st.is_ok()) {
    if (f.origin_ != "<memory>") return Status::error(st.code(), st.message() + " in " + f.origin_);
    return st;
  }
  return f;
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  Result<MappedFile> m = MappedFile::open(path);
  if (!m.is_ok()) return m.status();
  auto file = std::make_shared<MappedFile>(std::move(m).value());
  Result<GgufFile> r = parse(file->data(), file->size(), path);
  if (!r.is_ok()) return r.status();
  r->file_ = std::move(file);
  return r;
}

Result<GgufFile> GgufFile::assemble(std::string origin, std::map<std::string, Value> kv,
                                    std::vector<std::string> keys, std::vector<TensorInfo> tensors,
                                    std::shared_ptr<const void> owner) {
  GgufFile f;
  f.origin_ = std::move(origin);
  f.version_ = 3;
  for (const std::string& k : keys)
    if (kv.find(k) == kv.end()) return Status::invalid_argument("[gguf] " + f.origin_ + ": key '" + k + "' listed without a value");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = tensors[i];
    const DTypeInfo& ti = dtype_info(t.type);
    const int64_t n = t.n_elements();
    if (t.data == nullptr || t.shape.empty() || n % ti.block_size != 0 || t.shape[0] % ti.block_size != 0 ||
        t.n_bytes != static_cast<size_t>(n / ti.block_size) * ti.type_size)
      return Status::invalid_argument("[gguf] " + f.origin_ + ": tensor '" + t.name + "' has no data or a size (" +
                           std::to_string(t.n_bytes) + " bytes) that does not match its shape and type " +
                           std::string(ti.name));
    if (!f.tensor_index_.emplace(t.name, i).second)
      return Status::invalid_argument("[gguf] " + f.origin_ + ": duplicate tensor '" + t.name + "'");
  }
  f.kv_ = std::move(kv);
  f.keys_ = std::move(keys);
  f.tensors_ = std::move(tensors);
  f.owner_ = std::move(owner);
  return f;
}

const Value* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const TensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

Status missing(const std::string& key) {
  return Status::invalid_argument("[gguf] metadata key '" + key + "' not found");
}

Status wrong_type(const std::string& key, const Value& v, const char* expected) {
  std::string got(value_type_name(v.type));
  if (v.type == ValueType::ARRAY) got += "[" + std::string(value_type_name(v.elem_type)) + "]";
  return Status::invalid_argument("[gguf] metadata key '" + key + "': expected " + expected + ", got " + got);
}

}  // namespace

Result<std::string> GgufFile::get_string(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(key);
  if (v->type != ValueType::STRING) return wrong_type(key, *v, "STRING");
  return v->str;
}

Result<uint64_t> GgufFile::get_uint(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(key);
  if (is_unsigned(v->type)) return v->u;
  if (is_signed(v->type)) {
    if (v->i < 0) {
      return Status::invalid_argument("[gguf] metadata key '" + key + "': expected a non-negative integer, got " +
                           std::to_string(v->i));
    }
    return static_cast<uint64_t>(v->i);
  }
  return wrong_type(key, *v, "an unsigned integer");
}

Result<int64_t> GgufFile::get_int(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(key);
  if (is_signed(v->type)) return v->i;
  if (is_unsigned(v->type)) {
    if (v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Status::invalid_argument("[gguf] metadata key '" + key + "': " + str_u64(v->u) +
                           " does not fit in int64");
    }
    return static_cast<int64_t>(v->u);
  }
  return wrong_type(key, *v, "an integer");
}

Result<double> GgufFile::get_float(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(key);
  if (is_float(v->type)) return v->f;
  if (is_signed(v->type)) return static_cast<double>(v->i);
  if (is_unsigned(v->type)) return static_cast<double>(v->u);
  return wrong_type(key, *v, "a number");
}

Result<bool> GgufFile::get_bool(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(key);
  if (v->type != ValueType::BOOL) return wrong_type(key, *v, "BOOL");
  return v->u != 0;
}

Result<std::vector<std::string>> GgufFile::get_string_array(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(key);
  if (v->type != ValueType::ARRAY || v->elem_type != ValueType::STRING) {
    return wrong_type(key, *v, "ARRAY[STRING]");
  }
  return v->strs;
}

Result<std::vector<float>> GgufFile::get_f32_array(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(key);
  if (v->type != ValueType::ARRAY || !is_float(v->elem_type)) {
    return wrong_type(key, *v, "ARRAY[F32] or ARRAY[F64]");
  }
  std::vector<float> out(static_cast<size_t>(v->count));
  if (v->elem_type == ValueType::F32) {
    if (!out.empty()) std::memcpy(out.data(), v->raw.data(), out.size() * sizeof(float));
  } else {
    for (size_t k = 0; k < out.size(); ++k) {
      const double d = load<double>(v->raw.data() + k * 8);
      // Out-of-range doubles become +-inf (a plain cast would be undefined).
      constexpr double kMax = std::numeric_limits<float>::max();
      out[k] = d > kMax    ? std::numeric_limits<float>::infinity()
               : d < -kMax ? -std::numeric_limits<float>::infinity()
                           : static_cast<float>(d);
    }
  }
  return out;
}

Result<std::vector<int32_t>> GgufFile::get_i32_array(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(key);
  const ValueType et = v->elem_type;
  if (v->type != ValueType::ARRAY || !(is_signed(et) || is_unsigned(et) || et == ValueType::BOOL)) {
    return wrong_type(key, *v, "an ARRAY of integers");
  }
  const size_t n = static_cast<size_t>(v->count);
  std::vector<int32_t> out(n);
  if (et == ValueType::I32) {
    if (n != 0) std::memcpy(out.data(), v->raw.data(), n * sizeof(int32_t));
    return out;
  }
  const size_t es = value_type_size(et);
  for (size_t k = 0; k < n; ++k) {
    const Value e = scalar_from_raw(et, v->raw.data() + k * es);
    const bool fits = is_signed(et) ? (e.i >= std::numeric_limits<int32_t>::min() &&
                                       e.i <= std::numeric_limits<int32_t>::max())
                                    : e.u <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max());
    if (!fits) {
      return Status::invalid_argument("[gguf] metadata key '" + key + "': element " + std::to_string(k) + " = " +
                           (is_signed(et) ? std::to_string(e.i) : str_u64(e.u)) +
                           " does not fit in int32");
    }
    out[k] = static_cast<int32_t>(is_signed(et) ? e.i : static_cast<int64_t>(e.u));
  }
  return out;
}

// ---------------------------------------------------------------------------------
// describe()

namespace {

constexpr size_t kMaxStringChars = 80;
constexpr size_t kMaxArrayShown = 8;

std::string scalar_text(const Value& v) {
  char buf[64];
  switch (v.type) {
    case ValueType::BOOL: return v.u != 0 ? "true" : "false";
    case ValueType::F32:
      // Integers as integers (1000000); otherwise the shortest form that reads back
      // as the same float (1e-06, not 9.99999997e-07).
      if (std::fabs(v.f) < 1e15 && v.f == std::floor(v.f)) {
        std::snprintf(buf, sizeof(buf), "%.0f", v.f);
        return buf;
      }
      for (int prec = 6; prec <= 9; ++prec) {
        std::snprintf(buf, sizeof(buf), "%.*g", prec, v.f);
        if (std::strtof(buf, nullptr) == static_cast<float>(v.f)) break;
      }
      return buf;
    case ValueType::F64:
      std::snprintf(buf, sizeof(buf), "%.17g", v.f);
      return buf;
    case ValueType::STRING: {
      std::string s = "\"" + escape(v.str, kMaxStringChars) + "\"";
      if (v.str.size() > kMaxStringChars) s += " (" + std::to_string(v.str.size()) + " bytes)";
      return s;
    }
    case ValueType::ARRAY: return "";
    default: return is_signed(v.type) ? std::to_string(v.i) : str_u64(v.u);
  }
}

std::string type_text(const Value& v) {
  if (v.type != ValueType::ARRAY) return std::string(value_type_name(v.type));
  std::string inner = v.elem_type == ValueType::ARRAY
                          ? (v.count > 0 ? type_text(v.arr[0]) : std::string("ARRAY"))
                          : std::string(value_type_name(v.elem_type));
  return "ARRAY[" + inner + "]";
}

std::string value_text(const Value& v, int depth) {
  if (v.type != ValueType::ARRAY) return scalar_text(v);
  std::string s = "(" + str_u64(v.count) + ") [";
  const size_t shown = static_cast<size_t>(std::min<uint64_t>(v.count, depth == 0 ? kMaxArrayShown : 3));
  for (size_t k = 0; k < shown; ++k) {
    if (k > 0) s += ", ";
    s += depth >= 2 && v.elem_type == ValueType::ARRAY ? std::string("[...]")
                                                        : value_text(v.at(k), depth + 1);
  }
  if (shown < v.count) s += shown > 0 ? ", ..." : "...";
  return s + "]";
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

}  // namespace

std::string describe(const GgufFile& f) {
  std::string out;
  out += "file:        " + f.path() + "\n";
  out += "format:      GGUF v" + std::to_string(f.version()) + "\n";
  out += "file size:   " + str_u64(f.file_size()) + " bytes\n";
  out += "alignment:   " + str_u64(f.alignment()) + "\n";
  out += "data offset: " + str_u64(f.data_offset()) + "\n";
  out += "\nmetadata (" + std::to_string(f.metadata_keys().size()) + " keys):\n";
  size_t key_w = 0;
  for (const std::string& k : f.metadata_keys()) key_w = std::max(key_w, std::min<size_t>(k.size(), 48));
  for (const std::string& k : f.metadata_keys()) {
    const Value* v = f.find(k);
    if (v == nullptr) continue;
    out += "  " + pad(escape(k, 120), key_w) + "  " + pad(type_text(*v), 14) + "  " +
           value_text(*v, 0) + "\n";
  }

  out += "\ntensors (" + std::to_string(f.tensors().size()) + "):\n";
  size_t name_w = 4;
  for (const TensorInfo& t : f.tensors()) name_w = std::max(name_w, std::min<size_t>(t.name.size(), 48));
  out += "  " + pad("name", name_w) + "  " + pad("type", 6) + "  " + pad("shape", 22) + "  " +
         pad("offset", 12) + "  bytes\n";
  struct PerType {
    size_t count = 0;
    uint64_t elements = 0, bytes = 0;
  };
  std::map<std::string, PerType> per_type;
  uint64_t total_el = 0, total_bytes = 0;
  for (const TensorInfo& t : f.tensors()) {
    const std::string tn(dtype_name(t.type));
    out += "  " + pad(escape(t.name, 120), name_w) + "  " + pad(tn, 6) + "  " +
           pad(shape_text(t.shape), 22) + "  " + pad(str_u64(t.offset), 12) + "  " +
           str_u64(t.n_bytes) + "\n";
    PerType& p = per_type[tn];
    p.count++;
    p.elements += static_cast<uint64_t>(t.n_elements());
    p.bytes += t.n_bytes;
    total_el += static_cast<uint64_t>(t.n_elements());
    total_bytes += t.n_bytes;
  }
  out += "\ntotals: " + std::to_string(f.tensors().size()) + " tensors, " + str_u64(total_el) +
         " elements, " + str_u64(total_bytes) + " bytes\n";
  for (const auto& [name, p] : per_type) {
    out += "  " + pad(name, 6) + "  " + pad(std::to_string(p.count) + " tensors", 12) + "  " +
           pad(str_u64(p.elements) + " elements", 22) + "  " + str_u64(p.bytes) + " bytes\n";
  }
  return out;
}

}  // namespace specula::gguf
