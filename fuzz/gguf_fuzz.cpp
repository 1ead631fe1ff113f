// fuzz/gguf_fuzz.cpp — libFuzzer target for the GGUF reader (cmake --preset fuzz; scripts/fuzz gguf;
// the corruption sweeps in tests/formats/gguf_test.cpp run in every test build).
// Every input must parse or fail with a "[gguf]" Status; a parsed file is then fully
// walked (describe, getters, first/last byte of every tensor) so ASan sees bad pointers.
// Does not check parsed values against anything.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "formats/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace specula::gguf;
  auto r = GgufFile::parse(data, size);
  if (!r.is_ok()) {
    if (r.message().rfind("[gguf] ", 0) != 0) std::abort();
    return 0;
  }
  volatile size_t sink = describe(*r).size();
  for (const auto& [key, v] : r->metadata()) {
    sink = sink + r->get_string_array(key).is_ok() + r->get_f32_array(key).is_ok() +
           r->get_i32_array(key).is_ok() + r->get_uint(key).is_ok() + r->get_float(key).is_ok();
    if (v.is_array() && v.count > 0) sink = sink + v.at(v.count - 1).u;
  }
  for (const TensorInfo& t : r->tensors()) {
    if (t.n_bytes > 0) sink = sink + t.data[0] + t.data[t.n_bytes - 1];
  }
  return 0;
}
