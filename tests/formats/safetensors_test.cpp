// tests/formats/safetensors_test.cpp — safetensors reader: round trips through an in-test
// writer (every dtype, scalars, empty tensors, metadata, alignment), one error message per
// malformed field, truncation / byte-flip corruption sweeps (run under ASan by the asan
// preset), model folders (single file, sharded index and its errors), and a file written
// by the reference `safetensors` Python package when it is installed.
// Does not test any model's use of the tensors.
#include "formats/safetensors.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

namespace specula::safetensors {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------
// A minimal writer: tensors laid out contiguously in insertion order, the header JSON
// written by hand (so tests control order, spacing and duplicates) and padded with
// spaces to a multiple of 8, as the reference writer does.

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = static_cast<uint8_t>(seed + k * 7);
  return v;
}

// A file from an explicit header text and data buffer (header padded to `pad`).
std::vector<uint8_t> raw_file(std::string header, const std::vector<uint8_t>& data, size_t pad = 8) {
  while (pad > 1 && (8 + header.size()) % pad != 0) header += ' ';
  const uint64_t n = header.size();
  std::vector<uint8_t> out(8 + header.size() + data.size());
  std::memcpy(out.data(), &n, 8);
  if (!header.empty()) std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

std::string shape_json(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t k = 0; k < shape.size(); ++k) {
    if (k) s += ",";
    s += std::to_string(shape[k]);
  }
  return s + "]";
}

class Writer {
 public:
  Writer& tensor(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                 std::vector<uint8_t> data) {
    tensors_.push_back({name, dtype, std::move(shape), std::move(data)});
    return *this;
  }
  Writer& meta(const std::string& k, const std::string& v) {
    meta_.emplace_back(k, v);
    return *this;
  }
  std::string header() const {
    std::string h = "{";
    if (!meta_.empty()) {
      h += "\"__metadata__\":{";
      for (size_t k = 0; k < meta_.size(); ++k) {
        if (k) h += ",";
        h += nlohmann::json(meta_[k].first).dump();
        h += ":";
        h += nlohmann::json(meta_[k].second).dump();
      }
      h += "}";
    }
    uint64_t off = 0;
    for (const T& t : tensors_) {
      if (h.size() > 1) h += ",";
      h += nlohmann::json(t.name).dump();
      h += ":{\"dtype\":\"" + t.dtype + "\",\"shape\":" + shape_json(t.shape);
      h += ",\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + t.data.size()) + "]}";
      off += t.data.size();
    }
    return h + "}";
  }
  std::vector<uint8_t> data() const {
    std::vector<uint8_t> d;
    for (const T& t : tensors_) d.insert(d.end(), t.data.begin(), t.data.end());
    return d;
  }
  std::vector<uint8_t> build() const { return raw_file(header(), data()); }

 private:
  struct T {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
  };
  std::vector<T> tensors_;
  std::vector<std::pair<std::string, std::string>> meta_;
};

struct DtypeCase {
  const char* name;
  size_t size;
  std::optional<DType> dtype;
};
const DtypeCase kDtypes[] = {
    {"F64", 8, std::nullopt}, {"F32", 4, DType::F32},       {"F16", 2, DType::F16},
    {"BF16", 2, DType::BF16}, {"F8_E4M3", 1, std::nullopt}, {"F8_E5M2", 1, std::nullopt},
    {"I64", 8, std::nullopt}, {"I32", 4, std::nullopt},     {"I16", 2, std::nullopt},
    {"I8", 1, std::nullopt},  {"U64", 8, std::nullopt},     {"U32", 4, std::nullopt},
    {"U16", 2, std::nullopt}, {"U8", 1, std::nullopt},      {"BOOL", 1, std::nullopt},
};

// Every dtype with shape [2, 3], then a scalar, empty tensors, a 4-D F16 and metadata.
Writer full_writer() {
  Writer w;
  uint8_t seed = 1;
  for (const DtypeCase& c : kDtypes) w.tensor(std::string("t.") + c.name, c.name, {2, 3}, pattern(6 * c.size, seed++));
  w.tensor("scalar", "F32", {}, pattern(4, 50))
      .tensor("empty.0x4", "F32", {0, 4}, {})
      .tensor("empty.3x0", "U32", {3, 0}, {})
      .tensor("model.layers.0.self_attn.q_proj.weight", "U32", {4, 2}, pattern(32, 60))
      .tensor("model.layers.0.self_attn.q_proj.scales", "BF16", {4, 1}, pattern(8, 61))
      .tensor("4d", "F16", {2, 3, 1, 5}, pattern(60, 62))
      .meta("format", "mlx")
      .meta("note", "caf\xc3\xa9 \xe2\x96\x81");
  return w;
}

Result<File> parse(const std::vector<uint8_t>& b, const std::string& origin = "t.safetensors") {
  return File::parse(b.data(), b.size(), origin);
}

std::string tmp_dir(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / ("st_test_" + std::to_string(::getpid()) + "_" + tag);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

void write_file(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
void write_text(const std::string& path, const std::string& s) {
  write_file(path, std::vector<uint8_t>(s.begin(), s.end()));
}

// ---------------------------------------------------------------------------------
// Element types and round trips

TEST(Safetensors, ElementTypes) {
  for (const DtypeCase& c : kDtypes) {
    const auto t = parse_element_type(c.name);
    ASSERT_TRUE(t.has_value()) << c.name;
    EXPECT_EQ(element_type_name(*t), c.name);
    EXPECT_EQ(element_size(*t), c.size) << c.name;
    EXPECT_EQ(to_dtype(*t), c.dtype) << c.name;
  }
  for (const char* bad : {"", "f32", "F4", "F8_E8M0", "Q4_0", "float32", "F32 "}) {
    EXPECT_FALSE(parse_element_type(bad).has_value()) << bad;
  }
}

TEST(Safetensors, RoundTripEveryDtype) {
  const Writer w = full_writer();
  const std::vector<uint8_t> b = w.build();
  auto r = parse(b);
  ASSERT_TRUE(r.is_ok()) << r.message();
  const File& f = *r;
  EXPECT_EQ(f.path(), "t.safetensors");
  EXPECT_EQ(f.file_size(), b.size());
  EXPECT_EQ(f.data_offset() % 8, 0u);
  EXPECT_EQ(f.data_offset(), 8 + f.header_size());
  EXPECT_EQ(f.tensors().size(), std::size(kDtypes) + 6);
  EXPECT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata().at("format"), "mlx");
  EXPECT_EQ(f.metadata().at("note"), "caf\xc3\xa9 \xe2\x96\x81");

  uint8_t seed = 1;
  for (const DtypeCase& c : kDtypes) {
    const TensorInfo* t = f.find(std::string("t.") + c.name);
    ASSERT_NE(t, nullptr) << c.name;
    EXPECT_EQ(element_type_name(t->type), c.name);
    EXPECT_EQ(t->dtype, c.dtype);
    EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(t->n_elements(), 6);
    EXPECT_EQ(t->n_bytes, 6 * c.size);
    EXPECT_EQ(t->end - t->begin, t->n_bytes);
    EXPECT_EQ(t->file_offset, f.data_offset() + t->begin);
    EXPECT_EQ(t->data, b.data() + t->file_offset);
    EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->n_bytes), pattern(6 * c.size, seed++)) << c.name;
  }
  const TensorInfo* s = f.find("scalar");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->n_elements(), 1);
  EXPECT_EQ(s->n_bytes, 4u);
  for (const char* name : {"empty.0x4", "empty.3x0"}) {
    const TensorInfo* e = f.find(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_EQ(e->n_elements(), 0);
    EXPECT_EQ(e->n_bytes, 0u);
    EXPECT_EQ(e->begin, e->end);
    EXPECT_NE(e->data, nullptr);
  }
  EXPECT_EQ(f.find("empty.3x0")->shape, (std::vector<int64_t>{3, 0}));
  const TensorInfo* q = f.find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, ElementType::U32);
  EXPECT_FALSE(q->dtype.has_value());
  EXPECT_EQ(f.find("4d")->shape, (std::vector<int64_t>{2, 3, 1, 5}));
  EXPECT_EQ(f.find("nope"), nullptr);
  EXPECT_EQ(f.find("__metadata__"), nullptr);

  // tensors() in data order.
  for (size_t k = 1; k < f.tensors().size(); ++k) EXPECT_LE(f.tensors()[k - 1].end, f.tensors()[k].begin);
}

TEST(Safetensors, EmptyFileAndOrderIndependence) {
  // No tensors, no data: valid.
  auto e = parse(raw_file("{}", {}));
  ASSERT_TRUE(e.is_ok()) << e.message();
  EXPECT_TRUE(e->tensors().empty());
  // Only metadata.
  auto m = parse(raw_file(R"({"__metadata__":{}})", {}));
  ASSERT_TRUE(m.is_ok()) << m.message();
  // Header order differs from data order; whitespace and unknown keys are accepted.
  const std::string h = R"({"b": {"data_offsets": [4, 12], "shape": [2], "dtype": "F32", "extra": [1, {"x": null}]},
                           "a": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}}	)";
  auto r = parse(raw_file(h, pattern(12, 3)));
  ASSERT_TRUE(r.is_ok()) << r.message();
  ASSERT_EQ(r->tensors().size(), 2u);
  EXPECT_EQ(r->tensors()[0].name, "a");
  EXPECT_EQ(r->tensors()[1].name, "b");
  EXPECT_EQ(r->find("b")->begin, 4u);
  // Unicode escapes in names, and names that only differ in escapes.
  const std::vector<uint8_t> ub = raw_file(
      R"({"caf\u00e9":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"caf\u00e8":{"dtype":"U8","shape":[],"data_offsets":[1,2]}})",
      {7, 8});
  auto u = parse(ub);  // the bytes must outlive the File
  ASSERT_TRUE(u.is_ok()) << u.message();
  EXPECT_NE(u->find("caf\xc3\xa9"), nullptr);
  EXPECT_EQ(u->find("caf\xc3\xa9")->data[0], 7);
}

TEST(Safetensors, AlignmentIsRecorded) {
  // F16 [3] is 6 bytes: the F32 after it starts 6 bytes past an 8-aligned data buffer.
  Writer w;
  w.tensor("h", "F16", {3}, pattern(6, 1)).tensor("f", "F32", {2}, pattern(8, 2)).tensor("g", "F32", {16}, pattern(64, 3));
  const std::vector<uint8_t> b = w.build();
  const std::string dir = tmp_dir("align");
  const std::string path = dir + "/a.safetensors";
  write_file(path, b);
  auto r = File::open(path);  // the mapping is page-aligned: alignment follows file offsets
  ASSERT_TRUE(r.is_ok()) << r.message();
  const auto expect = [](uint64_t off) {
    size_t a = 64;
    while (off % a != 0) a /= 2;
    return a;
  };
  for (const TensorInfo& t : r->tensors()) {
    EXPECT_EQ(t.alignment, expect(t.file_offset)) << t.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % t.alignment, 0u) << t.name;
  }
  EXPECT_EQ(r->find("h")->alignment, expect(r->data_offset()));
  EXPECT_EQ(r->find("f")->alignment, 2u);  // misaligned for f32: callers must copy or memcpy
  EXPECT_EQ(r->find("g")->alignment, 2u);
  fs::remove_all(dir);
}

TEST(Safetensors, OpenFromDisk) {
  const std::vector<uint8_t> b = full_writer().build();
  const std::string dir = tmp_dir("open");
  const std::string path = dir + "/model.safetensors";
  write_file(path, b);
  auto r = open(path);
  fs::remove_all(dir);  // the mapping stays valid after unlink
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r->path(), path);
  const TensorInfo* t = r->find("t.BF16");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->n_bytes), pattern(12, 4));
  // A copy shares the mapping.
  File copy = *r;
  r = Status::error("gone");
  EXPECT_EQ(std::vector<uint8_t>(copy.find("t.BF16")->data, copy.find("t.BF16")->data + 12), pattern(12, 4));

  auto missing = File::open("/nonexistent/x.safetensors");
  EXPECT_NE(missing.message().find("[mmap] /nonexistent/x.safetensors"), std::string::npos) << missing.message();
  // A corrupt file on disk names its path.
  const std::string dir2 = tmp_dir("open2");
  write_file(dir2 + "/bad.safetensors", raw_file("{\"w\":1}", {}));
  auto bad = File::open(dir2 + "/bad.safetensors");
  EXPECT_EQ(bad.message(), "[safetensors] " + dir2 + "/bad.safetensors: tensor 'w': entry is a number, expected an object");
  fs::remove_all(dir2);
}

// ---------------------------------------------------------------------------------
// One error per malformed field. Each message starts with "[safetensors] t.safetensors: ".

std::string error_of(const std::vector<uint8_t>& b) {
  auto r = parse(b);
  if (r.is_ok()) return "<parsed>";
  return r.message();
}

std::string header_error(const std::string& header, size_t data_bytes = 0) {
  return error_of(raw_file(header, std::vector<uint8_t>(data_bytes, 0)));
}

// A header with one tensor entry `entry` named "w" and `data_bytes` bytes of data.
std::string entry_error(const std::string& entry, size_t data_bytes = 8) {
  return header_error("{\"w\":" + entry + "}", data_bytes);
}

#define EXPECT_ERROR(msg, want)                                                                   \
  do {                                                                                            \
    const std::string m_ = (msg);                                                                 \
    EXPECT_EQ(m_.rfind("[safetensors] t.safetensors: ", 0), 0u) << m_;                           \
    EXPECT_NE(m_.find(want), std::string::npos) << "want: " << (want) << "\n got: " << m_;        \
  } while (0)

TEST(Safetensors, HeaderLengthErrors) {
  EXPECT_EQ(error_of({}), "[safetensors] t.safetensors: file of 0 bytes is too short for the 8-byte header length");
  EXPECT_ERROR(error_of({1, 0, 0}), "file of 3 bytes is too short");
  std::vector<uint8_t> b = raw_file("{}", {});
  const uint64_t huge = kMaxHeaderSize + 1;
  std::memcpy(b.data(), &huge, 8);
  EXPECT_ERROR(error_of(b), "header length 100000001 exceeds the limit of 100000000 bytes (file size 16)");
  const uint64_t past = 9;
  std::memcpy(b.data(), &past, 8);
  EXPECT_ERROR(error_of(b), "header length 9 past end of file (size 16");
  const uint64_t max = ~uint64_t{0};
  std::memcpy(b.data(), &max, 8);
  EXPECT_ERROR(error_of(b), "header length 18446744073709551615 exceeds the limit");
  std::vector<uint8_t> zero(8, 0);
  EXPECT_ERROR(error_of(zero), "header is empty");
}

TEST(Safetensors, JsonErrors) {
  EXPECT_ERROR(header_error("[]"), "header does not start with '{' (first byte '[')");
  EXPECT_ERROR(header_error(" {}"), "header does not start with '{' (first byte ' ')");
  EXPECT_ERROR(error_of(raw_file(std::string("\0{}", 3), {}, 1)), "first byte '\\x00'");
  EXPECT_ERROR(header_error("{"), "header is not valid JSON (near byte");
  EXPECT_ERROR(header_error("{\"w\":}"), "header is not valid JSON");
  EXPECT_ERROR(header_error("{} x"), "header is not valid JSON");
  EXPECT_ERROR(header_error("{}{}"), "header is not valid JSON");
  EXPECT_TRUE(parse(raw_file("{}", {}, /*pad=*/1)).is_ok());  // padding is optional
  EXPECT_ERROR(header_error("{\"w\xff\":{}}"), "header is not valid JSON");
  EXPECT_ERROR(header_error("{\"\xc3\x28\":{}}"), "header is not valid JSON");
  EXPECT_ERROR(header_error(std::string("{\"a\0\":1}", 8)), "header is not valid JSON");
  EXPECT_ERROR(header_error("{\"w\":{\"dtype\":\"F32\",}}"), "header is not valid JSON");
  EXPECT_ERROR(header_error("{'w':1}"), "header is not valid JSON");
  EXPECT_ERROR(header_error("{\"w\":NaN}"), "header is not valid JSON");
  // Deep nesting is cut off before it costs anything.
  EXPECT_ERROR(header_error("{\"w\":" + std::string(100000, '[') + std::string(100000, ']') + "}"),
               "JSON nested deeper than 64 levels in 'w'");
  // Duplicate keys at every level.
  EXPECT_ERROR(header_error(R"({"w":{"dtype":"U8","shape":[],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[],"data_offsets":[0,1]}})", 1),
               "header: duplicate tensor name 'w'");
  EXPECT_ERROR(entry_error(R"({"dtype":"U8","shape":[8],"dtype":"U8","data_offsets":[0,8]})"),
               "tensor 'w': duplicate key 'dtype'");
  EXPECT_ERROR(header_error(R"({"__metadata__":{"a":"1","a":"2"}})"), "\"__metadata__\": duplicate key 'a'");
  EXPECT_ERROR(header_error(R"({"__metadata__":{},"__metadata__":{}})"), "header: duplicate \"__metadata__\"");
  EXPECT_ERROR(entry_error(R"({"dtype":"U8","shape":[8],"data_offsets":[0,8],"x":[{"k":1,"k":2}]})"),
               "duplicate key 'k' in 'w' > 'x' > [0]");
}

TEST(Safetensors, EntryErrors) {
  const std::string ok_offsets = R"("data_offsets":[0,8])";
  EXPECT_ERROR(entry_error("[1]"), "tensor 'w': entry is an array, expected an object");
  EXPECT_ERROR(entry_error("\"F32\""), "tensor 'w': entry is a string, expected an object");
  EXPECT_ERROR(entry_error("null"), "tensor 'w': entry is a null, expected an object");
  // dtype
  EXPECT_ERROR(entry_error(R"({"shape":[2],"data_offsets":[0,8]})"), "tensor 'w': missing field 'dtype'");
  EXPECT_ERROR(entry_error(R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})"),
               "tensor 'w': field 'dtype' is a number, expected a string");
  EXPECT_ERROR(entry_error(R"({"dtype":"F4","shape":[2],"data_offsets":[0,8]})"), "tensor 'w': unknown dtype 'F4'");
  EXPECT_ERROR(entry_error(R"({"dtype":"f32","shape":[2],"data_offsets":[0,8]})"), "tensor 'w': unknown dtype 'f32'");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32\n'x","shape":[2],"data_offsets":[0,8]})"),
               "tensor 'w': unknown dtype 'F32\\x0a\\'x'");
  // shape
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","data_offsets":[0,8]})"), "tensor 'w': missing field 'shape'");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})"),
               "tensor 'w': field 'shape' is a number, expected an array");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":[2,-3],"data_offsets":[0,8]})"),
               "tensor 'w': shape[1] = -3 is negative");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"),
               "tensor 'w': shape[0] = 2.0 is not an integer");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":[1e1],"data_offsets":[0,8]})"), "shape[0] = 10.0 is not an integer");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":["2"],"data_offsets":[0,8]})"),
               "tensor 'w': shape[0] is a string, expected a non-negative integer");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":[[2]],"data_offsets":[0,8]})"),
               "tensor 'w': shape[0] is an array, expected a non-negative integer");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":[true],"data_offsets":[0,8]})"), "shape[0] is a boolean");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]})"),
               "tensor 'w': shape[0] = 18446744073709551615 exceeds int64");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,8]})"),
               "shape[0] = 1.8446744073709552e+19 is not an integer");
  EXPECT_ERROR(entry_error(R"({"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,8]})"),
               "tensor 'w': element count of shape [4294967296, 4294967296] overflows int64");
  EXPECT_ERROR(entry_error(R"({"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]})"),
               "tensor 'w': byte size of shape [4611686018427387904] of F64 overflows 64 bits");
  // data_offsets
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":[2]})"), "tensor 'w': missing field 'data_offsets'");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":[2],"data_offsets":{"a":0}})"),
               "tensor 'w': field 'data_offsets' is an object, expected [begin, end]");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8,8]})"),
               "tensor 'w': field 'data_offsets' is an array of 3 values, expected [begin, end]");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":[2],"data_offsets":[8]})"), "an array of 1 values");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":[2],"data_offsets":[-1,8]})"),
               "tensor 'w': data_offsets[0] = -1 is negative");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8.5]})"),
               "tensor 'w': data_offsets[1] = 8.5 is not an integer");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":[2],"data_offsets":[0,"8"]})"),
               "tensor 'w': data_offsets[1] is a string, expected a non-negative integer");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":[0],"data_offsets":[8,0]})"),
               "tensor 'w': data_offsets [8, 0] are not ordered (begin > end)");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":[100],"data_offsets":[0,400]})"),
               "tensor 'w': data_offsets [0, 400] past the end of the data buffer (8 bytes; file size");
  EXPECT_ERROR(entry_error(R"({"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,18446744073709551615]})"),
               "data_offsets [18446744073709551615, 18446744073709551615] past the end of the data buffer");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"),
               "tensor 'w': data_offsets [0, 8] span 8 bytes, but shape [3] of F32 needs 12");
  EXPECT_ERROR(entry_error(R"({"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]})"),
               "tensor 'w': data_offsets [0, 8] span 8 bytes, but shape [2, 3] of BF16 needs 12");
  EXPECT_ERROR(entry_error(R"({"dtype":"F32","shape":[0],"data_offsets":[0,8]})"), "span 8 bytes, but shape [0] of F32 needs 0");
  // Long and odd names are escaped and cut in messages.
  const std::string msg = header_error("{\"" + std::string(500, 'n') + "\\u0001\":1}");
  EXPECT_ERROR(msg, "tensor '" + std::string(200, 'n') + "...': entry is a number");
}

TEST(Safetensors, LayoutErrors) {
  const auto t = [](const char* name, const char* dtype, const char* shape, uint64_t b, uint64_t e) {
    return std::string("\"") + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
           std::to_string(b) + "," + std::to_string(e) + "]}";
  };
  EXPECT_ERROR(header_error("{" + t("a", "F32", "[2]", 0, 8) + "," + t("b", "F32", "[2]", 4, 12) + "}", 12),
               "tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]");
  EXPECT_ERROR(header_error("{" + t("a", "F32", "[2]", 0, 8) + "," + t("b", "F32", "[2]", 0, 8) + "}", 8),
               "data_offsets [0, 8] overlap tensor 'a' [0, 8]");
  EXPECT_ERROR(header_error("{" + t("a", "F32", "[4]", 0, 16) + "," + t("b", "F32", "[2]", 4, 12) + "}", 16),
               "tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 16]");
  EXPECT_ERROR(header_error("{" + t("a", "F32", "[2]", 0, 8) + "," + t("e", "F32", "[0]", 4, 4) + "}", 8),
               "tensor 'e': data_offsets [4, 4] overlap tensor 'a' [0, 8]");
  EXPECT_ERROR(header_error("{" + t("a", "F32", "[2]", 0, 8) + "," + t("b", "F32", "[2]", 12, 20) + "}", 20),
               "bytes [8, 12) of the data buffer belong to no tensor (a hole before tensor 'b')");
  EXPECT_ERROR(header_error("{" + t("b", "F32", "[2]", 4, 12) + "}", 12), "bytes [0, 4) of the data buffer belong to no tensor");
  EXPECT_ERROR(header_error("{" + t("a", "F32", "[2]", 0, 8) + "}", 11),
               "bytes [8, 11) at the end of the data buffer belong to no tensor (3 trailing bytes)");
  EXPECT_ERROR(header_error("{}", 1), "bytes [0, 1) at the end of the data buffer belong to no tensor");
  // Empty tensors at the edges of others are fine.
  auto ok = parse(raw_file("{" + t("a", "F32", "[2]", 0, 8) + "," + t("e", "F32", "[0]", 8, 8) + "," +
                               t("z", "U8", "[0,5]", 0, 0) + "," + t("b", "U8", "[]", 8, 9) + "}",
                           std::vector<uint8_t>(9, 1)));
  ASSERT_TRUE(ok.is_ok()) << ok.message();
  EXPECT_EQ(ok->tensors().front().name, "z");
}

TEST(Safetensors, MetadataErrors) {
  EXPECT_ERROR(header_error(R"({"__metadata__":[]})"), "\"__metadata__\" is an array, expected an object of strings");
  EXPECT_ERROR(header_error(R"({"__metadata__":"x"})"), "\"__metadata__\" is a string, expected an object of strings");
  EXPECT_ERROR(header_error(R"({"__metadata__":{"format":"pt","n":3}})"),
               "\"__metadata__\" key 'n': value is a number, expected a string");
  EXPECT_ERROR(header_error(R"({"__metadata__":{"a":null}})"), "\"__metadata__\" key 'a': value is a null");
  EXPECT_ERROR(header_error(R"({"__metadata__":{"a":{"b":"c"}}})"), "\"__metadata__\" key 'a': value is an object");
  // A tensor named __metadata__ is not allowed: the entry must be metadata.
  EXPECT_ERROR(header_error(R"({"__metadata__":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4),
               "\"__metadata__\" key 'data_offsets': value is an array, expected a string (a tensor cannot be named "
               "\"__metadata__\")");
  // ... while metadata that merely uses those words is metadata.
  auto r = parse(raw_file(R"({"__metadata__":{"dtype":"F32","shape":"x","data_offsets":"y"}})", {}));
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r->metadata().at("shape"), "x");
  EXPECT_TRUE(r->tensors().empty());
}

// ---------------------------------------------------------------------------------
// Corruption sweeps: every outcome is ok or an error naming the file, never a crash.

uint64_t exercise(const File& f) {
  uint64_t h = f.metadata().size();
  for (const TensorInfo& t : f.tensors()) {
    h += static_cast<uint64_t>(t.n_elements()) + t.shape.size() + t.alignment + element_size(t.type);
    if (t.n_bytes > 0) h += t.data[0] + t.data[t.n_bytes - 1];
    if (f.find(t.name) != &t) h += 1000;
  }
  return h;
}

// Parse from an exact-size heap copy so that any overread is an ASan error.
bool parse_copy(const uint8_t* p, size_t n, uint64_t* sink, std::string* err) {
  std::vector<uint8_t> buf(p, p + n);
  auto r = File::parse(buf.data(), buf.size(), "sweep.safetensors");
  if (r.is_ok()) {
    *sink += exercise(*r);
    return true;
  }
  *err = r.message();
  return false;
}

constexpr const char* kSweepPrefix = "[safetensors] sweep.safetensors: ";

TEST(SafetensorsCorruption, TruncateAtEveryByte) {
  const std::vector<uint8_t> b = full_writer().build();
  uint64_t sink = 0;
  // The tensors cover the data buffer exactly, so every strict prefix must fail: by the
  // header length up to the header end, by the data layout past it.
  for (size_t n = 0; n < b.size(); ++n) {
    std::string err;
    ASSERT_FALSE(parse_copy(b.data(), n, &sink, &err)) << "prefix " << n << " parsed";
    ASSERT_EQ(err.rfind(kSweepPrefix, 0), 0u) << err;
  }
  std::string err;
  EXPECT_TRUE(parse_copy(b.data(), b.size(), &sink, &err)) << err;
  // One extra byte is trailing data.
  std::vector<uint8_t> longer = b;
  longer.push_back(0);
  EXPECT_FALSE(parse_copy(longer.data(), longer.size(), &sink, &err));
  EXPECT_NE(err.find("trailing bytes"), std::string::npos) << err;
}

TEST(SafetensorsCorruption, FlipEveryHeaderByte) {
  const std::vector<uint8_t> orig = full_writer().build();
  auto parsed = parse(orig);
  ASSERT_TRUE(parsed.is_ok()) << parsed.message();
  const size_t data_offset = parsed->data_offset();
  uint64_t sink = 0;
  size_t n_ok = 0, n_err = 0;
  std::vector<uint8_t> b = orig;
  for (size_t pos = 0; pos < orig.size(); ++pos) {
    const uint8_t x = orig[pos];
    const std::vector<uint8_t> values =
        pos < data_offset
            ? std::vector<uint8_t>{0x00, 0xFF, 0x80, 0x7F, '"', '{', '}', '[', ']', ',', ':', '-', '9', '.', 'e',
                                   '\\', static_cast<uint8_t>(x ^ 0x01), static_cast<uint8_t>(x ^ 0x10),
                                   static_cast<uint8_t>(x + 1), static_cast<uint8_t>(x - 1)}
            : std::vector<uint8_t>{static_cast<uint8_t>(~x)};  // tensor data: opaque
    for (uint8_t v : values) {
      if (v == x) continue;
      b[pos] = v;
      std::string err;
      if (parse_copy(b.data(), b.size(), &sink, &err)) {
        ++n_ok;
      } else {
        ++n_err;
        ASSERT_EQ(err.rfind(kSweepPrefix, 0), 0u) << err;
      }
    }
    b[pos] = x;
  }
  EXPECT_GT(n_err, 0u);
  EXPECT_GT(n_ok, 0u);  // tensor data bytes, digits of names, padding: still a valid file
  EXPECT_NE(sink, 1u);
}

TEST(SafetensorsCorruption, RandomMultiByteDamage) {
  const std::vector<uint8_t> orig = full_writer().build();
  const size_t header_end = 8 + parse(orig)->header_size();
  std::mt19937_64 rng(1234);
  uint64_t sink = 0;
  const char kJsonBytes[] = "{}[]\",:-0123456789.eE \\tnulfase";
  for (int it = 0; it < 4000; ++it) {
    std::vector<uint8_t> b = orig;
    const int n_flips = 1 + static_cast<int>(rng() % 6);
    for (int k = 0; k < n_flips; ++k) {
      const size_t pos = rng() % header_end;
      b[pos] = rng() % 2 ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>(kJsonBytes[rng() % (sizeof(kJsonBytes) - 1)]);
    }
    const size_t len = rng() % 4 == 0 ? rng() % (b.size() + 1) : b.size();
    std::string err;
    if (!parse_copy(b.data(), len, &sink, &err)) {
      ASSERT_EQ(err.rfind(kSweepPrefix, 0), 0u) << err;
    }
  }
  EXPECT_NE(sink, 1u);
}

// Lies that keep the JSON valid: each changes one number or string of a valid header.
TEST(SafetensorsCorruption, HeaderLies) {
  const Writer w = full_writer();
  const std::string header = w.header();
  const std::vector<uint8_t> data = w.data();
  uint64_t sink = 0;
  size_t n_err = 0;
  // Replace every number in the header by other numbers, one at a time.
  for (size_t pos = 0; pos < header.size(); ++pos) {
    if (!std::isdigit(static_cast<unsigned char>(header[pos])) || std::isdigit(static_cast<unsigned char>(header[pos - 1])))
      continue;
    size_t end = pos;
    while (std::isdigit(static_cast<unsigned char>(header[end]))) ++end;
    for (const char* v : {"0", "1", "7", "-1", "1.5", "1e3", "4294967296", "18446744073709551615",
                          "99999999999999999999", "null", "\"4\"", "[]"}) {
      const std::string h = header.substr(0, pos) + v + header.substr(end);
      std::string err;
      const std::vector<uint8_t> b = raw_file(h, data);
      if (!parse_copy(b.data(), b.size(), &sink, &err)) {
        ++n_err;
        ASSERT_EQ(err.rfind(kSweepPrefix, 0), 0u) << err;
      }
    }
  }
  // Replace every dtype by every other one and by unknown names.
  for (size_t pos = header.find("\"dtype\":\""); pos != std::string::npos; pos = header.find("\"dtype\":\"", pos + 1)) {
    const size_t b0 = pos + 9, e0 = header.find('"', b0);
    for (const char* v : {"F64", "F32", "F16", "BF16", "U8", "BOOL", "I64", "Q4_0", "", "F32\\u0000"}) {
      const std::string h = header.substr(0, b0) + v + header.substr(e0);
      const std::vector<uint8_t> b = raw_file(h, data);
      std::string err;
      if (!parse_copy(b.data(), b.size(), &sink, &err)) {
        ++n_err;
        ASSERT_EQ(err.rfind(kSweepPrefix, 0), 0u) << err;
        ASSERT_NE(err.find("tensor '"), std::string::npos) << err;  // names the tensor
      }
    }
  }
  EXPECT_GT(n_err, 100u);
}

// ---------------------------------------------------------------------------------
// Folders

struct FolderFixture {
  std::string dir;
  FolderFixture() : dir(tmp_dir("folder_" + std::to_string(counter++))) {}
  ~FolderFixture() { fs::remove_all(dir); }
  void file(const std::string& name, const std::vector<uint8_t>& b) const { write_file(dir + "/" + name, b); }
  void text(const std::string& name, const std::string& s) const { write_text(dir + "/" + name, s); }
  static inline int counter = 0;
};

std::vector<uint8_t> shard(const std::vector<std::string>& names, uint8_t seed) {
  Writer w;
  for (const std::string& n : names) w.tensor(n, "F32", {2}, pattern(8, seed++));
  w.meta("format", "pt");
  return w.build();
}

constexpr const char* kIndex = "model.safetensors.index.json";

TEST(SafetensorsFolder, SingleFile) {
  FolderFixture f;
  f.file("model.safetensors", shard({"b", "a"}, 1));
  auto r = Folder::open(f.dir);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_FALSE(r->sharded());
  EXPECT_EQ(r->dir(), f.dir);
  ASSERT_EQ(r->shards().size(), 1u);
  EXPECT_EQ(r->shards()[0].path(), f.dir + "/model.safetensors");
  ASSERT_EQ(r->tensors().size(), 2u);
  EXPECT_EQ(r->tensors()[0]->name, "a");  // by name
  EXPECT_EQ(r->tensors()[1]->name, "b");
  EXPECT_EQ(r->find("b")->data[0], 1);
  EXPECT_EQ(r->shard_of("a"), &r->shards()[0]);
  EXPECT_EQ(r->find("c"), nullptr);
  EXPECT_EQ(r->shard_of("c"), nullptr);
  EXPECT_TRUE(r->index_metadata().empty());
  // The single file wins over an index.
  f.text(kIndex, "not json");
  auto again = Folder::open(f.dir);
  ASSERT_TRUE(again.is_ok()) << again.message();
  EXPECT_FALSE(again->sharded());
}

TEST(SafetensorsFolder, Sharded) {
  FolderFixture f;
  f.file("model-00001-of-00002.safetensors", shard({"embed", "layers.0.w"}, 10));
  f.file("model-00002-of-00002.safetensors", shard({"layers.1.w", "lm_head", "extra"}, 20));
  f.text(kIndex, R"({"metadata": {"total_size": 40, "format": "pt", "nested": {"a": [1]}},
    "weight_map": {"embed": "model-00001-of-00002.safetensors", "layers.0.w": "model-00001-of-00002.safetensors",
                   "layers.1.w": "model-00002-of-00002.safetensors", "lm_head": "model-00002-of-00002.safetensors"}})");
  auto r = Folder::open(f.dir);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_TRUE(r->sharded());
  ASSERT_EQ(r->shards().size(), 2u);
  EXPECT_EQ(r->shards()[0].path(), f.dir + "/model-00001-of-00002.safetensors");
  EXPECT_EQ(r->shards()[1].path(), f.dir + "/model-00002-of-00002.safetensors");
  ASSERT_EQ(r->tensors().size(), 5u);  // "extra" is not in the index but is kept
  std::vector<std::string> names;
  for (const TensorInfo* t : r->tensors()) names.push_back(t->name);
  EXPECT_EQ(names, (std::vector<std::string>{"embed", "extra", "layers.0.w", "layers.1.w", "lm_head"}));
  EXPECT_EQ(r->shard_of("lm_head"), &r->shards()[1]);
  EXPECT_EQ(r->shard_of("embed"), &r->shards()[0]);
  EXPECT_EQ(r->find("layers.1.w")->data[0], 20);
  EXPECT_EQ(r->index_metadata().at("total_size"), "40");
  EXPECT_EQ(r->index_metadata().at("format"), "pt");
  EXPECT_EQ(r->index_metadata().at("nested"), "{\"a\":[1]}");
  // Moving the folder keeps its tensor pointers valid.
  Folder moved = std::move(r).value();
  EXPECT_EQ(moved.find("lm_head")->data[0], 21);
  EXPECT_EQ(moved.tensors()[4]->name, "lm_head");
  // An index without "metadata" is fine.
  f.text(kIndex, R"({"weight_map": {"embed": "model-00001-of-00002.safetensors"}})");
  auto r2 = Folder::open(f.dir);
  ASSERT_TRUE(r2.is_ok()) << r2.message();
  EXPECT_EQ(r2->shards().size(), 1u);  // only the shards the index names are opened
}

TEST(SafetensorsFolder, Errors) {
  const std::string s1 = "model-00001-of-00002.safetensors", s2 = "model-00002-of-00002.safetensors";
  const auto index = [](const std::string& weight_map) { return "{\"weight_map\": " + weight_map + "}"; };
  const auto err = [](const FolderFixture& f) {
    auto r = Folder::open(f.dir);
    return r.is_ok() ? std::string("<opened>") : r.message();
  };
  {
    FolderFixture f;
    EXPECT_EQ(err(f), "[safetensors] " + f.dir + ": no model.safetensors or model.safetensors.index.json");
    f.text("x", "");
    auto r = Folder::open(f.dir + "/x");
    EXPECT_EQ(r.message(), "[safetensors] " + f.dir + "/x: not a directory");
    EXPECT_EQ(Folder::open(f.dir + "/nope").message(), "[safetensors] " + f.dir + "/nope: no such directory");
  }
  {
    FolderFixture f;  // a missing shard names the file and a tensor mapped to it
    f.file(s1, shard({"a"}, 1));
    f.text(kIndex, index("{\"a\": \"" + s1 + "\", \"c\": \"" + s2 + "\", \"b\": \"" + s2 + "\"}"));
    EXPECT_EQ(err(f), "[safetensors] " + f.dir + "/" + kIndex + ": shard '" + s2 + "' not found in " + f.dir +
                          " (it holds tensor 'b' and 1 more)");
  }
  {
    FolderFixture f;  // listed but absent from its shard
    f.file(s1, shard({"a"}, 1));
    f.text(kIndex, index("{\"a\": \"" + s1 + "\", \"b\": \"" + s1 + "\"}"));
    EXPECT_EQ(err(f), "[safetensors] " + f.dir + "/" + kIndex + ": tensor 'b' is mapped to '" + s1 + "' but absent from it");
  }
  {
    FolderFixture f;  // listed in one shard, present in another
    f.file(s1, shard({"a"}, 1));
    f.file(s2, shard({"b"}, 1));
    f.text(kIndex, index("{\"a\": \"" + s2 + "\", \"b\": \"" + s2 + "\", \"x\": \"" + s1 + "\"}"));
    EXPECT_EQ(err(f), "[safetensors] " + f.dir + "/" + kIndex + ": tensor 'a' is mapped to '" + s2 + "' but found in '" + s1 + "'");
  }
  {
    FolderFixture f;  // a tensor in two shards
    f.file(s1, shard({"a", "dup"}, 1));
    f.file(s2, shard({"dup", "b"}, 1));
    f.text(kIndex, index("{\"a\": \"" + s1 + "\", \"b\": \"" + s2 + "\"}"));
    EXPECT_EQ(err(f), "[safetensors] " + f.dir + ": tensor 'dup' is in both '" + s1 + "' and '" + s2 + "'");
  }
  {
    FolderFixture f;  // a corrupt shard names its own path
    f.file(s1, raw_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,9]}}", pattern(9, 1)));
    f.text(kIndex, index("{\"a\": \"" + s1 + "\"}"));
    EXPECT_EQ(err(f), "[safetensors] " + f.dir + "/" + s1 + ": tensor 'a': data_offsets [0, 9] span 9 bytes, but shape [2] of F32 needs 8");
  }
  // Shard names that are not plain file names.
  for (const std::string& bad : {std::string("../model.safetensors"), std::string("sub/model.safetensors"),
                                 std::string("/etc/passwd"), std::string(".."), std::string("."), std::string(""),
                                 std::string("a\\\\b.safetensors"), std::string("a\\u0000b")}) {
    FolderFixture f;
    f.file(s1, shard({"a"}, 1));
    f.text(kIndex, index("{\"a\": \"" + s1 + "\", \"w\": \"" + bad + "\"}"));
    const std::string m = err(f);
    EXPECT_EQ(m.rfind("[safetensors] " + f.dir + "/" + kIndex + ": \"weight_map\" tensor 'w': shard file name '", 0), 0u) << m;
    EXPECT_NE(m.find("(shards must be plain file names in the folder)"), std::string::npos) << m;
  }
  // Malformed index files.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "index is not valid JSON"},
      {"{", "index is not valid JSON"},
      {"[]", "index is an array, expected an object"},
      {"{}", "missing \"weight_map\""},
      {R"({"weight_map": []})", "\"weight_map\" is an array, expected an object"},
      {R"({"weight_map": {"a": 3}})", "\"weight_map\" tensor 'a': shard is a number, expected a file name"},
      {R"({"weight_map": {"a": null}})", "\"weight_map\" tensor 'a': shard is a null"},
      {R"({"metadata": 3, "weight_map": {}})", "\"metadata\" is a number, expected an object"},
      {R"({"weight_map": {"a": "x", "a": "y"}})", "index: duplicate key 'a' in 'weight_map'"},
      {R"({"weight_map": {}, "weight_map": {}})", "index: duplicate key 'weight_map' at the top level"},
  };
  for (const auto& [text, want] : cases) {
    FolderFixture f;
    f.text(kIndex, text);
    const std::string m = err(f);
    EXPECT_EQ(m.rfind("[safetensors] " + f.dir + "/" + kIndex + ": ", 0), 0u) << m;
    EXPECT_NE(m.find(want), std::string::npos) << "want: " << want << "\n got: " << m;
  }
  {
    FolderFixture f;  // an empty weight_map opens nothing and holds no tensors
    f.text(kIndex, R"({"weight_map": {}})");
    auto r = Folder::open(f.dir);
    ASSERT_TRUE(r.is_ok()) << r.message();
    EXPECT_TRUE(r->tensors().empty());
  }
}

// ---------------------------------------------------------------------------------
// Cross-check with the reference writer (python3 with numpy and safetensors; scripts/test
// installs safetensors==0.4.5). Skipped when they are missing.

std::vector<uint8_t> from_hex(const std::string& h) {
  std::vector<uint8_t> out(h.size() / 2);
  for (size_t k = 0; k < out.size(); ++k) out[k] = static_cast<uint8_t>(std::stoi(h.substr(2 * k, 2), nullptr, 16));
  return out;
}

TEST(SafetensorsReference, PythonWriter) {
  const std::string dir = tmp_dir("python");
  const std::string prefix = dir + "/sample";
  const std::string cmd = "python3 '" SPECULA_FIXTURES_DIR "/../../tools/write_safetensors_sample.py' '" + prefix + "'";
  const int rc = std::system(cmd.c_str());
  if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) == 77) {
    fs::remove_all(dir);
    GTEST_SKIP() << "python3 with numpy and safetensors not available";
  }
  ASSERT_EQ(WEXITSTATUS(rc), 0) << cmd;
  std::ifstream in(prefix + ".json");
  const nlohmann::json manifest = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(manifest.is_discarded());
  auto r = File::open(prefix + ".safetensors");
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r->data_offset() % 8, 0u);  // the reference writer pads the header
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : manifest["metadata"].items()) meta[k] = v.get<std::string>();
  EXPECT_EQ(r->metadata(), meta);
  ASSERT_EQ(r->tensors().size(), manifest["tensors"].size());
  for (const auto& [name, want] : manifest["tensors"].items()) {
    const TensorInfo* t = r->find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(element_type_name(t->type), want["dtype"].get<std::string>()) << name;
    EXPECT_EQ(t->shape, want["shape"].get<std::vector<int64_t>>()) << name;
    EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->n_bytes), from_hex(want["hex"].get<std::string>())) << name;
  }
  // Sharded through a hand-written index over two reference files.
  const fs::path s1 = fs::path(dir) / "m-1.safetensors", s2 = fs::path(dir) / "m-2.safetensors";
  fs::copy_file(prefix + ".safetensors", s1);
  write_file(s2.string(), shard({"lm_head"}, 5));
  nlohmann::json index = {{"metadata", {{"total_size", 1}}}, {"weight_map", nlohmann::json::object()}};
  for (const auto& [name, _] : manifest["tensors"].items()) index["weight_map"][name] = "m-1.safetensors";
  index["weight_map"]["lm_head"] = "m-2.safetensors";
  write_text(dir + "/" + kIndex, index.dump(1));
  auto folder = Folder::open(dir);
  ASSERT_TRUE(folder.is_ok()) << folder.message();
  EXPECT_EQ(folder->tensors().size(), manifest["tensors"].size() + 1);
  EXPECT_EQ(folder->find("t.float32")->n_bytes, r->find("t.float32")->n_bytes);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace specula::safetensors
