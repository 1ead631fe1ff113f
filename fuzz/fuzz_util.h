// fuzz/fuzz_util.h — what the libFuzzer targets of fuzz/ share: splitting one input into
// parts, and failing loudly (abort, which libFuzzer reports as a crash and saves the input)
// when a property every input must keep is broken.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

namespace specula::fuzz {

// A property is broken: prints what, and the detail (an error message, a value), aborts.
[[noreturn]] inline void fail(const char* what, std::string_view detail = {}) {
  std::fprintf(stderr, "fuzz: %s: %.*s\n", what, static_cast<int>(detail.size()), detail.data());
  std::abort();
}

// Reads an input front to back: a selector byte, then text parts separated by a byte that
// the dictionaries and seeds use (kSeparator, "\x00\x01").
class Input {
 public:
  static constexpr std::string_view kSeparator{"\x00\x01", 2};
  Input(const uint8_t* data, size_t size) : rest_(reinterpret_cast<const char*>(data), size) {}
  // The next byte (0 when none is left).
  uint8_t byte() {
    if (rest_.empty()) return 0;
    const auto b = static_cast<uint8_t>(rest_.front());
    rest_.remove_prefix(1);
    return b;
  }
  // Up to the next separator (or the end); the separator is skipped.
  std::string_view part() {
    const size_t at = rest_.find(kSeparator);
    std::string_view p = rest_.substr(0, at);
    rest_.remove_prefix(at == std::string_view::npos ? rest_.size() : at + kSeparator.size());
    return p;
  }
  std::string_view rest() const { return rest_; }

 private:
  std::string_view rest_;
};

// Whether an error message starts with `prefix` (every error of a reader names it).
inline bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// A whole file read into memory; fails (fuzz::fail) when it cannot be read: a target's fixed
// inputs (fixtures, real tokenizers) must be there.
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read a file the target needs (tests/fixtures, or tools/fetch_hf_tokenizers.py)", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A real tokenizer.json (tools/fetch_hf_tokenizers.py puts them under
// ${SPECULA_CACHE:-~/.cache/specula}/tokenizers/NAME/; scripts/fuzz fetches them first).
inline std::string tokenizer_json_path(const std::string& name) {
  const char* cache = std::getenv("SPECULA_CACHE");
  const char* home = std::getenv("HOME");
  const std::string base = cache != nullptr ? std::string(cache) : std::string(home != nullptr ? home : "") + "/.cache/specula";
  return base + "/tokenizers/" + name + "/tokenizer.json";
}

}  // namespace specula::fuzz
