// fuzz/safetensors_fuzz.cpp — libFuzzer target for the safetensors reader (cmake --preset fuzz; scripts/fuzz safetensors;
// the corruption sweeps in tests/formats/safetensors_test.cpp run in every test build).
// Every input must parse or fail with a "[safetensors] <memory>: " Status; a parsed file is
// then fully walked (every tensor's first and last byte, lookups) so ASan sees bad pointers.
// Does not check parsed values against anything, or fuzz Folder (index files).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace specula::safetensors;
  auto r = File::parse(data, size);
  if (!r.is_ok()) {
    if (r.message().rfind("[safetensors] <memory>: ", 0) != 0) std::abort();
    return 0;
  }
  volatile size_t sink = r->metadata().size();
  for (const TensorInfo& t : r->tensors()) {
    sink = sink + static_cast<size_t>(t.n_elements()) + t.alignment;
    if (t.n_bytes > 0) sink = sink + t.data[0] + t.data[t.n_bytes - 1];
    if (r->find(t.name) != &t) std::abort();
  }
  return 0;
}
