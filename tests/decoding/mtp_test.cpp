// Multi-token-prediction draft source (decoding/mtp.h) on tiny random Qwen3.5 models with an
// MTP block: tools/make_mtp_fixtures.py writes them at test time (checked byte for byte
// against the files the fixture was made from); tests/fixtures/mtp_reference.json holds
// llama.cpp's greedy draft-mtp run on them (tools/llama_spec_oracle.cpp): every draft it made
// and how many the target accepted.
// Checked: at each context length llama.cpp drafted from, specula's MTP source drafts the
// same tokens (the source driven through prefill / draft / commit as the engine drives it,
// on llama.cpp's schedule), and so accepts the same counts; the engine with --spec mtp gives
// llama.cpp's greedy tokens; speculation with MTP equals plain decoding (B = 1 and 4, greedy
// and seeded sampling, f16 / q4_0 / turbo caches); models without MTP layers and bad
// combinations are refused by name; prompt-cache hits stay lossless; with rejection sampling
// the output distribution is plain decoding's; the model as a Hugging Face folder drafts the same.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "decoding/mtp.h"
#include "engine/engine.h"
#include "engine/setup.h"
#include "model/model.h"
#include "state/prompt_cache.h"
#include "../engine/engine_test_util.h"
#include "llama_schedule.h"
#include "../fixture_tool.h"
#include "../test_util.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
const std::string kDir = testing::process_temp_dir("specula_mtp_models");

const nlohmann::json& reference() {
  static const nlohmann::json j = testing::read_fixture("mtp_reference.json");
  return j;
}

// Writes the models once per process (python3 with numpy and gguf).
std::string files_error() { return testing::run_fixture_tool("make_mtp_fixtures.py", "--models-only --check", kDir); }

std::string model_path(const std::string& name) { return kDir + "/qwen35_" + name + ".gguf"; }

std::unique_ptr<Model> load(const std::string& name) {
  auto m = load_model(model_path(name));
  EXPECT_TRUE(m.is_ok()) << m.message();
  return m.is_ok() ? std::move(m).value() : nullptr;
}

class MtpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(reference().empty()) << "tests/fixtures/mtp_reference.json is missing";
    ASSERT_EQ(files_error(), "");
  }
};

// The target's final hidden states (after output_norm) over one sequence, one forward.
Tensor sequence_hidden(Model& m, const std::vector<int32_t>& seq) {
  auto state = testing::make_state(m, 1, 512);
  EXPECT_TRUE(state.is_ok());
  const int32_t row = 0;
  Batch b{1, static_cast<int64_t>(seq.size()), seq.data(), &row};
  Tensor hidden;
  const Status st = m.forward(b, *state, hidden);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return hidden;
}

// mtp_a as a Hugging Face folder (tools/gguf_to_hf.py: Qwen3_5ForCausalLM with mtp.* tensors
// and mtp_num_hidden_layers), once per process; "" or the error.
std::string folder_error() {
  static std::once_flag once;
  static std::string err;
  std::call_once(once, [] {
    if (!files_error().empty()) return;
    const std::string src = fs::path(SPECULA_FIXTURES_DIR).parent_path().parent_path().string();
    const std::string cmd = "python3 '" + src + "/tools/gguf_to_hf.py' '" + model_path("mtp_a") + "' '" + kDir +
                            "/hf_mtp_a' --dtype f32 > '" + kDir + "/hf.log' 2>&1";
    if (std::system(cmd.c_str()) != 0) err = "tools/gguf_to_hf.py failed (" + kDir + "/hf.log)";
  });
  return err;
}

TEST_F(MtpTest, DraftsEqualLlamaCppAtEveryRound) {
  ASSERT_EQ(folder_error(), "");
  std::vector<std::pair<std::string, std::string>> runs;  // (reference model, file or folder)
  for (const auto& [name, ref] : reference()["models"].items()) runs.push_back({name, model_path(name)});
  runs.push_back({"mtp_a", kDir + "/hf_mtp_a"});
  for (const auto& [name, path] : runs) {
    const auto& ref = reference()["models"][name];
    auto loaded = load_model(path);
    ASSERT_TRUE(loaded.is_ok()) << path << ": " << loaded.message();
    std::unique_ptr<Model> target = std::move(loaded).value();
    testing::ScheduleCount count;
    for (const auto& c : ref["cases"]) {
      auto made = make_mtp_draft(*target, 512);
      ASSERT_TRUE(made.is_ok()) << made.message();
      EXPECT_EQ((*made)->name(), "mtp");
      EXPECT_TRUE((*made)->hidden_taps().empty());
      std::vector<int32_t> seq = c["prompt"].get<std::vector<int32_t>>();
      for (int32_t t : c["tokens"]) seq.push_back(t);
      const Tensor hidden = sequence_hidden(*target, seq);
      VerifyContext base;
      base.hidden = hidden.data();
      base.n_embd = target->info().n_embd;
      testing::check_llama_schedule(**made, c, seq, base, path, count);
    }
    EXPECT_GT(count.compared, 60) << path;
    std::printf("[mtp] %s: %d drafts equal llama.cpp's draft-mtp, %d accepted\n", path.c_str(), count.compared,
                count.accepted);
  }
}

EngineOptions engine_options(const CacheOptions& cache, int32_t rows, std::shared_ptr<DraftSource> draft, int depth) {
  EngineOptions o;
  o.cache = cache;
  o.n_rows = rows;
  o.n_ctx = 256;
  o.step_tokens = 64;
  o.spec_depth = depth;
  o.draft = std::move(draft);
  return o;
}

std::shared_ptr<DraftSource> mtp(Model& target) {
  auto d = make_mtp_draft(target, 256);
  EXPECT_TRUE(d.is_ok()) << d.message();
  return d.is_ok() ? std::shared_ptr<DraftSource>(std::move(d).value()) : nullptr;
}

// The engine with --spec mtp, greedy, each prompt alone: llama.cpp's tokens, and as many
// drafts accepted.
TEST_F(MtpTest, EngineGivesLlamaCppsTokens) {
  for (const auto& [name, ref] : reference()["models"].items()) {
    auto target = load(name);
    ASSERT_NE(target, nullptr);
    const int depth = ref["depth"].get<int>();
    auto e = Engine::create(*target, engine_options({}, 1, mtp(*target), depth));
    ASSERT_TRUE(e.is_ok()) << e.message();
    for (const auto& c : ref["cases"]) {
      EngineRequest r;
      r.prompt = c["prompt"].get<std::vector<int32_t>>();
      r.sampling.temperature = 0.0f;
      const auto want = c["tokens"].get<std::vector<int32_t>>();
      r.max_tokens = static_cast<int>(want.size());
      auto got = run_all(**e, {r});
      std::vector<int32_t> cut = want;
      if (!cut.empty() && cut.back() == 1 && got[0].size() + 1 == cut.size()) cut.pop_back();  // (eos not emitted)
      EXPECT_EQ(got[0], cut) << name;
    }
    // (mtp_b's drafts are never accepted: the engine soon stops asking for them)
    EXPECT_GT((*e)->stats().drafted, name == "mtp_a" ? 60u : 0u) << name;
    if (name == "mtp_a") {
      EXPECT_GT((*e)->stats().accepted, 20u);
    }
  }
}

TEST_F(MtpTest, SpeculationEqualsPlainDecoding) {
  struct Layout {
    const char* name;
    CacheOptions cache;
  };
  std::vector<Layout> layouts{{"f16", {}}, {"q4_0", {}}, {"turbo4_turbo3", {}}};
  layouts[1].cache.type_k = layouts[1].cache.type_v = "q4_0";
  layouts[2].cache.type_k = "turbo4";
  layouts[2].cache.type_v = "turbo3";
  int runs = 0;
  for (const auto& [name, ref] : reference()["models"].items()) {
    auto target = load(name);
    ASSERT_NE(target, nullptr);
    for (float temperature : {0.0f, 0.8f}) {
      auto reqs = repeating_requests(static_cast<int32_t>(target->info().n_vocab), 24);
      for (size_t i = 0; i < reqs.size(); ++i) {
        reqs[i].sampling.temperature = temperature;
        reqs[i].sampling.seed = 700 + i;
      }
      for (const Layout& L : layouts) {
        std::vector<std::vector<int32_t>> plain;
        {
          auto e = Engine::create(*target, engine_options(L.cache, 1, nullptr, 4));
          ASSERT_TRUE(e.is_ok()) << e.message();
          plain = run_each(**e, reqs);
        }
        auto e1 = Engine::create(*target, engine_options(L.cache, 1, mtp(*target), 4));
        ASSERT_TRUE(e1.is_ok()) << e1.message();
        EXPECT_EQ(run_each(**e1, reqs), plain) << name << " " << L.name << " B=1 T=" << temperature;
        auto e4 = Engine::create(*target, engine_options(L.cache, 4, mtp(*target), 4));
        ASSERT_TRUE(e4.is_ok()) << e4.message();
        EXPECT_EQ(run_all(**e4, reqs), plain) << name << " " << L.name << " B=4 T=" << temperature;
        EXPECT_GT((*e4)->stats().drafted, 0u) << name << " " << L.name;
        ++runs;
      }
    }
  }
  EXPECT_EQ(runs, 12);
}

// From the prompt cache the MTP block has no hidden states for the cached positions (zeros):
// the tokens stay plain decoding's.
TEST_F(MtpTest, PromptCacheHitsStayLossless) {
  auto target = load("mtp_a");
  ASSERT_NE(target, nullptr);
  auto reqs = repeating_requests(static_cast<int32_t>(target->info().n_vocab), 20);
  std::vector<std::vector<int32_t>> plain;
  {
    auto e = Engine::create(*target, engine_options({}, 1, nullptr, 4));
    ASSERT_TRUE(e.is_ok());
    plain = run_each(**e, reqs);
  }
  PromptCacheOptions po;
  po.ram_bytes = int64_t{1} << 26;
  po.fingerprint = "mtp-test";
  EngineOptions o = engine_options({}, 4, mtp(*target), 4);
  o.prompt_cache = std::shared_ptr<PromptCache>(PromptCache::create(po).value());
  auto e = Engine::create(*target, o);
  ASSERT_TRUE(e.is_ok()) << e.message();
  EXPECT_EQ(run_all(**e, reqs), plain);
  std::vector<RequestSummary> sums;
  EXPECT_EQ(run_all(**e, reqs, &sums), plain);
  for (const auto& s : sums) EXPECT_GT(s.cached_tokens, 0);
  EXPECT_GT((*e)->stats().accepted, 0u);
}

// Rejection sampling with the MTP block's distribution (--spec-accept rejection): drafts are
// drawn from it and returned with it (draft_sampled), and the output distribution is plain
// decoding's.
TEST_F(MtpTest, RejectionSamplingKeepsTheDistribution) {
  auto target = load("mtp_a");
  ASSERT_NE(target, nullptr);
  auto source = mtp(*target);
  ASSERT_NE(source, nullptr);
  const auto& c = reference()["models"]["mtp_a"]["cases"][1];
  std::vector<int32_t> ctx = c["prompt"].get<std::vector<int32_t>>();
  for (int32_t t : c["tokens"]) ctx.push_back(t);
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 5;
  sp.seed = 11;
  const DraftRow rows[2] = {{1, std::span<const int32_t>(ctx.data(), 20), 3, &sp},
                            {2, std::span<const int32_t>(ctx.data(), 30), 3, nullptr}};
  std::vector<std::vector<int32_t>> proposals;
  std::vector<std::vector<TokenDist>> q;
  ASSERT_TRUE(source->draft_sampled(rows, proposals, q).is_ok());
  ASSERT_EQ(q.size(), 2u);
  ASSERT_EQ(proposals[0].size(), 3u);
  ASSERT_EQ(q[0].size(), 3u);  // the sampled row: one distribution per draft, with the draft in it
  for (size_t j = 0; j < 3; ++j) {
    double total = 0, mine = 0;
    for (const auto& [id, p] : q[0][j]) {
      total += p;
      if (id == proposals[0][j]) mine = p;
    }
    EXPECT_NEAR(total, 1.0, 1e-3);
    EXPECT_GT(mine, 0.0);
    EXPECT_LE(q[0][j].size(), 5u);
  }
  EXPECT_TRUE(q[1].empty());  // the greedy row: argmax drafts, exact match
  EXPECT_EQ(proposals[1].size(), 3u);

  EngineOptions po = engine_options({}, 8, nullptr, 3);
  po.max_queue = 320;
  auto plain = Engine::create(*target, po);
  ASSERT_TRUE(plain.is_ok());
  EngineOptions o = engine_options({}, 8, mtp(*target), 3);
  o.spec_rejection = true;
  o.max_queue = 320;
  auto spec = Engine::create(*target, o);
  ASSERT_TRUE(spec.is_ok()) << spec.message();
  EngineRequest base;
  base.prompt = c["prompt"].get<std::vector<int32_t>>();
  base.max_tokens = 3;
  base.sampling.top_k = 5;
  expect_same_third_token_distribution_of(base, **plain, **spec, "mtp rejection");
}

TEST_F(MtpTest, ModelsWithoutMtpLayersAreRefusedByName) {
  auto nomtp = load("nomtp");
  ASSERT_NE(nomtp, nullptr);
  const auto has = [](const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  };
  auto d = make_mtp_draft(*nomtp, 256);
  ASSERT_FALSE(d.is_ok());
  has(d.message(), "[mtp] the model has no multi-token-prediction layers (qwen35.nextn_predict_layers is 0");
  // Through the front doors' setup.
  auto s = make_draft_source("mtp", "", *nomtp, 256);
  ASSERT_FALSE(s.is_ok());
  has(s.message(), "has no multi-token-prediction layers");
  auto a = load("mtp_a");
  ASSERT_NE(a, nullptr);
  auto with_model = make_draft_source("mtp", model_path("mtp_b"), *a, 256);
  ASSERT_FALSE(with_model.is_ok());
  has(with_model.message(), "--spec mtp drafts with the model's own MTP layers: drop --draft-model");
  auto ok = make_draft_source("mtp", "", *a, 256);
  ASSERT_TRUE(ok.is_ok()) << ok.message();
  EXPECT_EQ((*ok)->name(), "mtp");
  // The model alone (no --spec) still runs without its MTP block, as before.
  auto plain = Engine::create(*a, engine_options({}, 1, nullptr, 4));
  ASSERT_TRUE(plain.is_ok());
}

}  // namespace
}  // namespace specula
