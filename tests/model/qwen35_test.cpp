// Tests for model/arch/qwen35 (the gated-DeltaNet hybrid) on two tiny random-weight models
// written at test time by tools/make_qwen35_fixtures.py (checked byte for byte against the
// files llama.cpp judged): greedy continuations equal llama.cpp's, teacher-forced logits
// agree (top-1 and a stated max |Δlogit|), cached decode equals one forward bitwise, the
// recurrent state rolls back by snapshot + replay exactly, and speculative decoding (n-gram
// and a draft model) gives exactly the plain tokens at B = 1 and 4, greedy and sampled.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/engine.h"
#include "decoding/draft.h"
#include "model/model.h"
#include "state/prompt_cache.h"
#include "../engine/engine_test_util.h"
#include "../test_util.h"

namespace specula {
namespace {

const std::string kDir = testing::process_temp_dir("specula_tiny_models");

// Writes the tiny models once per process (python3 with numpy and gguf; scripts/test
// installs them) and checks them against the fixture's sha256.
const std::string& models_error() {
  static std::string err;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string src = std::filesystem::path(SPECULA_FIXTURES_DIR).parent_path().parent_path().string();
    const std::string cmd = "python3 '" + src + "/tools/make_qwen35_fixtures.py' --models-only --check --out '" + kDir +
                            "' > '" + kDir + "/make.log' 2>&1";
    std::filesystem::create_directories(kDir);
    if (std::system(cmd.c_str()) != 0) {
      std::ifstream in(kDir + "/make.log");
      std::stringstream ss;
      ss << in.rdbuf();
      err = "tools/make_qwen35_fixtures.py failed: " + ss.str();
    }
  });
  return err;
}

const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    std::ifstream in(std::string(SPECULA_FIXTURES_DIR) + "/qwen35_reference.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

std::unique_ptr<Model> load_tiny(const std::string& name) {
  EXPECT_EQ(models_error(), "");
  auto m = load_model(kDir + "/qwen35_" + name + ".gguf");
  EXPECT_TRUE(m.is_ok()) << m.message();
  return m.is_ok() ? std::move(m).value() : nullptr;
}

using testing::argmax;
using testing::greedy;

class Qwen35Test : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen35Test, GreedyEqualsLlamaCppAndLogitsAgree) {
  const std::string name = GetParam();
  auto m = load_tiny(name);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->info().architecture, "qwen35");
  const auto& ref = reference()["models"][name];
  const std::vector<int32_t> probe = ref["probe_ids"].get<std::vector<int32_t>>();
  testing::TeacherForced tf;
  for (const auto& c : ref["cases"]) {
    const auto prompt = c["prompt"].get<std::vector<int32_t>>();
    const auto want = c["greedy"].get<std::vector<int32_t>>();
    EXPECT_EQ(greedy(*m, prompt, static_cast<int>(want.size())), want) << name << " prompt of " << prompt.size();
    testing::teacher_forced(*m, c, probe, 0.0, tf);
  }
  std::printf("[qwen35 %s] top-1 %d/%d, max |dlogit| top-8 %.4f, probes %.4f\n", name.c_str(), tf.top1, tf.positions,
              tf.max_top, tf.max_probe);
  EXPECT_EQ(tf.top1, tf.positions) << name;
  EXPECT_LT(tf.max_top, 0.02) << name;
  EXPECT_LT(tf.max_probe, 0.02) << name;
}

TEST_P(Qwen35Test, CachedDecodeEqualsOneForwardAndRollbackReplays) {
  auto m = load_tiny(GetParam());
  ASSERT_NE(m, nullptr);
  const int64_t E = m->info().n_embd;
  std::mt19937 rng(5);
  std::vector<int32_t> ids(70);
  for (auto& t : ids) t = 2 + static_cast<int32_t>(rng() % 200);
  auto run = [&](StateRows& st, const std::vector<int32_t>& seq, size_t first, size_t step) {
    std::vector<float> out;
    Tensor h;
    const int32_t row[1] = {0};
    for (size_t off = 0; off < seq.size();) {
      const size_t n = off == 0 ? first : std::min(step, seq.size() - off);
      EXPECT_TRUE(m->forward(Batch{1, static_cast<int64_t>(n), seq.data() + off, row}, st, h).is_ok());
      out.insert(out.end(), h.data(), h.data() + n * E);
      off += n;
    }
    return out;
  };
  for (const CacheOptions& c : std::vector<CacheOptions>{{}, {"q8_0", "turbo3", 0}}) {
    auto a = testing::make_state(*m, 1, 512, c), b = testing::make_state(*m, 1, 512, c);
    ASSERT_TRUE(a.is_ok() && b.is_ok()) << a.message();
    EXPECT_EQ(run(*a, ids, ids.size(), 1), run(*b, ids, 9, 5)) << c.type_k;
    // Rollback: 40 tokens, a round of 7 of which 3 are kept, then 6 more == straight run.
    auto r = testing::make_state(*m, 1, 512, c), s = testing::make_state(*m, 1, 512, c);
    std::vector<int32_t> head(ids.begin(), ids.begin() + 40), round(ids.begin() + 40, ids.begin() + 47);
    run(*r, head, 40, 1);
    const int32_t row0[1] = {0};
    r->begin(row0);
    run(*r, round, 7, 1);
    const int64_t keep[1] = {3};
    ASSERT_TRUE(r->resolve(row0, keep).is_ok());
    EXPECT_EQ(r->length(0), 43);
    std::vector<int32_t> tail(ids.begin() + 50, ids.begin() + 56);
    const auto after = run(*r, tail, 6, 1);
    std::vector<int32_t> straight(ids.begin(), ids.begin() + 43);
    straight.insert(straight.end(), tail.begin(), tail.end());
    const auto want = run(*s, straight, straight.size(), 1);
    EXPECT_EQ(after, std::vector<float>(want.end() - 6 * E, want.end())) << c.type_k;
    // A recurrent row is reusable only whole.
    EXPECT_FALSE(r->truncate(0, 40).is_ok());
  }
}

TEST_P(Qwen35Test, SpeculationEqualsPlain) {
  const std::string name = GetParam();
  auto m = load_tiny(name);
  ASSERT_NE(m, nullptr);
  std::vector<EngineRequest> reqs = repeating_requests(static_cast<int32_t>(m->info().n_vocab), 30);
  for (float temperature : {0.0f, 0.9f}) {
    for (auto& r : reqs) {
      r.sampling.temperature = temperature;
      r.sampling.seed = 77 + r.prompt.size();
    }
    auto make = [&](int32_t rows, std::shared_ptr<DraftSource> d) { return speculative_engine(*m, rows, std::move(d)); };
    const auto plain = run_each(*make(1, nullptr), reqs);
    EXPECT_EQ(run_each(*make(1, make_ngram_draft()), reqs), plain) << name << " n-gram B=1 T=" << temperature;
    auto e4 = make(4, make_ngram_draft());
    EXPECT_EQ(run_all(*e4, reqs), plain) << name << " n-gram B=4 T=" << temperature;
    // The model drafting for itself from a turbo3 K/V cache (its recurrent layers roll back
    // by replay inside the draft source's own transaction).
    auto dm = load_tiny(name);
    auto d = make_model_draft(std::move(dm), 256, CacheOptions{"turbo3", "turbo3", 0});
    ASSERT_TRUE(d.is_ok()) << d.message();
    auto ed = make(4, std::shared_ptr<DraftSource>(std::move(d).value()));
    EXPECT_EQ(run_all(*ed, reqs), plain) << name << " draft model B=4 T=" << temperature;
    std::printf("[qwen35 %s] T=%.1f n-gram %llu/%llu, draft model %llu/%llu accepted\n", name.c_str(), temperature,
                static_cast<unsigned long long>(e4->stats().accepted), static_cast<unsigned long long>(e4->stats().drafted),
                static_cast<unsigned long long>(ed->stats().accepted), static_cast<unsigned long long>(ed->stats().drafted));
    // The draft model's proposals are both accepted and rejected (rollback by replay runs).
    EXPECT_GT(ed->stats().accepted, 0u);
    EXPECT_LT(ed->stats().accepted, ed->stats().drafted);
  }
}

// The prompt cache with recurrent state: a repeated prompt and a chat continuation are
// served from checkpoints and the previous request's final state, token for token equal to
// cold runs (greedy and sampled).
TEST_P(Qwen35Test, PromptCacheEqualsColdRuns) {
  auto m = load_tiny(GetParam());
  ASSERT_NE(m, nullptr);
  const int32_t V = static_cast<int32_t>(m->info().n_vocab);
  std::mt19937 rng(9);
  std::vector<int32_t> p1(90);
  for (auto& t : p1) t = 2 + static_cast<int32_t>(rng() % (V - 2));
  auto make = [&](std::shared_ptr<PromptCache> pc) {
    EngineOptions o;
    o.n_rows = 2;
    o.n_ctx = 256;
    o.step_tokens = 64;
    o.prompt_cache = std::move(pc);
    o.cache_checkpoint_every = 32;
    return std::move(Engine::create(*m, o)).value();
  };
  PromptCacheOptions po;
  po.ram_bytes = int64_t{1} << 28;
  po.fingerprint = "tiny";
  std::shared_ptr<PromptCache> pc(PromptCache::create(po).value());
  auto cold = make(nullptr), warm = make(pc);
  for (float temperature : {0.0f, 0.9f}) {
    EngineRequest r1;
    r1.prompt = p1;
    r1.max_tokens = 12;
    r1.ignore_eos = true;
    r1.sampling.temperature = temperature;
    r1.sampling.seed = 3;
    std::vector<RequestSummary> s;
    const auto c1 = run_all(*cold, {r1})[0];
    EXPECT_EQ(run_all(*warm, {r1}, &s)[0], c1);
    EngineRequest r2 = r1;  // the continuation: prompt + answer + 20 more tokens
    r2.prompt.insert(r2.prompt.end(), c1.begin(), c1.end());
    for (int i = 0; i < 20; ++i) r2.prompt.push_back(2 + static_cast<int32_t>(rng() % (V - 2)));
    const auto c2 = run_all(*cold, {r2})[0];
    EXPECT_EQ(run_all(*warm, {r2}, &s)[0], c2) << "T=" << temperature;
    EXPECT_EQ(s.back().cached_tokens, 90 + 11) << "the previous request's final state";
    EXPECT_EQ(run_all(*warm, {r1}, &s)[0], c1);
    EXPECT_EQ(s.back().cached_tokens, 89) << "the prompt checkpoint";
  }
}

INSTANTIATE_TEST_SUITE_P(TinyModels, Qwen35Test, ::testing::Values("tiny_a", "tiny_b"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace specula
