// tests/test_util.h — shared helpers for tests: model lookup.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace specula::testing {

inline std::string default_model_path() {
  const char* env = std::getenv("SPECULA_MODELS");
  std::string dir = env != nullptr && *env != '\0' ? env : std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache/specula/models";
  return dir + "/gemma-3-270m-q4_k_m.gguf";
}

inline bool default_model_present() { return std::filesystem::exists(default_model_path()); }

}  // namespace specula::testing
