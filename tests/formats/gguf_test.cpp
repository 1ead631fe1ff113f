// tests/formats/gguf_test.cpp — GGUF reader: round trips through an in-test writer,
// error messages for each malformed field, truncation/byte-flip corruption sweeps
// (run under ASan by the asan preset), and the real Gemma 3 270M file when present.
// Does not test model interpretation of the metadata.
#include "formats/gguf.h"

#include <gtest/gtest.h>

#include "../test_util.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

namespace specula::gguf {
namespace {

// ---------------------------------------------------------------------------------
// A minimal GGUF writer (spec layout, little-endian), enough to build every value
// type, nested arrays and tensors, and to emit deliberately wrong fields.

class Bytes {
 public:
  template <typename T>
  Bytes& put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b_.insert(b_.end(), p, p + sizeof(T));
    return *this;
  }
  Bytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& append(const Bytes& o) {
    b_.insert(b_.end(), o.b_.begin(), o.b_.end());
    return *this;
  }
  Bytes& array_header(ValueType elem, uint64_t count) {
    put<uint32_t>(static_cast<uint32_t>(elem));
    put<uint64_t>(count);
    return *this;
  }
  const std::vector<uint8_t>& data() const { return b_; }
  std::vector<uint8_t>& data() { return b_; }
  size_t size() const { return b_.size(); }

 private:
  std::vector<uint8_t> b_;
};

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3) : version_(version) {}

  // A key with a pre-encoded value (type tag written here).
  GgufWriter& kv(const std::string& key, ValueType type, const Bytes& value) {
    kvs_.str(key).put<uint32_t>(static_cast<uint32_t>(type)).append(value);
    ++n_kv_;
    return *this;
  }
  template <typename T>
  GgufWriter& scalar(const std::string& key, ValueType type, T v) {
    Bytes b;
    b.put<T>(v);
    return kv(key, type, b);
  }
  GgufWriter& string(const std::string& key, const std::string& s) {
    Bytes b;
    b.str(s);
    return kv(key, ValueType::STRING, b);
  }
  template <typename T>
  GgufWriter& scalar_array(const std::string& key, ValueType elem, const std::vector<T>& v) {
    Bytes b;
    b.array_header(elem, v.size());
    for (const T& x : v) b.put<T>(x);
    return kv(key, ValueType::ARRAY, b);
  }
  GgufWriter& string_array(const std::string& key, const std::vector<std::string>& v) {
    Bytes b;
    b.array_header(ValueType::STRING, v.size());
    for (const auto& s : v) b.str(s);
    return kv(key, ValueType::ARRAY, b);
  }

  // A tensor with real data; the offset is assigned at build() time.
  GgufWriter& tensor(const std::string& name, std::vector<uint64_t> dims, DType type,
                     std::vector<uint8_t> data) {
    tensors_.push_back({name, std::move(dims), static_cast<uint32_t>(type), std::nullopt,
                        std::move(data)});
    return *this;
  }
  // A tensor info with explicit fields and no data (for malformed files).
  GgufWriter& tensor_info(const std::string& name, std::vector<uint64_t> dims, uint32_t type_id,
                          uint64_t offset) {
    tensors_.push_back({name, std::move(dims), type_id, offset, {}});
    return *this;
  }
  GgufWriter& alignment(uint64_t a) {
    alignment_ = a;
    return *this;
  }

  std::vector<uint8_t> build() const {
    Bytes out;
    out.put<uint32_t>(0x46554747u);  // "GGUF"
    out.put<uint32_t>(version_);
    out.put<uint64_t>(tensors_.size());
    out.put<uint64_t>(n_kv_);
    out.append(kvs_);
    uint64_t off = 0;
    std::vector<uint64_t> offsets;
    for (const auto& t : tensors_) {
      out.str(t.name).put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) out.put<uint64_t>(d);
      out.put<uint32_t>(t.type_id);
      const uint64_t o = t.offset ? *t.offset : off;
      out.put<uint64_t>(o);
      offsets.push_back(o);
      if (!t.offset) off += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
    }
    std::vector<uint8_t> bytes = out.data();
    bytes.resize((bytes.size() + alignment_ - 1) / alignment_ * alignment_, 0);
    const size_t data_start = bytes.size();
    for (size_t k = 0; k < tensors_.size(); ++k) {
      if (tensors_[k].offset) continue;
      const auto& d = tensors_[k].data;
      bytes.resize(std::max(bytes.size(), data_start + offsets[k] + d.size()), 0);
      std::memcpy(bytes.data() + data_start + offsets[k], d.data(), d.size());
    }
    return bytes;
  }

 private:
  struct T {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type_id;
    std::optional<uint64_t> offset;
    std::vector<uint8_t> data;
  };
  uint32_t version_;
  uint64_t alignment_ = 32;
  uint64_t n_kv_ = 0;
  Bytes kvs_;
  std::vector<T> tensors_;
};

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = static_cast<uint8_t>(seed + k * 7);
  return v;
}

Result<GgufFile> parse(const std::vector<uint8_t>& b) { return GgufFile::parse(b.data(), b.size()); }

// Every value type, nested arrays and four tensors (F32, Q8_0, Q4_K, F16 4-D).
GgufWriter full_writer() {
  GgufWriter w;
  w.string("general.architecture", "testarch")
      .scalar<uint8_t>("v.u8", ValueType::U8, 250)
      .scalar<int8_t>("v.i8", ValueType::I8, -120)
      .scalar<uint16_t>("v.u16", ValueType::U16, 65000)
      .scalar<int16_t>("v.i16", ValueType::I16, -32000)
      .scalar<uint32_t>("v.u32", ValueType::U32, 4000000000u)
      .scalar<int32_t>("v.i32", ValueType::I32, -2000000000)
      .scalar<float>("v.f32", ValueType::F32, 1e-6f)
      .scalar<uint8_t>("v.bool", ValueType::BOOL, 1)
      .string("v.string", std::string("hi\0there \xe2\x96\x81", 13))
      .string("v.empty_string", "")
      .scalar<uint64_t>("v.u64", ValueType::U64, 18000000000000000000ull)
      .scalar<int64_t>("v.i64", ValueType::I64, -9000000000000000000ll)
      .scalar<double>("v.f64", ValueType::F64, 3.141592653589793)
      .scalar_array<uint8_t>("a.u8", ValueType::U8, {1, 2, 255})
      .scalar_array<int8_t>("a.i8", ValueType::I8, {-1, 0, 127})
      .scalar_array<uint16_t>("a.u16", ValueType::U16, {7, 65535})
      .scalar_array<int16_t>("a.i16", ValueType::I16, {-7, 300})
      .scalar_array<uint32_t>("a.u32", ValueType::U32, {1, 3000000000u})
      .scalar_array<int32_t>("a.i32", ValueType::I32, {-5, 6, 2147483647})
      .scalar_array<float>("a.f32", ValueType::F32, {0.5f, -1.25f, 1e30f})
      .scalar_array<uint8_t>("a.bool", ValueType::BOOL, {1, 0, 1})
      .scalar_array<uint64_t>("a.u64", ValueType::U64, {1ull << 40})
      .scalar_array<int64_t>("a.i64", ValueType::I64, {-(1ll << 40), 17})
      .scalar_array<double>("a.f64", ValueType::F64, {0.25, -2.5})
      .scalar_array<float>("a.empty", ValueType::F32, {})
      .string_array("a.strings", {"<pad>", "", "hello world", std::string(300, 'x')});
  // [[1,2],[3]] as arrays of U16; [["a"],[]] as arrays of strings;
  // [[[9]], []] arrays of arrays of I64.
  {
    Bytes b;
    b.array_header(ValueType::ARRAY, 2);
    b.array_header(ValueType::U16, 2).put<uint16_t>(1).put<uint16_t>(2);
    b.array_header(ValueType::U16, 1).put<uint16_t>(3);
    w.kv("n.u16", ValueType::ARRAY, b);
  }
  {
    Bytes b;
    b.array_header(ValueType::ARRAY, 2);
    b.array_header(ValueType::STRING, 1).str("a");
    b.array_header(ValueType::STRING, 0);
    w.kv("n.strings", ValueType::ARRAY, b);
  }
  {
    Bytes b;
    b.array_header(ValueType::ARRAY, 2);
    b.array_header(ValueType::ARRAY, 1);
    b.array_header(ValueType::I64, 1).put<int64_t>(9);
    b.array_header(ValueType::ARRAY, 0);
    w.kv("n.deep", ValueType::ARRAY, b);
  }
  w.tensor("norm.weight", {4, 3}, DType::F32, pattern(4 * 3 * 4, 1))
      .tensor("embd.weight", {64, 2}, DType::Q8_0, pattern(4 * 34, 2))
      .tensor("blk.0.q4k", {256}, DType::Q4_K, pattern(144, 3))
      .tensor("blk.0.f16", {2, 3, 4, 5}, DType::F16, pattern(2 * 3 * 4 * 5 * 2, 4));
  return w;
}

// ---------------------------------------------------------------------------------
// Round trips

TEST(Gguf, RoundTripEveryValueType) {
  const std::vector<uint8_t> b = full_writer().build();
  auto r = parse(b);
  ASSERT_TRUE(r.is_ok()) << r.message();
  const GgufFile& f = *r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.metadata().size(), 30u);
  ASSERT_EQ(f.metadata_keys().size(), 30u);
  EXPECT_EQ(f.metadata_keys()[0], "general.architecture");
  EXPECT_EQ(f.metadata_keys()[1], "v.u8");

  EXPECT_EQ(f.get_string("general.architecture").value(), "testarch");
  EXPECT_EQ(f.get_uint("v.u8").value(), 250u);
  EXPECT_EQ(f.get_int("v.i8").value(), -120);
  EXPECT_EQ(f.get_uint("v.u16").value(), 65000u);
  EXPECT_EQ(f.get_int("v.i16").value(), -32000);
  EXPECT_EQ(f.get_uint("v.u32").value(), 4000000000u);
  EXPECT_EQ(f.get_int("v.u32").value(), 4000000000ll);
  EXPECT_EQ(f.get_int("v.i32").value(), -2000000000);
  EXPECT_FLOAT_EQ(static_cast<float>(f.get_float("v.f32").value()), 1e-6f);
  EXPECT_EQ(f.get_bool("v.bool").value(), true);
  EXPECT_EQ(f.get_string("v.string").value(), std::string("hi\0there \xe2\x96\x81", 13));
  EXPECT_EQ(f.get_string("v.empty_string").value(), "");
  EXPECT_EQ(f.get_uint("v.u64").value(), 18000000000000000000ull);
  EXPECT_EQ(f.get_int("v.i64").value(), -9000000000000000000ll);
  EXPECT_DOUBLE_EQ(f.get_float("v.f64").value(), 3.141592653589793);
  EXPECT_DOUBLE_EQ(f.get_float("v.u16").value(), 65000.0);  // integers widen to double

  EXPECT_EQ(f.get_i32_array("a.u8").value(), (std::vector<int32_t>{1, 2, 255}));
  EXPECT_EQ(f.get_i32_array("a.i8").value(), (std::vector<int32_t>{-1, 0, 127}));
  EXPECT_EQ(f.get_i32_array("a.u16").value(), (std::vector<int32_t>{7, 65535}));
  EXPECT_EQ(f.get_i32_array("a.i16").value(), (std::vector<int32_t>{-7, 300}));
  EXPECT_EQ(f.get_i32_array("a.i32").value(), (std::vector<int32_t>{-5, 6, 2147483647}));
  EXPECT_FALSE(f.get_i32_array("a.i64").is_ok());  // -2^40 does not fit
  EXPECT_FALSE(f.get_i32_array("a.u32").is_ok());  // 3e9 does not fit
  EXPECT_NE(f.get_i32_array("a.u32").message().find("element 1 = 3000000000"), std::string::npos);
  EXPECT_EQ(f.get_f32_array("a.f32").value(), (std::vector<float>{0.5f, -1.25f, 1e30f}));
  EXPECT_EQ(f.get_f32_array("a.f64").value(), (std::vector<float>{0.25f, -2.5f}));
  EXPECT_TRUE(f.get_f32_array("a.empty").value().empty());
  EXPECT_EQ(f.get_string_array("a.strings").value(),
            (std::vector<std::string>{"<pad>", "", "hello world", std::string(300, 'x')}));

  // Element access through Value::at on every array kind.
  const Value* ab = f.find("a.bool");
  ASSERT_NE(ab, nullptr);
  EXPECT_EQ(ab->count, 3u);
  EXPECT_EQ(ab->at(0).u, 1u);
  EXPECT_EQ(ab->at(1).u, 0u);
  EXPECT_EQ(f.find("a.u64")->at(0).u, 1ull << 40);
  EXPECT_EQ(f.find("a.i64")->at(0).i, -(1ll << 40));
  EXPECT_EQ(f.find("a.strings")->at(2).str, "hello world");

  const Value* n16 = f.find("n.u16");
  ASSERT_NE(n16, nullptr);
  ASSERT_EQ(n16->elem_type, ValueType::ARRAY);
  ASSERT_EQ(n16->count, 2u);
  EXPECT_EQ(n16->arr[0].elem_type, ValueType::U16);
  EXPECT_EQ(n16->arr[0].count, 2u);
  EXPECT_EQ(n16->arr[0].at(1).u, 2u);
  EXPECT_EQ(n16->arr[1].at(0).u, 3u);
  const Value* ns = f.find("n.strings");
  ASSERT_EQ(ns->count, 2u);
  EXPECT_EQ(ns->arr[0].strs, std::vector<std::string>{"a"});
  EXPECT_EQ(ns->arr[1].count, 0u);
  const Value* nd = f.find("n.deep");
  ASSERT_EQ(nd->count, 2u);
  ASSERT_EQ(nd->arr[0].count, 1u);
  EXPECT_EQ(nd->arr[0].arr[0].elem_type, ValueType::I64);
  EXPECT_EQ(nd->arr[0].arr[0].at(0).i, 9);
  EXPECT_EQ(nd->arr[1].count, 0u);

  // Tensors.
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  struct Want {
    const char* name;
    DType type;
    std::vector<int64_t> shape;
    size_t bytes;
    uint8_t seed;
  };
  const Want want[] = {{"norm.weight", DType::F32, {4, 3}, 48, 1},
                       {"embd.weight", DType::Q8_0, {64, 2}, 136, 2},
                       {"blk.0.q4k", DType::Q4_K, {256}, 144, 3},
                       {"blk.0.f16", DType::F16, {2, 3, 4, 5}, 240, 4}};
  for (const Want& w : want) {
    const TensorInfo* t = f.find_tensor(w.name);
    ASSERT_NE(t, nullptr) << w.name;
    EXPECT_EQ(t->type, w.type) << w.name;
    EXPECT_EQ(t->shape, w.shape) << w.name;
    EXPECT_EQ(t->n_bytes, w.bytes) << w.name;
    EXPECT_EQ(t->offset % 32, 0u) << w.name;
    EXPECT_EQ(t->data, b.data() + f.data_offset() + t->offset) << w.name;
    EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->n_bytes), pattern(w.bytes, w.seed)) << w.name;
  }
  EXPECT_EQ(f.find_tensor("blk.0.f16")->n_elements(), 120);
  EXPECT_EQ(f.find_tensor("missing"), nullptr);
}

TEST(Gguf, GetterErrorsNameTheKey) {
  const std::vector<uint8_t> b = full_writer().build();
  auto r = parse(b);
  ASSERT_TRUE(r.is_ok()) << r.message();
  const GgufFile& f = *r;
  EXPECT_EQ(f.get_string("nope").message(), "[gguf] metadata key 'nope' not found");
  EXPECT_EQ(f.get_string("v.u8").message(), "[gguf] metadata key 'v.u8': expected STRING, got U8");
  EXPECT_NE(f.get_uint("v.i8").message().find("'v.i8': expected a non-negative integer, got -120"),
            std::string::npos);
  EXPECT_FALSE(f.get_int("v.u64").is_ok());  // > INT64_MAX
  EXPECT_FALSE(f.get_bool("v.u8").is_ok());
  EXPECT_FALSE(f.get_float("v.string").is_ok());
  EXPECT_EQ(f.get_string_array("a.f32").message(),
            "[gguf] metadata key 'a.f32': expected ARRAY[STRING], got ARRAY[F32]");
  EXPECT_FALSE(f.get_f32_array("a.i32").is_ok());
  EXPECT_FALSE(f.get_i32_array("a.strings").is_ok());
  EXPECT_FALSE(f.get_i32_array("v.i32").is_ok());
  EXPECT_FALSE(f.get_f32_array("n.u16").is_ok());
}

TEST(Gguf, BoolsAreZeroOrOne) {
  // The spec's bool is one byte, 0 or 1: any other byte is a damaged file, named.
  for (uint8_t b : {uint8_t{2}, uint8_t{255}}) {
    GgufWriter w;
    w.scalar<uint8_t>("flag", ValueType::BOOL, b);
    auto r = parse(w.build());
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.message().find("metadata key 'flag': bool value " + std::to_string(b)), std::string::npos)
        << r.message();
    GgufWriter wa;
    wa.scalar_array<uint8_t>("flags", ValueType::BOOL, {1, 0, b});
    auto ra = parse(wa.build());
    ASSERT_FALSE(ra.is_ok());
    EXPECT_NE(ra.message().find("metadata key 'flags' [2]: bool value " + std::to_string(b)), std::string::npos)
        << ra.message();
  }
  GgufWriter ok;
  ok.scalar<uint8_t>("flag", ValueType::BOOL, 1).scalar_array<uint8_t>("flags", ValueType::BOOL, {0, 1});
  auto r = parse(ok.build());
  ASSERT_TRUE(r.is_ok()) << r.message();
  auto flag = r->get_bool("flag");
  ASSERT_TRUE(flag.is_ok());
  EXPECT_TRUE(flag.value());
}

TEST(Gguf, F64ArrayNarrowsToFloat) {
  GgufWriter w;
  w.scalar_array<double>("d", ValueType::F64, {1e300, -1e300, 0.1});
  auto r = parse(w.build());
  ASSERT_TRUE(r.is_ok()) << r.message();
  const std::vector<float> f = r->get_f32_array("d").value();
  ASSERT_EQ(f.size(), 3u);
  EXPECT_TRUE(std::isinf(f[0]) && f[0] > 0);
  EXPECT_TRUE(std::isinf(f[1]) && f[1] < 0);
  EXPECT_EQ(f[2], 0.1f);
}

TEST(Gguf, VersionsAndMagic) {
  GgufWriter w2(2);
  w2.string("k", "v").tensor("t", {32}, DType::Q8_0, pattern(34, 5));
  auto r2 = parse(w2.build());
  ASSERT_TRUE(r2.is_ok()) << r2.message();
  EXPECT_EQ(r2->version(), 2u);

  auto v1 = parse(GgufWriter(1).build());
  EXPECT_EQ(v1.message(), "[gguf] GGUF version 1 is not supported (only versions 2 and 3)");
  auto v4 = parse(GgufWriter(4).build());
  EXPECT_EQ(v4.message(), "[gguf] unsupported GGUF version 4 (only versions 2 and 3)");
  auto be = parse(GgufWriter(0x03000000u).build());
  EXPECT_NE(be.message().find("big-endian"), std::string::npos) << be.message();

  std::vector<uint8_t> bad = GgufWriter().build();
  std::memcpy(bad.data(), "ABCD", 4);
  EXPECT_EQ(parse(bad).message(), "[gguf] not a GGUF file (magic 'ABCD')");
  bad[0] = 0;
  EXPECT_EQ(parse(bad).message(), "[gguf] not a GGUF file (magic '\\x00BCD')");
  EXPECT_EQ(parse(std::vector<uint8_t>{'G', 'G'}).message(), "[gguf] not a GGUF file (only 2 bytes)");
  EXPECT_FALSE(GgufFile::parse(nullptr, 0).is_ok());

  // An empty but valid file: no keys, no tensors.
  auto empty = parse(GgufWriter().build());
  ASSERT_TRUE(empty.is_ok()) << empty.message();
  EXPECT_TRUE(empty->metadata().empty());
  EXPECT_TRUE(empty->tensors().empty());
}

TEST(Gguf, Alignment) {
  GgufWriter w;
  w.alignment(64).scalar<uint32_t>("general.alignment", ValueType::U32, 64);
  w.tensor("a", {3}, DType::F32, pattern(12, 1)).tensor("b", {5}, DType::F32, pattern(20, 2));
  const auto b = w.build();
  auto r = parse(b);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r->alignment(), 64u);
  EXPECT_EQ(r->data_offset() % 64, 0u);
  EXPECT_EQ(r->find_tensor("b")->offset, 64u);
  EXPECT_EQ(std::vector<uint8_t>(r->find_tensor("b")->data, r->find_tensor("b")->data + 20), pattern(20, 2));

  for (uint32_t bad : {0u, 48u, 3u}) {
    GgufWriter wb;
    wb.scalar<uint32_t>("general.alignment", ValueType::U32, bad);
    auto rb = parse(wb.build());
    EXPECT_EQ(rb.message(), "[gguf] metadata key 'general.alignment': " + std::to_string(bad) +
                                " is not a nonzero power of two");
  }
  GgufWriter ws;
  ws.string("general.alignment", "32");
  EXPECT_EQ(parse(ws.build()).message(),
            "[gguf] metadata key 'general.alignment': expected an integer, got STRING");

  // Offset not a multiple of the alignment.
  GgufWriter wo;
  wo.tensor_info("x", {8}, 0, 16);
  EXPECT_EQ(parse(wo.build()).message(),
            "[gguf] tensor 'x': offset 16 is not a multiple of the alignment 32");
}

TEST(Gguf, TensorInfoErrors) {
  auto msg = [](GgufWriter w) { return parse(w.build()).message(); };
  {
    GgufWriter w;
    w.tensor_info("x", {4}, 99, 0);
    EXPECT_EQ(msg(w), "[gguf] tensor 'x': unknown type id 99");
  }
  {  // specula's own Q8_A (MLX 8-bit at load) is never read from a file
    GgufWriter w;
    w.tensor_info("x", {32}, static_cast<uint32_t>(DType::Q8_A), 0);
    EXPECT_EQ(msg(w), "[gguf] tensor 'x': unknown type id 40");
  }
  // GGML types specula does not implement are named in the error.
  for (auto [id, name] : {std::pair<uint32_t, const char*>{16, "IQ2_XXS"}, {18, "IQ3_XXS"}, {22, "IQ2_S"},
                          {34, "TQ1_0"}, {35, "TQ2_0"}, {39, "MXFP4"}}) {
    GgufWriter w;
    w.tensor_info("x", {256}, id, 0);
    EXPECT_EQ(msg(w), "[gguf] tensor 'x': tensor type " + std::string(name) + " (id " + std::to_string(id) +
                          ") is not supported");
  }
  {
    GgufWriter w;
    w.tensor_info("x", {1, 1, 1, 1, 1}, 0, 0);
    EXPECT_EQ(msg(w), "[gguf] tensor 'x': n_dims 5 out of range [1, 4]");
  }
  {
    GgufWriter w;
    w.tensor_info("x", {}, 0, 0);
    EXPECT_EQ(msg(w), "[gguf] tensor 'x': n_dims 0 out of range [1, 4]");
  }
  {
    GgufWriter w;
    w.tensor_info("x", {33, 2}, static_cast<uint32_t>(DType::Q8_0), 0);
    EXPECT_EQ(msg(w), "[gguf] tensor 'x': shape[0] = 33 is not a multiple of the Q8_0 block size 32");
  }
  {
    GgufWriter w;
    w.tensor_info("x", {1ull << 32, 1ull << 32}, 0, 0);
    EXPECT_EQ(msg(w), "[gguf] tensor 'x': element count overflows int64");
  }
  {
    GgufWriter w;
    w.tensor_info("x", {1ull << 63}, 0, 0);
    EXPECT_NE(msg(w).find("too large"), std::string::npos);
  }
  {
    GgufWriter w;
    w.tensor_info("x", {1ull << 40}, 0, 0);  // 4 TiB of F32
    EXPECT_NE(msg(w).find("[gguf] tensor 'x': size 4398046511104 bytes exceeds the file size"),
              std::string::npos);
  }
  {
    GgufWriter w;
    w.tensor("a", {8}, DType::F32, pattern(32, 1)).tensor_info("x", {8}, 0, 64);
    const auto b = w.build();
    auto r = parse(b);
    // header 24 + tensors ~70 -> data at 96, 'x' would be [160, 192) in a 128-byte file.
    EXPECT_NE(r.message().find("[gguf] tensor 'x': data ["), std::string::npos) << r.message();
    EXPECT_NE(r.message().find("past end of file (size " + std::to_string(b.size()) + ")"),
              std::string::npos)
        << r.message();
  }
  {
    GgufWriter w;
    w.tensor_info("x", {8}, 0, 0xFFFFFFFFFFFFFFE0ull);
    EXPECT_NE(msg(w).find("past end of file"), std::string::npos) << msg(w);
  }
  {
    GgufWriter w;
    w.tensor("x", {8}, DType::F32, pattern(32, 1)).tensor("x", {8}, DType::F32, pattern(32, 1));
    EXPECT_EQ(msg(w), "[gguf] tensor 'x': duplicate tensor name");
  }
  {
    GgufWriter w;
    w.string("k", "a").string("k", "b");
    EXPECT_EQ(msg(w), "[gguf] metadata key 'k': duplicate key");
  }
  {
    GgufWriter w;
    w.scalar<uint32_t>("k", static_cast<ValueType>(13), 0);
    EXPECT_NE(msg(w).find("[gguf] metadata key 'k': unknown value type 13"), std::string::npos);
  }
}

// Q2_K, Q3_K, IQ4_NL and IQ4_XS tensors parse with their block geometry (ggml-common.h:
// 84, 110, 18 and 136 bytes per 256, 256, 32 and 256 elements).
TEST(Gguf, LowBitTypesParse) {
  GgufWriter w;
  w.tensor("q2", {512, 2}, DType::Q2_K, pattern(4 * 84, 1))
      .tensor("q3", {256}, DType::Q3_K, pattern(110, 2))
      .tensor("nl", {64, 3}, DType::IQ4_NL, pattern(6 * 18, 3))
      .tensor("xs", {256, 2}, DType::IQ4_XS, pattern(2 * 136, 4));
  const auto b = w.build();
  auto r = parse(b);
  ASSERT_TRUE(r.is_ok()) << r.message();
  const struct {
    const char* name;
    DType type;
    size_t n_bytes;
  } kWant[] = {{"q2", DType::Q2_K, 336}, {"q3", DType::Q3_K, 110}, {"nl", DType::IQ4_NL, 108}, {"xs", DType::IQ4_XS, 272}};
  for (const auto& want : kWant) {
    const TensorInfo* t = r->find_tensor(want.name);
    ASSERT_NE(t, nullptr) << want.name;
    EXPECT_EQ(t->type, want.type) << want.name;
    EXPECT_EQ(t->n_bytes, want.n_bytes) << want.name;
  }
  GgufWriter bad;
  bad.tensor_info("x", {100}, static_cast<uint32_t>(DType::IQ4_XS), 0);
  EXPECT_EQ(parse(bad.build()).message(), "[gguf] tensor 'x': shape[0] = 100 is not a multiple of the IQ4_XS block size 256");
}

TEST(Gguf, HugeCountsFailFastWithoutAllocating) {
  // A claimed 2^60-element array of strings in a tiny file.
  for (ValueType elem : {ValueType::STRING, ValueType::F64, ValueType::ARRAY, ValueType::U8}) {
    GgufWriter w;
    Bytes b;
    b.array_header(elem, 1ull << 60);
    w.kv("k", ValueType::ARRAY, b);
    auto r = parse(w.build());
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.message().find("[gguf] metadata key 'k': array of 1152921504606846976 "),
              std::string::npos)
        << r.message();
  }
  // The message of the brief: a tokens array claiming 262144 strings, holding two.
  {
    GgufWriter w;
    Bytes b;
    b.array_header(ValueType::STRING, 262144).str("<pad>").str("<eos>");
    w.kv("tokenizer.ggml.tokens", ValueType::ARRAY, b);
    const auto bytes = w.build();
    auto r = parse(bytes);
    // 24-byte header, 29-byte key, 4-byte type, 12-byte array header: the count check
    // fails before any element is read. The file is padded to 96 bytes.
    ASSERT_EQ(bytes.size(), 96u);
    EXPECT_EQ(r.message(), "[gguf] metadata key 'tokenizer.ggml.tokens': array of 262144 strings "
                           "truncated at byte 69 (file size 96)");
  }
  // A count that passes the quick check (3 x 8 <= 27 bytes left) but runs out
  // mid-array, at the third string.
  {
    GgufWriter w;
    Bytes b;
    b.array_header(ValueType::STRING, 3).str("<pad>").str("<eos>");
    w.kv("tokenizer.ggml.tokens", ValueType::ARRAY, b);
    auto r = parse(w.build());
    EXPECT_EQ(r.message(), "[gguf] metadata key 'tokenizer.ggml.tokens': array of 3 strings "
                           "truncated at byte 95 (file size 96)");
  }
  // A huge string length.
  {
    GgufWriter w;
    Bytes b;
    b.put<uint64_t>(~0ull);
    w.kv("s", ValueType::STRING, b);
    EXPECT_NE(parse(w.build()).message().find("'s': string of 18446744073709551615 bytes truncated"),
              std::string::npos);
  }
  // Huge kv_count / tensor_count in the header.
  {
    Bytes h;
    h.put<uint32_t>(0x46554747u).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(~0ull);
    EXPECT_NE(parse(h.data()).message().find("kv_count 18446744073709551615 cannot fit"),
              std::string::npos);
    Bytes t;
    t.put<uint32_t>(0x46554747u).put<uint32_t>(3).put<uint64_t>(1ull << 62).put<uint64_t>(0);
    EXPECT_NE(parse(t.data()).message().find("tensor_count 4611686018427387904 cannot fit"),
              std::string::npos);
  }
  // Arrays nested past the depth limit.
  {
    GgufWriter w;
    Bytes b;
    for (int d = 0; d < 100; ++d) b.array_header(ValueType::ARRAY, 1);
    b.array_header(ValueType::U8, 0);
    w.kv("deep", ValueType::ARRAY, b);
    EXPECT_NE(parse(w.build()).message().find("nested deeper than"), std::string::npos);
  }
}

TEST(Gguf, Describe) {
  const std::vector<uint8_t> b = full_writer().build();
  auto r = parse(b);
  ASSERT_TRUE(r.is_ok()) << r.message();
  const std::string d = describe(*r);
  for (const char* want :
       {"GGUF v3", "alignment:   32", "general.architecture", "\"testarch\"", "v.i64",
        "-9000000000000000000", "ARRAY[STRING]", "(4) [\"<pad>\", \"\", \"hello world\"",
        "ARRAY[ARRAY[U16]]", "(2) [(2) [1, 2], (1) [3]]", "a.bool", "[true, false, true]",
        "\"hi\\x00there", "embd.weight", "Q8_0", "[64, 2]", "[2, 3, 4, 5]", "4 tensors",
        "totals:"}) {
    EXPECT_NE(d.find(want), std::string::npos) << "missing '" << want << "' in:\n" << d;
  }
}

TEST(Gguf, OpenFromDisk) {
  const std::vector<uint8_t> b = full_writer().build();
  const std::string path =
      (std::filesystem::temp_directory_path() / ("gguf_test_" + std::to_string(::getpid()) + ".gguf"))
          .string();
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  auto r = GgufFile::open(path);
  std::filesystem::remove(path);  // the mapping stays valid after unlink
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r->path(), path);
  EXPECT_EQ(r->file_size(), b.size());
  const TensorInfo* t = r->find_tensor("blk.0.q4k");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->n_bytes), pattern(144, 3));
  // A copy shares the mapping; data stays valid after the original is gone.
  GgufFile copy = *r;
  r = Status::error("gone");
  EXPECT_EQ(std::vector<uint8_t>(copy.find_tensor("blk.0.q4k")->data,
                                 copy.find_tensor("blk.0.q4k")->data + 144),
            pattern(144, 3));

  auto missing = GgufFile::open("/nonexistent/x.gguf");
  EXPECT_NE(missing.message().find("[mmap] /nonexistent/x.gguf"), std::string::npos);
}

// ---------------------------------------------------------------------------------
// Corruption sweeps: every outcome must be ok or a "[gguf]" error, never a crash.

// Touch everything a parsed file exposes, so ASan sees any bad pointer.
uint64_t exercise(const GgufFile& f) {
  uint64_t h = describe(f).size();
  for (const auto& [k, v] : f.metadata()) {
    h += f.get_string_array(k).is_ok() + f.get_f32_array(k).is_ok() + f.get_i32_array(k).is_ok();
    h += f.get_uint(k).is_ok() + f.get_float(k).is_ok() + f.get_string(k).is_ok();
    if (v.is_array() && v.count > 0) h += v.at(v.count - 1).u;
  }
  for (const TensorInfo& t : f.tensors()) {
    if (t.n_bytes > 0) h += t.data[0] + t.data[t.n_bytes - 1];
  }
  return h;
}

// Parse from an exact-size heap copy so that any overread is an ASan error.
bool parse_copy(const uint8_t* p, size_t n, uint64_t* sink, std::string* err) {
  std::vector<uint8_t> buf(p, p + n);
  auto r = GgufFile::parse(buf.data(), buf.size());
  if (r.is_ok()) {
    *sink += exercise(*r);
    return true;
  }
  *err = r.message();
  return false;
}

TEST(GgufCorruption, TruncateAtEveryByte) {
  const std::vector<uint8_t> b = full_writer().build();
  uint64_t sink = 0;
  for (size_t n = 0; n < b.size(); ++n) {
    std::string err;
    // The last tensor ends at the end of the file, so every strict prefix must fail.
    ASSERT_FALSE(parse_copy(b.data(), n, &sink, &err)) << "prefix " << n << " parsed";
    ASSERT_EQ(err.rfind("[gguf] ", 0), 0u) << err;
  }
  std::string err;
  EXPECT_TRUE(parse_copy(b.data(), b.size(), &sink, &err)) << err;
}

TEST(GgufCorruption, FlipEveryByte) {
  const std::vector<uint8_t> orig = full_writer().build();
  uint64_t sink = 0;
  size_t n_ok = 0, n_err = 0;
  std::vector<uint8_t> b = orig;
  auto parsed = parse(orig);
  ASSERT_TRUE(parsed.is_ok()) << parsed.message();
  const size_t data_offset = parsed->data_offset();
  for (size_t pos = 0; pos < orig.size(); ++pos) {
    const uint8_t x = orig[pos];
    const std::vector<uint8_t> values =
        pos < data_offset ? std::vector<uint8_t>{0x00, 0xFF, 0x80, 0x7F, static_cast<uint8_t>(x ^ 0x01),
                                                 static_cast<uint8_t>(x ^ 0x10), static_cast<uint8_t>(x + 1)}
                          : std::vector<uint8_t>{static_cast<uint8_t>(~x)};  // tensor data: opaque
    for (uint8_t v : values) {
      b[pos] = v;
      std::string err;
      if (parse_copy(b.data(), b.size(), &sink, &err)) {
        ++n_ok;
      } else {
        ++n_err;
        ASSERT_EQ(err.rfind("[gguf] ", 0), 0u) << err;
      }
    }
    b[pos] = x;
  }
  EXPECT_GT(n_err, 0u);
  EXPECT_GT(n_ok, 0u);  // tensor data bytes do not matter to the parser
  EXPECT_NE(sink, 1u);
}

TEST(GgufCorruption, RandomMultiByteDamage) {
  const std::vector<uint8_t> orig = full_writer().build();
  std::mt19937_64 rng(1234);
  uint64_t sink = 0;
  for (int it = 0; it < 4000; ++it) {
    std::vector<uint8_t> b = orig;
    const int n_flips = 1 + static_cast<int>(rng() % 6);
    for (int k = 0; k < n_flips; ++k) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    const size_t len = rng() % 4 == 0 ? rng() % (b.size() + 1) : b.size();
    std::string err;
    if (!parse_copy(b.data(), len, &sink, &err)) {
      ASSERT_EQ(err.rfind("[gguf] ", 0), 0u) << err;
    }
  }
  EXPECT_NE(sink, 1u);
}

// ---------------------------------------------------------------------------------
// The real model (skipped when absent).

std::string model_path() { return specula::testing::default_model_path(); }

TEST(GgufRealModel, Gemma3_270m) {
  const std::string path = model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not found: " << path;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = GgufFile::open(path);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.is_ok()) << r.message();
  std::printf("[gguf] parsed %s header in %.1f ms\n", path.c_str(), ms);
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(ms, 1000.0);  // typically ~15 ms; loose bound for a loaded 2-core machine
#endif
  const GgufFile& f = *r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset(), 6525120u);
  EXPECT_EQ(f.tensors().size(), 236u);
  EXPECT_EQ(f.get_string("general.architecture").value(), "gemma3");
  EXPECT_EQ(f.get_uint("gemma3.embedding_length").value(), 640u);
  EXPECT_EQ(f.get_uint("gemma3.block_count").value(), 18u);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model").value(), "llama");
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.is_ok()) << tokens.message();
  EXPECT_EQ(tokens->size(), 262144u);
  EXPECT_EQ((*tokens)[0], "<pad>");
  auto scores = f.get_f32_array("tokenizer.ggml.scores");
  ASSERT_TRUE(scores.is_ok());
  EXPECT_EQ(scores->size(), 262144u);
  auto types = f.get_i32_array("tokenizer.ggml.token_type");
  ASSERT_TRUE(types.is_ok());
  EXPECT_EQ(types->size(), 262144u);
  EXPECT_EQ(f.get_string_array("general.tags").value().size(), 4u);

  const TensorInfo* emb = f.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, DType::Q8_0);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{640, 262144}));
  EXPECT_EQ(emb->n_bytes, 178257920u);
  const TensorInfo* norm = f.find_tensor("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->type, DType::F32);
  EXPECT_EQ(norm->offset, 0u);
  uint64_t total = 0;
  bool seen_q4k = false, seen_q6k = false, seen_q5_0 = false;
  for (const TensorInfo& t : f.tensors()) {
    total += t.n_bytes;
    seen_q4k |= t.type == DType::Q4_K;
    seen_q6k |= t.type == DType::Q6_K;
    seen_q5_0 |= t.type == DType::Q5_0;
    EXPECT_LE(f.data_offset() + t.offset + t.n_bytes, f.file_size()) << t.name;
  }
  EXPECT_TRUE(seen_q4k && seen_q6k && seen_q5_0);
  EXPECT_LE(total, f.file_size() - f.data_offset());
  const std::string d = describe(f);
  EXPECT_NE(d.find("tokenizer.ggml.tokens"), std::string::npos);
  EXPECT_NE(d.find("(262144) [\"<pad>\""), std::string::npos);
  EXPECT_NE(d.find("236 tensors"), std::string::npos);
}

TEST(GgufRealModel, TruncatedHeaderPrefixes) {
  const std::string path = model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not found: " << path;
  auto full = GgufFile::open(path);
  ASSERT_TRUE(full.is_ok()) << full.message();
  const size_t header = full->data_offset();
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> head(header + 64);
  in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
  ASSERT_TRUE(in.good());
  // Dense over the first 4 KiB (header fields, first keys), then spread over the rest
  // of the header (the 262144-entry arrays), plus the exact end of the header.
  std::vector<size_t> cuts;
  for (size_t n = 0; n < 4096; n += 23) cuts.push_back(n);
  std::mt19937_64 rng(7);
  for (int k = 0; k < 160; ++k) cuts.push_back(4096 + rng() % (header + 64 - 4096));
  cuts.push_back(header - 1);
  cuts.push_back(header);
  uint64_t sink = 0;
  for (size_t n : cuts) {
    std::string err;
    ASSERT_FALSE(parse_copy(head.data(), n, &sink, &err)) << "prefix " << n << " parsed";
    ASSERT_EQ(err.rfind("[gguf] ", 0), 0u) << err;
  }
  // A cut inside the tokens array names it.
  std::string err;
  ASSERT_FALSE(parse_copy(head.data(), header / 2, &sink, &err));
  EXPECT_NE(err.find("metadata key 'tokenizer.ggml.tokens': array of 262144 strings truncated at byte"),
            std::string::npos)
      << err;
}

}  // namespace
}  // namespace specula::gguf
