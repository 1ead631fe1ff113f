// EAGLE-3 draft heads (decoding/eagle3.h) and the hidden taps they read (model.h Batch::taps),
// on tiny random models: tools/make_eagle3_fixtures.py writes, at test time, two targets of
// tools/make_arch_fixtures.py and a random head for each in llama.cpp's eagle3 GGUF layout
// (checked byte for byte against the files the fixture was made from), each head also as a
// Hugging Face EAGLE-3 folder, plus broken heads;
// tests/fixtures/eagle3_reference.json holds a float64 numpy reference of the heads' drafts
// at every context length.
// Checked: the drafts equal the reference through simulated rounds (prefill, draft, commit with
// 0..3 accepted drafts, two requests batched), for the GGUF head and the same head as a
// Hugging Face folder; they equal llama.cpp's own draft-eagle3 drafts at every context length
// its greedy run drafted from (the fixture's "llama_cpp", tools/llama_spec_oracle.cpp; the
// head whose taps llama.cpp's llama graph can give); taps of a ragged batch equal each row's alone;
// speculation with the head equals plain decoding (B = 1 and 4, greedy and seeded sampling,
// f16 / q4_0 / turbo caches, the prompt cache); bad heads are refused with errors naming the
// problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "decoding/eagle3.h"
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
const std::string kDir = testing::process_temp_dir("specula_eagle3_models");

const nlohmann::json& reference() {
  static const nlohmann::json j = testing::read_fixture("eagle3_reference.json");
  return j;
}

// Writes the targets and heads once per process (python3 with numpy and gguf).
std::string files_error() { return testing::run_fixture_tool("make_eagle3_fixtures.py", "--models-only", kDir); }

std::string target_path(const std::string& name) { return kDir + "/arch_" + name + ".gguf"; }
std::string head_path(const std::string& name) { return kDir + "/eagle3_" + name + ".gguf"; }

std::unique_ptr<Model> load(const std::string& path) {
  auto m = load_model(path);
  EXPECT_TRUE(m.is_ok()) << m.message();
  return m.is_ok() ? std::move(m).value() : nullptr;
}

std::unique_ptr<DraftSource> head(Model& target, const std::string& name, const CacheOptions& cache = {}) {
  auto d = make_eagle3_draft(target, head_path(name), 512, cache);
  EXPECT_TRUE(d.is_ok()) << d.message();
  return d.is_ok() ? std::move(d).value() : nullptr;
}

class Eagle3Test : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(reference().empty()) << "tests/fixtures/eagle3_reference.json is missing";
    ASSERT_EQ(files_error(), "");
  }
};

// The target's taps of `layers` over one sequence, one forward: [S, n_taps, n_embd].
Tensor sequence_taps(Model& m, const std::vector<int32_t>& seq, const std::vector<int32_t>& layers) {
  auto state = testing::make_state(m, 1, 512);
  EXPECT_TRUE(state.is_ok());
  const int32_t row = 0;
  Batch b{1, static_cast<int64_t>(seq.size()), seq.data(), &row};
  b.tap_layers = layers.data();
  b.n_taps = static_cast<int32_t>(layers.size());
  Tensor taps, hidden;
  b.taps = &taps;
  const Status st = m.forward(b, *state, hidden);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return taps;
}

// Rounds as the engine runs them, for the reference's cases of one head batched together:
// prefill of the prompt, then draft / commit with a varying number of accepted drafts; every
// draft whose reference margin is clear must equal the reference.
void check_rounds(const std::string& name, const nlohmann::json& h, const std::string& path) {
  {
    auto target = load(target_path(h["target"].get<std::string>()));
    ASSERT_NE(target, nullptr);
    auto made = make_eagle3_draft(*target, path, 512);
    ASSERT_TRUE(made.is_ok()) << made.message();
    std::unique_ptr<DraftSource> source = std::move(made).value();
    const std::vector<int32_t> layers = h["layers"].get<std::vector<int32_t>>();
    EXPECT_EQ(source->hidden_taps(), layers);
    const int32_t depth = h["depth"].get<int32_t>();
    const int64_t Et = target->info().n_embd;
    struct Req {
      std::vector<int32_t> seq;
      Tensor taps;
      std::map<int64_t, nlohmann::json> points;
      int64_t n = 0;  // context length now
    };
    std::vector<Req> reqs;
    for (const auto& c : h["cases"]) {
      Req r;
      r.seq = c["sequence"].get<std::vector<int32_t>>();
      r.taps = sequence_taps(*target, r.seq, layers);
      for (const auto& p : c["points"]) r.points[p["n"].get<int64_t>()] = p;
      r.n = c["prompt_length"].get<int64_t>();
      reqs.push_back(std::move(r));
    }
    // Prefill: each prompt in one chunk (the forward is the sequence's: positions = packed index).
    for (size_t i = 0; i < reqs.size(); ++i) {
      const std::vector<int64_t> first{0}, pos{0}, kept{reqs[i].n};
      VerifyContext vc;
      vc.taps = reqs[i].taps.data();
      vc.n_taps = 3;
      vc.n_embd = Et;
      vc.first = first;
      vc.pos = pos;
      vc.kept = kept;
      const DraftRow row{i + 1, std::span<const int32_t>(reqs[i].seq.data(), reqs[i].n), 0};
      ASSERT_TRUE(source->prefill(std::span<const DraftRow>(&row, 1), &vc).is_ok());
      reqs[i].n += 1;  // the first sampled token is pending
    }
    int checked = 0, skipped = 0;
    for (int round = 0;; ++round) {
      std::vector<DraftRow> rows;
      std::vector<size_t> which;
      for (size_t i = 0; i < reqs.size(); ++i)
        if (reqs[i].n <= static_cast<int64_t>(reqs[i].seq.size())) {
          rows.push_back(DraftRow{i + 1, std::span<const int32_t>(reqs[i].seq.data(), reqs[i].n), depth});
          which.push_back(i);
        }
      if (rows.empty()) break;
      std::vector<std::vector<int32_t>> proposals;
      ASSERT_TRUE(source->draft(rows, proposals).is_ok());
      ASSERT_EQ(proposals.size(), rows.size());
      for (size_t k = 0; k < rows.size(); ++k) {
        const Req& r = reqs[which[k]];
        const auto& p = r.points.at(r.n);
        const auto want = p["drafts"].get<std::vector<int32_t>>();
        const auto margins = p["margins"].get<std::vector<double>>();
        ASSERT_EQ(proposals[k].size(), static_cast<size_t>(depth));
        for (int32_t j = 0; j < depth; ++j) {
          if (margins[j] < 1e-3) {  // a near tie: this draft and the chain after it may differ
            ++skipped;
            break;
          }
          EXPECT_EQ(proposals[k][j], want[j]) << name << " request " << which[k] << " n " << r.n << " draft " << j;
          ++checked;
        }
      }
      // Commit: a = 0..3 accepted drafts (the sequence's tokens, whatever was drafted).
      std::vector<int64_t> first, pos, kept;
      std::vector<DraftRow> commits;
      std::vector<int64_t> next_n;
      for (size_t k = 0; k < rows.size(); ++k) {
        Req& r = reqs[which[k]];
        const int64_t a = std::min<int64_t>((round + static_cast<int64_t>(which[k])) % 4,
                                            static_cast<int64_t>(r.seq.size()) - r.n);
        first.push_back(r.n - 1);
        pos.push_back(r.n - 1);
        kept.push_back(a + 1);
        next_n.push_back(r.n + a + 1);
      }
      // One VerifyContext per request (each has its own taps tensor).
      for (size_t k = 0; k < rows.size(); ++k) {
        Req& r = reqs[which[k]];
        VerifyContext vc;
        vc.taps = r.taps.data();
        vc.n_taps = 3;
        vc.n_embd = Et;
        vc.first = std::span<const int64_t>(&first[k], 1);
        vc.pos = std::span<const int64_t>(&pos[k], 1);
        vc.kept = std::span<const int64_t>(&kept[k], 1);
        const int64_t len = std::min<int64_t>(next_n[k], static_cast<int64_t>(r.seq.size()));
        const DraftRow c{which[k] + 1, std::span<const int32_t>(r.seq.data(), len), 0};
        source->commit(std::span<const DraftRow>(&c, 1), &vc);
        r.n = next_n[k];
      }
    }
    EXPECT_GT(checked, 40) << name;
    EXPECT_LT(skipped, 4) << name;
    std::printf("[eagle3] %s (%s): %d drafts equal the f64 reference, %d near ties skipped\n", name.c_str(),
                path.c_str(), checked, skipped);
  }
}

// The GGUF head and the same head as a Hugging Face folder.
TEST_F(Eagle3Test, DraftsEqualTheFloat64ReferenceThroughRounds) {
  for (const auto& [name, h] : reference()["heads"].items()) {
    check_rounds(name, h, head_path(name));
    check_rounds(name, h, kDir + "/hf_eagle3_" + name);
  }
}

// llama.cpp's own draft-eagle3 (its greedy run on each prompt, heads whose taps llama.cpp's
// graphs give): the same drafts at every context length it drafted from, near ties of the
// f64 reference skipped.
TEST_F(Eagle3Test, DraftsEqualLlamaCppsDraftEagle3) {
  int heads = 0;
  for (const auto& [name, h] : reference()["heads"].items()) {
    if (!h.contains("llama_cpp")) continue;
    ++heads;
    auto target = load(target_path(h["target"].get<std::string>()));
    ASSERT_NE(target, nullptr);
    const std::vector<int32_t> layers = h["layers"].get<std::vector<int32_t>>();
    testing::ScheduleCount count;
    for (size_t k = 0; k < h["cases"].size(); ++k) {
      const auto& c = h["cases"][k];
      const auto& run = h["llama_cpp"][k];
      std::vector<int32_t> seq = run["prompt"].get<std::vector<int32_t>>();
      for (int32_t t : run["tokens"]) seq.push_back(t);
      // (llama.cpp stops at the end-of-generation token; the reference runs on)
      const auto f64 = c["sequence"].get<std::vector<int32_t>>();
      ASSERT_LE(seq.size(), f64.size());
      EXPECT_TRUE(std::equal(seq.begin(), seq.end(), f64.begin())) << name << ": llama.cpp's greedy tokens";
      std::map<int64_t, std::vector<double>> margins;
      for (const auto& p : c["points"]) margins[p["n"].get<int64_t>()] = p["margins"].get<std::vector<double>>();
      const Tensor taps = sequence_taps(*target, seq, layers);
      VerifyContext base;
      base.taps = taps.data();
      base.n_taps = 3;
      base.n_embd = target->info().n_embd;
      auto source = head(*target, name);
      ASSERT_NE(source, nullptr);
      testing::check_llama_schedule(*source, run, seq, base, name, count, [&](int64_t n, int32_t j) {
        auto it = margins.find(n);
        return it == margins.end() || it->second[static_cast<size_t>(j)] < 1e-2;
      });
    }
    EXPECT_GT(count.compared, 60) << name;
    EXPECT_LT(count.skipped, 6) << name;
    std::printf("[eagle3] %s: %d drafts equal llama.cpp's draft-eagle3, %d accepted, %d near ties skipped\n",
                name.c_str(), count.compared, count.accepted, count.skipped);
  }
  EXPECT_EQ(heads, 1);
}

// Rejection sampling: a sampled row's drafts are drawn from the head's distribution over the
// target vocabulary (a draft vocabulary placed through d2t) and come with it.
TEST_F(Eagle3Test, SampledDraftsComeWithTheirDistribution) {
  const auto& h = reference()["heads"]["llama_b_head"];
  auto target = load(target_path("llama_b"));
  ASSERT_NE(target, nullptr);
  auto source = head(*target, "llama_b_head");
  ASSERT_NE(source, nullptr);
  const auto seq = h["cases"][0]["sequence"].get<std::vector<int32_t>>();
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 8;
  sp.seed = 5;
  const DraftRow rows[2] = {{1, std::span<const int32_t>(seq.data(), 9), 3, &sp},
                            {2, std::span<const int32_t>(seq.data(), 9), 3, nullptr}};
  std::vector<std::vector<int32_t>> proposals;
  std::vector<std::vector<TokenDist>> q;
  ASSERT_TRUE(source->draft_sampled(rows, proposals, q).is_ok());
  ASSERT_EQ(proposals[0].size(), 3u);
  ASSERT_EQ(q[0].size(), 3u);
  for (size_t j = 0; j < 3; ++j) {
    double total = 0, mine = 0;
    for (const auto& [id, p] : q[0][j]) {
      total += p;
      if (id == proposals[0][j]) mine = p;
    }
    EXPECT_NEAR(total, 1.0, 1e-3);
    EXPECT_GT(mine, 0.0);
    EXPECT_LE(q[0][j].size(), 8u);
  }
  EXPECT_TRUE(q[1].empty());  // the greedy row: argmax drafts, exact-match acceptance
  EXPECT_EQ(proposals[1].size(), 3u);
}

TEST_F(Eagle3Test, TapsOfARaggedBatchEqualEachRowAlone) {
  auto m = load(target_path("llama_b"));
  ASSERT_NE(m, nullptr);
  const std::vector<int32_t> layers{0, 2, 5, 1};
  const std::vector<int32_t> a{5, 9, 17, 33, 2, 8, 100, 7, 44}, b{3, 250, 11};
  const Tensor ta = sequence_taps(*m, a, layers), tb = sequence_taps(*m, b, layers);
  auto state = testing::make_state(*m, 2, 512);
  ASSERT_TRUE(state.is_ok());
  std::vector<int32_t> ids = a;
  ids.insert(ids.end(), b.begin(), b.end());
  const int32_t rows[2] = {1, 0};
  const int64_t counts[2] = {static_cast<int64_t>(a.size()), static_cast<int64_t>(b.size())};
  Batch batch{2, 0, ids.data(), rows, counts};
  batch.tap_layers = layers.data();
  batch.n_taps = 4;
  Tensor taps, hidden;
  batch.taps = &taps;
  ASSERT_TRUE(m->forward(batch, *state, hidden).is_ok());
  const int64_t E = m->info().n_embd, W = 4 * E;
  ASSERT_EQ(taps.shape(), (std::vector<int64_t>{static_cast<int64_t>(ids.size()), 4, E}));
  EXPECT_EQ(std::memcmp(taps.data(), ta.data(), a.size() * W * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(taps.data() + a.size() * W, tb.data(), b.size() * W * sizeof(float)), 0);
  // Tap 0 is the embedding row; a layer out of range is an error.
  EXPECT_NE(std::memcmp(ta.data(), ta.data() + E, E * sizeof(float)), 0);
  const std::vector<int32_t> bad{6};
  batch.tap_layers = bad.data();
  batch.n_taps = 1;
  const Status st = m->forward(batch, *state, hidden);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("hidden tap layer 6 is out of range"), std::string::npos) << st.message();
}

EngineOptions engine_options(const CacheOptions& cache, int32_t rows, std::shared_ptr<DraftSource> draft) {
  EngineOptions o;
  o.cache = cache;
  o.n_rows = rows;
  o.n_ctx = 256;
  o.step_tokens = 64;
  o.spec_depth = 4;
  o.draft = std::move(draft);
  return o;
}

TEST_F(Eagle3Test, SpeculationEqualsPlainDecoding) {
  struct Layout {
    const char* name;
    CacheOptions cache;
  };
  std::vector<Layout> layouts{{"f16", {}}, {"q4_0", {}}, {"turbo4_turbo3", {}}};
  layouts[1].cache.type_k = layouts[1].cache.type_v = "q4_0";
  layouts[2].cache.type_k = "turbo4";
  layouts[2].cache.type_v = "turbo3";
  int layouts_run = 0;  // (target, layout) pairs: llama_b's head_dim 16 takes no q4_0 / turbo cache
  for (const auto& [name, h] : reference()["heads"].items()) {
    auto target = load(target_path(h["target"].get<std::string>()));
    ASSERT_NE(target, nullptr);
    for (float temperature : {0.0f, 0.8f}) {
      auto reqs = repeating_requests(static_cast<int32_t>(target->info().n_vocab), 24);
      for (size_t i = 0; i < reqs.size(); ++i) {
        reqs[i].sampling.temperature = temperature;
        reqs[i].sampling.seed = 900 + i;
      }
      for (const Layout& L : layouts) {
        std::vector<std::vector<int32_t>> plain;
        {
          auto e = Engine::create(*target, engine_options(L.cache, 1, nullptr));
          if (!e.is_ok() && e.message().find("needs head_dim a multiple of") != std::string::npos) continue;
          ASSERT_TRUE(e.is_ok()) << e.message();
          plain = run_each(**e, reqs);
          ++layouts_run;
        }
        // (the head keeps its own rows in f16)
        auto e1 = Engine::create(*target, engine_options(L.cache, 1, std::shared_ptr<DraftSource>(head(*target, name))));
        ASSERT_TRUE(e1.is_ok()) << e1.message();
        EXPECT_EQ(run_each(**e1, reqs), plain) << name << " " << L.name << " B=1 T=" << temperature;
        auto e4 = Engine::create(*target, engine_options(L.cache, 4, std::shared_ptr<DraftSource>(head(*target, name))));
        ASSERT_TRUE(e4.is_ok()) << e4.message();
        EXPECT_EQ(run_all(**e4, reqs), plain) << name << " " << L.name << " B=4 T=" << temperature;
        EXPECT_GT((*e4)->stats().drafted, 0u) << name << " " << L.name;
      }
    }
  }
  EXPECT_GE(layouts_run, 8);
}

TEST_F(Eagle3Test, PromptCacheHitsStayLossless) {
  auto target = load(target_path("llama_b"));
  ASSERT_NE(target, nullptr);
  auto reqs = repeating_requests(static_cast<int32_t>(target->info().n_vocab), 20);
  std::vector<std::vector<int32_t>> plain;
  {
    auto e = Engine::create(*target, engine_options({}, 1, nullptr));
    ASSERT_TRUE(e.is_ok());
    plain = run_each(**e, reqs);
  }
  PromptCacheOptions po;
  po.ram_bytes = int64_t{1} << 26;
  po.fingerprint = "eagle3-test";
  EngineOptions o = engine_options({}, 4, std::shared_ptr<DraftSource>(head(*target, "llama_b_head")));
  o.prompt_cache = std::shared_ptr<PromptCache>(PromptCache::create(po).value());
  auto e = Engine::create(*target, o);
  ASSERT_TRUE(e.is_ok()) << e.message();
  EXPECT_EQ(run_all(**e, reqs), plain);
  // Again: the prompts (and earlier answers) come from the cache, the head has no features
  // for those positions (zeros), the tokens are the same.
  std::vector<RequestSummary> sums;
  EXPECT_EQ(run_all(**e, reqs, &sums), plain);
  for (const auto& s : sums) EXPECT_GT(s.cached_tokens, 0);
}

TEST_F(Eagle3Test, BadHeadsAreRefusedByName) {
  auto llama = load(target_path("llama_b"));
  auto qwen = load(target_path("qwen3_a"));
  ASSERT_NE(llama, nullptr);
  ASSERT_NE(qwen, nullptr);
  const auto error = [](Model& t, const std::string& path) {
    auto d = make_eagle3_draft(t, path, 256);
    EXPECT_FALSE(d.is_ok()) << path;
    return d.is_ok() ? std::string() : d.message();
  };
  const auto has = [](const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  };
  has(error(*qwen, head_path("llama_b_head")), "made for a target of hidden size 96, this target's is 64");
  has(error(*llama, head_path("qwen3_a_head")), "made for a target of hidden size 64, this target's is 96");
  has(error(*llama, target_path("llama_b")), "is not an EAGLE-3 head (general.architecture 'llama'");
  has(error(*llama, head_path("bad_no_d2t")), "has 200 rows but the file has no d2t map to the target's 300 tokens");
  has(error(*llama, head_path("bad_vocab")), "the head's vocabulary has 299 tokens, the target's 300");
  has(error(*llama, head_path("bad_layers")), "eagle3.target_layers entry 9 is outside [0, 5]");
  has(error(*llama, head_path("bad_d2t_range")), "= 300 is outside the target vocabulary (300 tokens)");
  has(error(*llama, head_path("bad_narrow")), "has no output.weight and its hidden size 64 is not the target's 96");
  has(error(*llama, head_path("bad_extra")), "tensor 'blk.0.attn_q.bias' is not part of an EAGLE-3 head");
  has(error(*llama, kDir + "/missing.gguf"), "[eagle3]");
  // A speculators-format folder is refused by name.
  {
    const std::string dir = kDir + "/hf_speculators";
    fs::create_directories(dir);
    fs::copy_file(kDir + "/hf_eagle3_llama_b_head/model.safetensors", dir + "/model.safetensors",
                  fs::copy_options::overwrite_existing);
    std::ifstream in(kDir + "/hf_eagle3_llama_b_head/config.json");
    nlohmann::json cfg = nlohmann::json::parse(in);
    cfg["architectures"] = {"Eagle3Speculator"};
    std::ofstream(dir + "/config.json") << cfg.dump();
    has(error(*llama, dir), "the speculators format (Eagle3Speculator");
  }
  // Through the front doors' setup: --spec eagle3 with a plain model, and a head given as
  // --draft-model is used as one.
  auto s = make_draft_source("eagle3", target_path("llama_b"), *llama, 256);
  ASSERT_FALSE(s.is_ok());
  has(s.message(), "is not an EAGLE-3 head");
  auto auto_head = make_draft_source("", head_path("llama_b_head"), *llama, 256);
  ASSERT_TRUE(auto_head.is_ok()) << auto_head.message();
  EXPECT_EQ((*auto_head)->name(), "eagle3");
  for (const std::string& folder : {kDir + "/hf_eagle3_llama_b_head", kDir + "/hf_eagle3_llama_b_head/model.safetensors"}) {
    auto from_folder = make_draft_source("", folder, *llama, 256);
    ASSERT_TRUE(from_folder.is_ok()) << folder << ": " << from_folder.message();
    EXPECT_EQ((*from_folder)->name(), "eagle3") << folder;
  }
}

}  // namespace
}  // namespace specula
