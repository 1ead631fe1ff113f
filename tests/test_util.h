// tests/test_util.h — shared helpers for tests: model lookup, state groups.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace specula::testing {

inline std::string default_model_path() {
  const char* env = std::getenv("SPECULA_MODELS");
  std::string dir = env != nullptr && *env != '\0' ? env : std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache/specula/models";
  return dir + "/gemma-3-270m-q4_k_m.gguf";
}

inline bool default_model_present() { return std::filesystem::exists(default_model_path()); }

// The default model's tokenizer (from its GGUF vocabulary); null when the model is absent.
// A load error fails the calling test.
inline std::unique_ptr<tokenizer::Tokenizer> default_tokenizer() {
  if (!default_model_present()) return nullptr;
  auto f = gguf::GgufFile::open(default_model_path());
  EXPECT_TRUE(f.is_ok()) << f.message();
  if (!f.is_ok()) return nullptr;
  auto v = tokenizer::Vocab::from_gguf(*f);
  EXPECT_TRUE(v.is_ok()) << v.message();
  if (!v.is_ok()) return nullptr;
  auto t = tokenizer::make_tokenizer(*v);
  EXPECT_TRUE(t.is_ok()) << t.message();
  return t.is_ok() ? std::move(t).value() : nullptr;
}

inline std::string models_dir() {
  const char* env = std::getenv("SPECULA_MODELS");
  return env != nullptr && *env != '\0' ? env : std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache/specula/models";
}

// A temporary folder of this process's own ($TMPDIR/NAME.PID), removed when the process exits.
// ctest runs each test in its own process, two at a time: processes that wrote the same fixture
// folder at once replaced it under each other's reads.
inline std::string process_temp_dir(const std::string& name) {
  struct Remover {
    std::vector<std::string> dirs;
    ~Remover() {
      for (const auto& d : dirs) {
        std::error_code ec;
        std::filesystem::remove_all(d, ec);
      }
    }
  };
  static Remover remover;
  std::string dir = std::filesystem::temp_directory_path().string();
  dir += "/";
  dir += name;
  dir += ".";
  dir += std::to_string(::getpid());
  remover.dirs.push_back(dir);
  return dir;
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
// `lora`: the adapters the row runs with (model/lora.h), or null.
inline std::vector<int32_t> greedy(Model& m, const std::vector<int32_t>& prompt, int n, const CacheOptions& c = {},
                                   const LoraSet* lora = nullptr) {
  auto st = make_state(m, 1, 512, c);
  EXPECT_TRUE(st.is_ok()) << st.message();
  if (!st.is_ok()) return {};
  const int64_t V = m.info().n_vocab, E = m.info().n_embd;
  std::vector<float> logits(static_cast<size_t>(V));
  Tensor h;
  const int32_t row[1] = {0};
  const LoraSet* sets[1] = {lora};
  Batch prefill{1, static_cast<int64_t>(prompt.size()), prompt.data(), row};
  prefill.lora = sets;
  EXPECT_TRUE(m.forward(prefill, *st, h).is_ok());
  m.project_logits(h.data() + (h.dim(0) - 1) * E, 1, logits.data());
  std::vector<int32_t> out = {argmax(logits.data(), V)};
  while (static_cast<int>(out.size()) < n) {
    Batch step{1, 1, &out.back(), row};
    step.lora = sets;
    EXPECT_TRUE(m.forward(step, *st, h).is_ok());
    m.project_logits(h.data(), 1, logits.data());
    out.push_back(argmax(logits.data(), V));
  }
  return out;
}

// Teacher-forced agreement with one case of a tiny-model fixture (tools/llama_oracle.py:
// "prompt", "greedy", per-position "argmax", "top_ids", "top_logits", "probe_logits"): one
// forward of prompt + greedy, compared position by position; accumulates into `acc`.
// A position is "decided" when the oracle's top two logits are at least tie_gap apart.
struct TeacherForced {
  int positions = 0, top1 = 0, decided = 0, decided_ok = 0;
  double max_top = 0, max_probe = 0;  // max |Δlogit| over the top-8 ids and the probe ids
};
inline void teacher_forced(Model& m, const nlohmann::json& c, const std::vector<int32_t>& probe, double tie_gap,
                           TeacherForced& acc, const LoraSet* lora = nullptr) {
  std::vector<int32_t> seq = c["prompt"].get<std::vector<int32_t>>();
  const auto want = c["greedy"].get<std::vector<int32_t>>();
  seq.insert(seq.end(), want.begin(), want.end());
  auto st = make_state(m, 1, 512);
  ASSERT_TRUE(st.is_ok()) << st.message();
  Tensor h;
  const int32_t row[1] = {0};
  const LoraSet* sets[1] = {lora};
  Batch all{1, static_cast<int64_t>(seq.size()), seq.data(), row};
  all.lora = sets;
  ASSERT_TRUE(m.forward(all, *st, h).is_ok());
  const int64_t V = m.info().n_vocab;
  std::vector<float> logits(seq.size() * static_cast<size_t>(V));
  m.project_logits(h.data(), static_cast<int64_t>(seq.size()), logits.data());
  for (size_t i = 0; i < seq.size(); ++i) {
    const auto& p = c["positions"][i];
    const float* l = logits.data() + i * V;
    ++acc.positions;
    const bool agree = argmax(l, V) == p["argmax"].get<int32_t>();
    acc.top1 += agree;
    const auto ids = p["top_ids"].get<std::vector<int32_t>>();
    const auto vals = p["top_logits"].get<std::vector<double>>();
    if (vals.size() >= 2 && vals[0] - vals[1] >= tie_gap) {
      ++acc.decided;
      acc.decided_ok += agree;
    }
    for (size_t k = 0; k < ids.size(); ++k) acc.max_top = std::max(acc.max_top, std::fabs(l[ids[k]] - vals[k]));
    const auto pv = p["probe_logits"].get<std::vector<double>>();
    for (size_t k = 0; k < probe.size(); ++k) acc.max_probe = std::max(acc.max_probe, std::fabs(l[probe[k]] - pv[k]));
  }
}

}  // namespace specula::testing
