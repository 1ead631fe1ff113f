// tests/test_util.h — shared helpers for tests: model lookup, state groups.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "model/model.h"

namespace specula::testing {

inline std::string default_model_path() {
  const char* env = std::getenv("SPECULA_MODELS");
  std::string dir = env != nullptr && *env != '\0' ? env : std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache/specula/models";
  return dir + "/gemma-3-270m-q4_k_m.gguf";
}

inline bool default_model_present() { return std::filesystem::exists(default_model_path()); }

inline std::string models_dir() {
  const char* env = std::getenv("SPECULA_MODELS");
  return env != nullptr && *env != '\0' ? env : std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache/specula/models";
}

// A state group for `model` with n_rows empty rows of at most n_ctx positions.
inline Result<StateRows> make_state(const Model& model, int32_t n_rows, int64_t n_ctx, const CacheOptions& options = {}) {
  auto s = new_state(model, options, n_ctx);
  if (!s) return s.status();
  SPECULA_RETURN_IF_ERROR(s->reserve(n_rows));
  for (int32_t r = 0; r < n_rows; ++r) {
    auto row = s->new_row();
    if (!row) return row.status();
    s->insert(std::move(row).value());
  }
  return s;
}

}  // namespace specula::testing
