// tests/test_util.h — shared helpers for tests: model lookup, state groups.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
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

inline int32_t argmax(const float* l, int64_t n) { return static_cast<int32_t>(std::max_element(l, l + n) - l); }

// Greedy tokens: prefill the prompt in one forward, then decode one token at a time (one
// row of a fresh state of 512 positions with the given cache types).
inline std::vector<int32_t> greedy(Model& m, const std::vector<int32_t>& prompt, int n, const CacheOptions& c = {}) {
  auto st = make_state(m, 1, 512, c);
  EXPECT_TRUE(st.is_ok()) << st.message();
  if (!st.is_ok()) return {};
  const int64_t V = m.info().n_vocab, E = m.info().n_embd;
  std::vector<float> logits(static_cast<size_t>(V));
  Tensor h;
  const int32_t row[1] = {0};
  EXPECT_TRUE(m.forward(Batch{1, static_cast<int64_t>(prompt.size()), prompt.data(), row}, *st, h).is_ok());
  m.project_logits(h.data() + (h.dim(0) - 1) * E, 1, logits.data());
  std::vector<int32_t> out = {argmax(logits.data(), V)};
  while (static_cast<int>(out.size()) < n) {
    EXPECT_TRUE(m.forward(Batch{1, 1, &out.back(), row}, *st, h).is_ok());
    m.project_logits(h.data(), 1, logits.data());
    out.push_back(argmax(logits.data(), V));
  }
  return out;
}

}  // namespace specula::testing
