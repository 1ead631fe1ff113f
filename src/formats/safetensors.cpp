// formats/safetensors.cpp — safetensors header parser, File and Folder.
//
// JSON is read twice with nlohmann/json, without exceptions: first a strict SAX pass
// (syntax, UTF-8, duplicate keys at any level, nesting depth) that only records the
// first problem, then the DOM that the field checks walk. Every number is checked as a
// non-negative integer before use, every product and sum for overflow, and every range
// against the data buffer before a pointer is formed. Does not touch tensor contents.
#include "formats/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

namespace specula::safetensors {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxNameChars = 200;  // names longer than this are cut in messages
constexpr size_t kMaxJsonDepth = 64;
constexpr size_t kMaxShownDims = 16;

std::string str_u64(uint64_t v) { return std::to_string(v); }

// Length of the valid UTF-8 sequence at s[i] (RFC 3629: no overlongs, surrogates or
// code points above U+10FFFF), or 0 when the bytes there are not one.
size_t utf8_sequence(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = 0;
  uint32_t cp = 0, min = 0;
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F, min = 0x80;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F, min = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07, min = 0x10000;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

// A printable rendering for messages: valid UTF-8 passes through, control characters and
// invalid bytes are escaped (quotes and backslashes too, when `quotes`: names are shown
// in '...'), and long text is cut.
std::string escape(std::string_view s, size_t max_chars = kMaxNameChars, bool quotes = true) {
  std::string out;
  size_t chars = 0;
  for (size_t i = 0; i < s.size();) {
    if (chars++ >= max_chars) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      if (const size_t n = utf8_sequence(s, i); n > 0) {
        out.append(s.substr(i, n));
        i += n;
        continue;
      }
    }
    if (quotes && (c == '\'' || c == '"' || c == '\\')) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

std::string quote(std::string_view s) { return "'" + escape(s) + "'"; }

// "a number", "an object", ... for messages.
std::string a_type(const json& v) {
  const std::string t = v.type_name();
  return (t == "object" || t == "array" ? "an " : "a ") + t;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d == kMaxShownDims) {
      s += ", ... (" + std::to_string(shape.size()) + " dims)";
      break;
    }
    s += (d ? ", " : "") + std::to_string(shape[d]);
  }
  return s + "]";
}

// ---------------------------------------------------------------------------------
// Strict JSON pass.

// Where the first problem is: `path` holds the keys (or "[i]" indices) of the values
// enclosing the object or array where it was found.
struct JsonProblem {
  enum Kind { kNone, kSyntax, kDuplicate, kDepth } kind = kNone;
  std::string message;            // kSyntax: nlohmann's text without its "[json...]" tag
  size_t position = 0;            // kSyntax: byte in the text
  std::vector<std::string> path;  // kDuplicate, kDepth
  std::string key;                // kDuplicate
};

class StrictSax : public nlohmann::json_sax<json> {
 public:
  JsonProblem problem;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(true); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    Frame& f = stack_.back();
    if (!f.keys.insert(k).second) {
      problem.kind = JsonProblem::kDuplicate;
      problem.path = path();
      problem.key = k;
      return false;
    }
    f.key = k;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) override {
    problem.kind = JsonProblem::kSyntax;
    problem.position = position;
    std::string m = ex.what();
    if (m.rfind("[json.exception.", 0) == 0) {
      if (const size_t sp = m.find("] "); sp != std::string::npos) m = m.substr(sp + 2);
    }
    problem.message = escape(m, 300, /*quotes=*/false);
    return false;
  }

 private:
  struct Frame {
    bool object = false;
    std::set<std::string> keys;  // objects: keys seen
    std::string key;             // objects: the current key
    size_t count = 0;            // arrays: values seen
  };

  bool value() {
    if (!stack_.empty() && !stack_.back().object) ++stack_.back().count;
    return true;
  }
  bool open(bool object) {
    value();
    if (stack_.size() >= kMaxJsonDepth) {
      problem.kind = JsonProblem::kDepth;
      problem.path = path();
      return false;
    }
    stack_.push_back(Frame{object, {}, {}, 0});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }
  // The keys/indices of the frames enclosing the innermost one.
  std::vector<std::string> path() const {
    std::vector<std::string> p;
    for (size_t i = 0; i + 1 < stack_.size(); ++i) {
      const Frame& f = stack_[i];
      if (f.object) {
        p.push_back(f.key);
      } else {
        std::string index = "[";  // built in steps: GCC 12 -O3 misreads "[" + s + "]" (-Wrestrict)
        index += std::to_string(f.count - 1);
        index += ']';
        p.push_back(std::move(index));
      }
    }
    return p;
  }

  std::vector<Frame> stack_;
};

JsonProblem check_json(std::string_view text) {
  StrictSax sax;
  const bool ok = json::sax_parse(text.data(), text.data() + text.size(), &sax);
  if (!ok && sax.problem.kind == JsonProblem::kNone) {
    sax.problem.kind = JsonProblem::kSyntax;
    sax.problem.message = "invalid JSON";
  }
  return sax.problem;
}

std::string path_text(const std::vector<std::string>& path) {
  constexpr size_t kMaxShown = 8;
  std::string s;
  for (size_t i = 0; i < path.size() && i < kMaxShown; ++i) {
    const std::string& k = path[i];
    s += (i ? " > " : "") + (!k.empty() && k[0] == '[' ? k : quote(k));
  }
  if (path.size() > kMaxShown) s += " > ... (" + std::to_string(path.size()) + " levels)";
  return s;
}

// A message for a problem found by check_json in a file whose JSON starts at byte
// `base` (8 for a safetensors header, 0 for an index).
std::string problem_text(const JsonProblem& p, const char* what, uint64_t base) {
  switch (p.kind) {
    case JsonProblem::kSyntax:
      return std::string(what) + " is not valid JSON (near byte " + str_u64(base + p.position) +
             "): " + p.message;
    case JsonProblem::kDuplicate:
      return std::string(what) + ": duplicate key " + quote(p.key) +
             (p.path.empty() ? std::string(" at the top level") : " in " + path_text(p.path));
    case JsonProblem::kDepth:
      return std::string(what) + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
             " levels in " + path_text(p.path);
    case JsonProblem::kNone: break;
  }
  return std::string(what) + ": invalid JSON";
}

// A JSON value as a non-negative integer (JSON "3" or "-0"; not "3.0" or "-1").
// Returns an empty string on success, else why not ("is negative", ...).
std::string as_count(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return {};
  }
  if (v.is_number_integer()) {
    const auto i = v.get<int64_t>();
    if (i < 0) return "= " + std::to_string(i) + " is negative";
    *out = static_cast<uint64_t>(i);
    return {};
  }
  if (v.is_number_float()) return "= " + v.dump() + " is not an integer";
  return "is " + a_type(v) + ", expected a non-negative integer";
}

}  // namespace

// ---------------------------------------------------------------------------------
// Element types

std::string_view element_type_name(ElementType t) {
  switch (t) {
    case ElementType::F64: return "F64";
    case ElementType::F32: return "F32";
    case ElementType::F16: return "F16";
    case ElementType::BF16: return "BF16";
    case ElementType::F8_E4M3: return "F8_E4M3";
    case ElementType::F8_E5M2: return "F8_E5M2";
    case ElementType::I64: return "I64";
    case ElementType::I32: return "I32";
    case ElementType::I16: return "I16";
    case ElementType::I8: return "I8";
    case ElementType::U64: return "U64";
    case ElementType::U32: return "U32";
    case ElementType::U16: return "U16";
    case ElementType::U8: return "U8";
    case ElementType::BOOL: return "BOOL";
  }
  return "?";
}

size_t element_size(ElementType t) {
  switch (t) {
    case ElementType::F64: case ElementType::I64: case ElementType::U64: return 8;
    case ElementType::F32: case ElementType::I32: case ElementType::U32: return 4;
    case ElementType::F16: case ElementType::BF16: case ElementType::I16: case ElementType::U16: return 2;
    case ElementType::F8_E4M3: case ElementType::F8_E5M2: case ElementType::I8: case ElementType::U8:
    case ElementType::BOOL: return 1;
  }
  return 1;
}

std::optional<ElementType> parse_element_type(std::string_view s) {
  static constexpr ElementType kAll[] = {
      ElementType::F64, ElementType::F32, ElementType::F16, ElementType::BF16, ElementType::F8_E4M3,
      ElementType::F8_E5M2, ElementType::I64, ElementType::I32, ElementType::I16, ElementType::I8,
      ElementType::U64, ElementType::U32, ElementType::U16, ElementType::U8, ElementType::BOOL};
  for (ElementType t : kAll)
    if (element_type_name(t) == s) return t;
  return std::nullopt;
}

std::optional<DType> to_dtype(ElementType t) {
  switch (t) {
    case ElementType::F32: return DType::F32;
    case ElementType::F16: return DType::F16;
    case ElementType::BF16: return DType::BF16;
    default: return std::nullopt;
  }
}

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // bounded by the parser
  return n;
}

// ---------------------------------------------------------------------------------
// Header parser

class HeaderParser {
 public:
  HeaderParser(const uint8_t* p, size_t size, File& f) : p_(p), size_(size), f_(f) {}
  Status run();

 private:
  Status fail(const std::string& msg) const {
    return Status::error("[safetensors] " + f_.origin_ + ": " + msg);
  }
  Status parse_metadata(const json& v);
  Status parse_entry(const std::string& name, const json& v, TensorInfo* t);

  const uint8_t* p_;
  size_t size_;
  File& f_;
  uint64_t data_size_ = 0;
};

Status HeaderParser::run() {
  f_.size_ = size_;
  if (size_ < 8) {
    return fail("file of " + str_u64(size_) + " bytes is too short for the 8-byte header length");
  }
  uint64_t n = 0;
  std::memcpy(&n, p_, 8);  // little-endian hosts only
  if (n > kMaxHeaderSize) {
    return fail("header length " + str_u64(n) + " exceeds the limit of " + str_u64(kMaxHeaderSize) +
                " bytes (file size " + str_u64(size_) + ")");
  }
  if (n > size_ - 8) {
    return fail("header length " + str_u64(n) + " past end of file (size " + str_u64(size_) +
                ", header would end at byte " + str_u64(8 + n) + ")");
  }
  f_.header_size_ = n;
  data_size_ = size_ - 8 - n;
  const std::string_view text(reinterpret_cast<const char*>(p_ + 8), static_cast<size_t>(n));
  if (text.empty()) return fail("header is empty (length 0)");
  if (text[0] != '{') {
    return fail("header does not start with '{' (first byte " + quote(text.substr(0, 1)) + ")");
  }
  if (const JsonProblem p = check_json(text); p.kind != JsonProblem::kNone) {
    if (p.kind == JsonProblem::kDuplicate && p.path.empty()) {
      return fail(p.key == "__metadata__" ? std::string("header: duplicate \"__metadata__\"")
                                          : "header: duplicate tensor name " + quote(p.key));
    }
    if (p.kind == JsonProblem::kDuplicate && p.path.size() == 1) {
      return fail((p.path[0] == "__metadata__" ? std::string("\"__metadata__\"") : "tensor " + quote(p.path[0])) +
                  ": duplicate key " + quote(p.key));
    }
    return fail(problem_text(p, "header", 8));
  }
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return fail("header is not a JSON object");

  f_.tensors_.reserve(j.size());
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      SPECULA_RETURN_IF_ERROR(parse_metadata(v));
      continue;
    }
    TensorInfo t;
    SPECULA_RETURN_IF_ERROR(parse_entry(name, v, &t));
    f_.tensors_.push_back(std::move(t));
  }

  // The tensors must cover the data buffer exactly, in some order.
  std::sort(f_.tensors_.begin(), f_.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  uint64_t covered = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : f_.tensors_) {
    if (t.begin < covered) {
      return fail("tensor " + quote(t.name) + ": data_offsets [" + str_u64(t.begin) + ", " +
                  str_u64(t.end) + "] overlap tensor " + quote(prev->name) + " [" +
                  str_u64(prev->begin) + ", " + str_u64(prev->end) + "]");
    }
    if (t.begin > covered) {
      return fail("bytes [" + str_u64(covered) + ", " + str_u64(t.begin) +
                  ") of the data buffer belong to no tensor (a hole before tensor " + quote(t.name) + ")");
    }
    covered = t.end;
    prev = &t;
  }
  if (covered != data_size_) {
    return fail("bytes [" + str_u64(covered) + ", " + str_u64(data_size_) +
                ") at the end of the data buffer belong to no tensor (" + str_u64(data_size_ - covered) +
                " trailing bytes)");
  }

  const uint8_t* data = p_ + 8 + n;
  for (size_t k = 0; k < f_.tensors_.size(); ++k) {
    TensorInfo& t = f_.tensors_[k];
    t.file_offset = 8 + n + t.begin;
    t.data = data + t.begin;
    const auto addr = reinterpret_cast<uintptr_t>(t.data);
    t.alignment = 64;
    while (t.alignment > 1 && addr % t.alignment != 0) t.alignment /= 2;
    f_.index_.emplace(t.name, k);  // names are unique (checked by the JSON pass)
  }
  return Status::ok();
}

Status HeaderParser::parse_metadata(const json& v) {
  const auto looks_like_tensor = [&] { return v.contains("dtype") || v.contains("data_offsets"); };
  if (!v.is_object()) {
    return fail("\"__metadata__\" is " + a_type(v) + ", expected an object of strings");
  }
  for (const auto& [key, s] : v.items()) {
    if (!s.is_string()) {
      return fail("\"__metadata__\" key " + quote(key) + ": value is " + a_type(s) + ", expected a string" +
                  (looks_like_tensor() ? " (a tensor cannot be named \"__metadata__\")" : ""));
    }
    f_.metadata_.emplace(key, s.get<std::string>());
  }
  return Status::ok();
}

Status HeaderParser::parse_entry(const std::string& name, const json& v, TensorInfo* t) {
  const std::string ctx = "tensor " + quote(name) + ": ";
  t->name = name;
  if (!v.is_object()) return fail(ctx + "entry is " + a_type(v) + ", expected an object");
  const auto field = [&](const char* key, const json** out) -> Status {
    const auto it = v.find(key);
    if (it == v.end()) return fail(ctx + "missing field '" + key + "'");
    *out = &*it;
    return Status::ok();
  };

  // dtype
  const json* dt = nullptr;
  SPECULA_RETURN_IF_ERROR(field("dtype", &dt));
  if (!dt->is_string()) return fail(ctx + "field 'dtype' is " + a_type(*dt) + ", expected a string");
  const std::optional<ElementType> et = parse_element_type(dt->get_ref<const std::string&>());
  if (!et) return fail(ctx + "unknown dtype " + quote(dt->get_ref<const std::string&>()));
  t->type = *et;
  t->dtype = to_dtype(*et);
  const uint64_t esize = element_size(*et);

  // shape, element count, byte size
  const json* sh = nullptr;
  SPECULA_RETURN_IF_ERROR(field("shape", &sh));
  if (!sh->is_array()) return fail(ctx + "field 'shape' is " + a_type(*sh) + ", expected an array");
  t->shape.reserve(sh->size());
  uint64_t n_el = 1;
  bool overflow = false;
  for (size_t d = 0; d < sh->size(); ++d) {
    uint64_t dim = 0;
    if (std::string why = as_count((*sh)[d], &dim); !why.empty()) {
      return fail(ctx + "shape[" + std::to_string(d) + "] " + why);
    }
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return fail(ctx + "shape[" + std::to_string(d) + "] = " + str_u64(dim) + " exceeds int64");
    }
    t->shape.push_back(static_cast<int64_t>(dim));
    if (dim != 0 && n_el > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim) overflow = true;
    n_el *= dim;
  }
  if (overflow) return fail(ctx + "element count of shape " + shape_text(t->shape) + " overflows int64");
  if (n_el > std::numeric_limits<uint64_t>::max() / esize) {
    return fail(ctx + "byte size of shape " + shape_text(t->shape) + " of " +
                std::string(element_type_name(*et)) + " overflows 64 bits");
  }
  const uint64_t n_bytes = n_el * esize;

  // data_offsets
  const json* off = nullptr;
  SPECULA_RETURN_IF_ERROR(field("data_offsets", &off));
  if (!off->is_array() || off->size() != 2) {
    return fail(ctx + "field 'data_offsets' is " +
                (off->is_array() ? "an array of " + std::to_string(off->size()) + " values" : a_type(*off)) +
                ", expected [begin, end]");
  }
  uint64_t be[2] = {0, 0};
  for (size_t k = 0; k < 2; ++k) {
    if (std::string why = as_count((*off)[k], &be[k]); !why.empty()) {
      return fail(ctx + "data_offsets[" + std::to_string(k) + "] " + why);
    }
  }
  const std::string offsets = "data_offsets [" + str_u64(be[0]) + ", " + str_u64(be[1]) + "]";
  if (be[0] > be[1]) return fail(ctx + offsets + " are not ordered (begin > end)");
  if (be[1] > data_size_) {
    return fail(ctx + offsets + " past the end of the data buffer (" + str_u64(data_size_) +
                " bytes; file size " + str_u64(size_) + ")");
  }
  if (be[1] - be[0] != n_bytes) {
    return fail(ctx + offsets + " span " + str_u64(be[1] - be[0]) + " bytes, but shape " +
                shape_text(t->shape) + " of " + std::string(element_type_name(*et)) + " needs " +
                str_u64(n_bytes));
  }
  t->begin = be[0];
  t->end = be[1];
  t->n_bytes = static_cast<size_t>(n_bytes);
  return Status::ok();
}

// ---------------------------------------------------------------------------------
// File

Result<File> File::parse(const uint8_t* bytes, size_t size, std::string origin) {
  if (bytes == nullptr && size != 0) return Status::error("[safetensors] " + origin + ": null buffer");
  static const uint8_t kEmpty[1] = {0};
  File f;
  f.origin_ = std::move(origin);
  HeaderParser parser(bytes != nullptr ? bytes : kEmpty, size, f);
  SPECULA_RETURN_IF_ERROR(parser.run());
  return f;
}

Result<File> File::open(const std::string& path) {
  Result<MappedFile> m = MappedFile::open(path);
  if (!m.is_ok()) return m.status();
  auto file = std::make_shared<MappedFile>(std::move(m).value());
  Result<File> r = parse(file->data(), file->size(), path);
  if (!r.is_ok()) return r.status();
  r->file_ = std::move(file);
  return r;
}

const TensorInfo* File::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ---------------------------------------------------------------------------------
// Folder

namespace {

// Why a shard name from an index is not a plain file name in the folder, or "".
std::string bad_shard_name(const std::string& s) {
  if (s.empty()) return "is empty";
  if (s == "." || s == "..") return "is not a file name";
  if (s.find('/') != std::string::npos || s.find('\\') != std::string::npos) return "holds a path separator";
  if (s.find('\0') != std::string::npos) return "holds a NUL byte";
  return {};
}

}  // namespace

Result<Folder> Folder::open(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path d(dir);
  if (!fs::is_directory(d, ec)) {
    return Status::error("[safetensors] " + dir + ": " +
                         (fs::exists(d, ec) ? "not a directory" : "no such directory"));
  }
  Folder f;
  f.dir_ = dir;
  const fs::path single = d / kSingleFile;
  const fs::path index = d / kIndexFile;
  std::vector<std::string> shard_names;
  std::map<std::string, std::string> weight_map;  // tensor -> shard (from the index)

  if (fs::exists(single, ec)) {
    Result<File> r = File::open(single.string());
    if (!r.is_ok()) return r.status();
    f.shards_.push_back(std::move(r).value());
    shard_names.push_back(kSingleFile);
  } else if (fs::exists(index, ec)) {
    f.sharded_ = true;
    const std::string ipath = index.string();
    const auto fail = [&](const std::string& msg) { return Status::error("[safetensors] " + ipath + ": " + msg); };
    Result<MappedFile> m = MappedFile::open(ipath);
    if (!m.is_ok()) return m.status();
    if (m->size() > kMaxHeaderSize) {
      return fail("index of " + str_u64(m->size()) + " bytes exceeds the limit of " + str_u64(kMaxHeaderSize));
    }
    const std::string_view text(reinterpret_cast<const char*>(m->data()), m->size());
    if (const JsonProblem p = check_json(text); p.kind != JsonProblem::kNone) {
      return fail(problem_text(p, "index", 0));
    }
    const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return fail("index is " + a_type(j) + ", expected an object");
    if (const auto md = j.find("metadata"); md != j.end() && !md->is_null()) {
      if (!md->is_object()) return fail("\"metadata\" is " + a_type(*md) + ", expected an object");
      for (const auto& [k, v] : md->items()) f.index_metadata_[k] = v.is_string() ? v.get<std::string>() : v.dump();
    }
    const auto wm = j.find("weight_map");
    if (wm == j.end()) return fail("missing \"weight_map\"");
    if (!wm->is_object()) return fail("\"weight_map\" is " + a_type(*wm) + ", expected an object");
    std::map<std::string, std::pair<std::string, size_t>> shards;  // shard -> (first tensor, count)
    for (const auto& [name, s] : wm->items()) {
      const std::string ctx = "\"weight_map\" tensor " + quote(name) + ": ";
      if (!s.is_string()) return fail(ctx + "shard is " + a_type(s) + ", expected a file name");
      const std::string& shard = s.get_ref<const std::string&>();
      if (std::string why = bad_shard_name(shard); !why.empty()) {
        return fail(ctx + "shard file name " + quote(shard) + " " + why +
                    " (shards must be plain file names in the folder)");
      }
      auto [it, inserted] = shards.emplace(shard, std::make_pair(name, size_t{0}));
      ++it->second.second;
      weight_map.emplace(name, shard);
    }
    for (const auto& [shard, first] : shards) {
      const fs::path sp = d / shard;
      if (!fs::exists(sp, ec)) {
        return fail("shard " + quote(shard) + " not found in " + dir + " (it holds tensor " +
                    quote(first.first) +
                    (first.second > 1 ? " and " + std::to_string(first.second - 1) + " more" : std::string()) + ")");
      }
      Result<File> r = File::open(sp.string());
      if (!r.is_ok()) return r.status();
      f.shards_.push_back(std::move(r).value());
      shard_names.push_back(shard);
    }
  } else {
    return Status::error("[safetensors] " + dir + ": no " + kSingleFile + " or " + kIndexFile);
  }

  // Every tensor in exactly one shard.
  for (size_t s = 0; s < f.shards_.size(); ++s) {
    const std::vector<TensorInfo>& ts = f.shards_[s].tensors();
    for (size_t k = 0; k < ts.size(); ++k) {
      auto [it, inserted] = f.where_.emplace(ts[k].name, std::make_pair(s, k));
      if (!inserted) {
        return Status::error("[safetensors] " + dir + ": tensor " + quote(ts[k].name) + " is in both " +
                             quote(shard_names[it->second.first]) + " and " + quote(shard_names[s]));
      }
    }
  }
  // Every index entry where the index says.
  for (const auto& [name, shard] : weight_map) {
    const auto it = f.where_.find(name);
    const std::string msg = "[safetensors] " + (d / kIndexFile).string() + ": tensor " + quote(name) +
                            " is mapped to " + quote(shard);
    if (it == f.where_.end()) return Status::error(msg + " but absent from it");
    if (shard_names[it->second.first] != shard) {
      return Status::error(msg + " but found in " + quote(shard_names[it->second.first]));
    }
  }
  f.tensors_.reserve(f.where_.size());
  for (const auto& [name, loc] : f.where_) f.tensors_.push_back(&f.shards_[loc.first].tensors()[loc.second]);
  return f;
}

const TensorInfo* Folder::find(std::string_view name) const {
  const auto it = where_.find(name);
  return it == where_.end() ? nullptr : &shards_[it->second.first].tensors()[it->second.second];
}

const File* Folder::shard_of(std::string_view name) const {
  const auto it = where_.find(name);
  return it == where_.end() ? nullptr : &shards_[it->second.first];
}

}  // namespace specula::safetensors
