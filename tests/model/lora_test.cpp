// LoRA adapters (model/lora.h) on the tiny random-weight models: tools/make_lora_fixtures.py
// writes, at test time, the base models of tools/make_arch_fixtures.py, random adapters in
// llama.cpp's GGUF LoRA format, and each base merged with its adapter in f32 (checked byte for
// byte against the files the fixture was made from); tests/fixtures/lora_reference.json holds
// llama.cpp's greedy continuations and teacher-forced logits with each adapter
// (Llama(lora_path, lora_scale)).
// Checked: the unmerged path equals llama.cpp (the architecture tests' tolerances) and the
// merged model; a batch of 8 rows with 4 adapters, a mix of two and rows without is
// bitwise equal to each row run alone; bad adapters are refused with errors naming the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "decoding/draft.h"
#include "engine/engine.h"
#include "model/lora.h"
#include "model/model.h"
#include "state/prompt_cache.h"
#include "../engine/engine_test_util.h"
#include "../fixture_tool.h"
#include "../test_util.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
const std::string kDir = testing::process_temp_dir("specula_lora_models");

const nlohmann::json& reference() {
  static const nlohmann::json j = testing::read_fixture("lora_reference.json");
  return j;
}

// Writes every base, adapter and merged model once per process (python3 with numpy and gguf).
std::string files_error() { return testing::run_fixture_tool("make_lora_fixtures.py", "--models-only --check", kDir); }

std::unique_ptr<Model> load(const std::string& path) {
  auto m = load_model(path);
  EXPECT_TRUE(m.is_ok()) << path << ": " << m.message();
  return m.is_ok() ? std::move(m).value() : nullptr;
}

std::string base_path(const std::string& base) { return kDir + "/arch_" + base + ".gguf"; }
std::string lora_path(const std::string& name) { return kDir + "/lora_" + name + ".gguf"; }

// The four adapters of llama_a, loaded for `m` (empty on an error, which is reported).
std::vector<std::shared_ptr<const LoraAdapter>> llama_adapters(const Model& m) {
  std::vector<std::shared_ptr<const LoraAdapter>> ad;
  for (const char* n : {"llama_a_r4", "llama_a_r8_f16", "llama_a_r2_mlp", "llama_a_r6_o"}) {
    auto a = m.load_lora(lora_path(n));
    EXPECT_TRUE(a.is_ok()) << a.message();
    if (!a.is_ok()) return {};
    ad.push_back(*a);
  }
  return ad;
}

std::vector<std::string> adapter_names() {
  std::vector<std::string> names;
  if (reference().contains("adapters"))
    for (const auto& [k, v] : reference()["adapters"].items()) names.push_back(k);
  return names;
}

// The architecture tests' tolerances (tests/model/arch_oracle_test.cpp explains them): these
// random models amplify rounding, llama.cpp and specula each differ from a float64 forward.
constexpr double kMaxDeltaLogit = 0.5;
constexpr double kTieGap = 0.25;
constexpr double kMinTop1 = 0.97;
// Unmerged vs merged (f32 W + scale·BA): the same model up to the order of rounding (and the
// f16 rounding of activations for f16 weights and adapters). Measured: printed by the test.
constexpr double kMaxMergedDelta = 0.05;

class LoraOracle : public ::testing::TestWithParam<std::string> {};

// Greedy continuations and teacher-forced logits of `m` with `set` against llama.cpp's `cases`.
void expect_llama_cpp(Model& m, const LoraSet& set, const nlohmann::json& ref, const std::string& name) {
  const std::vector<int32_t> probe = ref["probe_ids"].get<std::vector<int32_t>>();
  testing::TeacherForced tf;
  int full = 0, base_differs = 0;
  for (const auto& c : ref["cases"]) {
    const auto prompt = c["prompt"].get<std::vector<int32_t>>();
    const auto want = c["greedy"].get<std::vector<int32_t>>();
    const auto got = testing::greedy(m, prompt, static_cast<int>(want.size()), {}, &set);
    const size_t P = prompt.size();
    bool same = true;
    for (size_t t = 0; t < want.size() && same; ++t) {
      if (got[t] == want[t]) continue;
      same = false;
      const auto& top = c["positions"][P - 1 + t]["top_logits"];
      const double gap = top[0].get<double>() - top[1].get<double>();
      std::printf("[lora %s] prompt of %zu: step %zu differs (%d vs llama.cpp %d), gap %.4f\n", name.c_str(), P, t,
                  got[t], want[t], gap);
      EXPECT_LT(gap, kTieGap) << name << " prompt of " << P << " step " << t;
    }
    full += same;
    base_differs += testing::greedy(m, prompt, static_cast<int>(want.size())) != want;
    testing::teacher_forced(m, c, probe, kTieGap, tf, &set);
  }
  const int n_cases = static_cast<int>(ref["cases"].size());
  std::printf("[lora %s] greedy in full %d/%d (the base model's differs on %d), top-1 %d/%d, max |dlogit| top-8 %.4f, "
              "probes %.4f\n",
              name.c_str(), full, n_cases, base_differs, tf.top1, tf.positions, tf.max_top, tf.max_probe);
  // Where a continuation leaves llama.cpp's, llama.cpp's own top two were a near tie (checked
  // above); at least one prompt is equal in full.
  EXPECT_GE(full, 1) << name;
  EXPECT_GE(base_differs, 1) << name << ": the adapter changes no greedy continuation (too weak to test anything)";
  EXPECT_EQ(tf.decided_ok, tf.decided) << name;
  EXPECT_GE(tf.top1, kMinTop1 * tf.positions) << name;
  EXPECT_LT(tf.max_top, kMaxDeltaLogit) << name;
  EXPECT_LT(tf.max_probe, kMaxDeltaLogit) << name;
}

// The logits of `seq` run as one row through `model` with `lora`.
std::vector<float> logits_of(Model& model, std::vector<int32_t> seq, const LoraSet* lora) {
  const int64_t V = model.info().n_vocab, N = static_cast<int64_t>(seq.size());
  auto st = testing::make_state(model, 1, 512);
  EXPECT_TRUE(st.is_ok());
  Tensor h;
  const int32_t row[1] = {0};
  const LoraSet* sets[1] = {lora};
  Batch b{1, N, seq.data(), row};
  b.lora = sets;
  EXPECT_TRUE(model.forward(b, *st, h).is_ok());
  std::vector<float> l(static_cast<size_t>(N * V));
  model.project_logits(h.data(), N, l.data());
  return l;
}

TEST_P(LoraOracle, EqualsLlamaCppAndTheMergedModel) {
  ASSERT_EQ(files_error(), "");
  const std::string name = GetParam();
  const auto& ref = reference()["adapters"][name];
  auto m = load(base_path(ref["base"].get<std::string>()));
  ASSERT_NE(m, nullptr);
  auto adapter = m->load_lora(lora_path(name));
  ASSERT_TRUE(adapter.is_ok()) << adapter.message();
  EXPECT_EQ((*adapter)->max_rank(), ref["rank"].get<int64_t>());
  EXPECT_EQ((*adapter)->format(), "gguf");
  LoraSet set{{LoraWeight{*adapter, ref["scale"].get<float>()}}};
  expect_llama_cpp(*m, set, ref, name);
  const int n_cases = static_cast<int>(ref["cases"].size());

  // The merged model (no adapter) gives the same logits.
  auto merged = load(kDir + "/merged_" + name + ".gguf");
  ASSERT_NE(merged, nullptr);
  const auto& c = ref["cases"][static_cast<size_t>(n_cases - 1)];
  const std::vector<int32_t> seq = c["prompt"].get<std::vector<int32_t>>();
  const int64_t N = static_cast<int64_t>(seq.size());
  const auto unmerged = logits_of(*m, seq, &set), whole = logits_of(*merged, seq, nullptr);
  double worst = 0;
  for (size_t i = 0; i < unmerged.size(); ++i) worst = std::max(worst, std::fabs(double(unmerged[i]) - whole[i]));
  std::printf("[lora %s] unmerged vs merged: max |dlogit| %.5f over %lld positions\n", name.c_str(), worst,
              static_cast<long long>(N));
  EXPECT_LT(worst, kMaxMergedDelta) << name;
}

INSTANTIATE_TEST_SUITE_P(TinyAdapters, LoraOracle, ::testing::ValuesIn(adapter_names()),
                         [](const auto& info) { return info.param; });

std::vector<std::string> peft_names() {
  std::vector<std::string> names;
  if (reference().contains("peft"))
    for (const auto& [k, v] : reference()["peft"].items()) names.push_back(k);
  return names;
}

// PEFT folders: the same outputs as llama.cpp gives with the GGUF that its converter
// (convert_lora_to_gguf.py) made from the folder; a folder on the Hugging Face folder of the
// base gives bitwise what it gives on the GGUF base.
class LoraPeft : public ::testing::TestWithParam<std::string> {};

TEST_P(LoraPeft, EqualsLlamaCppOnTheConvertedAdapter) {
  ASSERT_EQ(files_error(), "");
  const std::string name = GetParam();
  const auto& peft = reference()["peft"];
  const auto& ref = peft[name];
  const auto& cases = ref.contains("same_as") ? peft[ref["same_as"].get<std::string>()] : ref;
  const std::string base = ref["base"].get<std::string>();
  auto m = load(base_path(base));
  ASSERT_NE(m, nullptr);
  auto adapter = m->load_lora(kDir + "/" + name);
  ASSERT_TRUE(adapter.is_ok()) << adapter.message();
  EXPECT_EQ((*adapter)->format(), "peft");
  EXPECT_EQ((*adapter)->max_rank(), ref["r"].get<int64_t>());
  // Each pair's scale as PEFT computes it: alpha / r (alpha / sqrt(r) with rslora), per module
  // rank from rank_pattern.
  const double alpha = ref["alpha"].get<double>();
  for (int64_t il = 0; il < 8; ++il)
    for (int t = 0; t < static_cast<int>(LoraTarget::kCount); ++t)
      if (const LoraPair* p = (*adapter)->find(il, static_cast<LoraTarget>(t))) {
        const double r = static_cast<double>(p->rank);
        EXPECT_FLOAT_EQ(p->scale, static_cast<float>(alpha / (ref["rslora"].get<bool>() ? std::sqrt(r) : r)))
            << name << " layer " << il << " target " << t;
      }
  for (const auto& [module, rank] : ref["rank_pattern"].items()) {
    const int64_t il = std::stoll(module.substr(std::string("model.layers.").size()));
    const LoraPair* p = (*adapter)->find(il, LoraTarget::kQ);
    ASSERT_NE(p, nullptr) << module;
    EXPECT_EQ(p->rank, rank.get<int64_t>()) << module;
  }
  LoraSet set{{LoraWeight{*adapter, ref["scale"].get<float>()}}};
  expect_llama_cpp(*m, set, cases, name);

  // The Hugging Face folder of the base with the same adapter: bitwise the GGUF's logits.
  auto folder = load(kDir + "/hf_" + base);
  ASSERT_NE(folder, nullptr);
  auto on_folder = folder->load_lora(kDir + "/" + name + "/adapter_config.json");
  ASSERT_TRUE(on_folder.is_ok()) << on_folder.message();
  LoraSet folder_set{{LoraWeight{*on_folder, ref["scale"].get<float>()}}};
  const auto seq = cases["cases"][2]["prompt"].get<std::vector<int32_t>>();
  EXPECT_EQ(logits_of(*m, seq, &set), logits_of(*folder, seq, &folder_set)) << name;
  // An adapter loaded for one model is refused by the other.
  const LoraSet* sets[1] = {&set};
  auto st = testing::make_state(*folder, 1, 64);
  ASSERT_TRUE(st.is_ok());
  Tensor h;
  std::vector<int32_t> one = {seq[0]};
  const int32_t row[1] = {0};
  Batch b{1, 1, one.data(), row};
  b.lora = sets;
  EXPECT_FALSE(folder->forward(b, *st, h).is_ok());
}

INSTANTIATE_TEST_SUITE_P(TinyPeftFolders, LoraPeft, ::testing::ValuesIn(peft_names()),
                         [](const auto& info) { return info.param; });

// Broken PEFT folders, each a copy of peft_llama_a_r4 with one thing changed.
TEST(Lora, BadPeftFoldersAreRefusedByName) {
  ASSERT_EQ(files_error(), "");
  auto llama = load(base_path("llama_a"));
  ASSERT_NE(llama, nullptr);
  const std::string good = kDir + "/peft_llama_a_r4";
  nlohmann::json config;
  {
    std::ifstream in(good + "/adapter_config.json");
    config = nlohmann::json::parse(in);
  }
  int n = 0;
  auto variant = [&](const std::function<void(nlohmann::json&)>& edit, bool weights = true) {
    const std::string dir = kDir + "/bad_peft_" + std::to_string(n++);
    fs::remove_all(dir);
    fs::create_directories(dir);
    nlohmann::json c = config;
    edit(c);
    std::ofstream(dir + "/adapter_config.json") << c.dump();
    if (weights) fs::copy_file(good + "/adapter_model.safetensors", dir + "/adapter_model.safetensors");
    return dir;
  };
  auto expect_error = [&](const std::string& path, const std::string& want) {
    auto a = llama->load_lora(path);
    ASSERT_FALSE(a.is_ok()) << path;
    EXPECT_NE(a.message().find(want), std::string::npos) << a.message();
  };
  // Another model's folder (qwen2_t: other widths).
  expect_error(kDir + "/peft_qwen2_t_r8", "(a PEFT adapter for another model?)");
  // Ranks the config does not give.
  expect_error(variant([](auto& c) { c["r"] = 8; }), "has rank 4, but adapter_config.json gives 'r' 8");
  expect_error(variant([](auto& c) { c["rank_pattern"] = {{"model.layers.2.mlp.up_proj", 2}}; }),
               "gives rank_pattern 'model.layers.2.mlp.up_proj' 2");
  expect_error(variant([](auto& c) { c["rank_pattern"] = {{"q_proj(", 2}}; }), "not a valid regular expression");
  expect_error(variant([](auto& c) { c["rank_pattern"] = {{"q_proj", 0}}; }), "ranks must be integers >= 1");
  // What specula does not apply.
  expect_error(variant([](auto& c) { c["use_dora"] = true; }), "DoRA");
  expect_error(variant([](auto& c) { c["modules_to_save"] = {"lm_head"}; }), "'modules_to_save' [\"lm_head\"]");
  expect_error(variant([](auto& c) { c["bias"] = "lora_only"; }), "'bias': 'lora_only' is not supported");
  expect_error(variant([](auto& c) { c["peft_type"] = "IA3"; }), "peft_type 'IA3' is not supported");
  expect_error(variant([](auto& c) { c["lora_alpha"] = "eight"; }), "'lora_alpha' must be");
  // alpha_pattern keys match in the file's order, as PEFT's get_pattern_key: "q_proj" comes
  // first and wins for layer 0's q_proj although the longer key also matches (and sorts first).
  {
    nlohmann::ordered_json c = nlohmann::ordered_json::parse(config.dump());
    c["alpha_pattern"] = nlohmann::ordered_json::object();
    c["alpha_pattern"]["q_proj"] = 32;
    c["alpha_pattern"]["model.layers.0.self_attn.q_proj"] = 8;
    const std::string dir = kDir + "/peft_alpha_order";
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir + "/adapter_config.json") << c.dump();
    fs::copy_file(good + "/adapter_model.safetensors", dir + "/adapter_model.safetensors");
    auto a = llama->load_lora(dir);
    ASSERT_TRUE(a.is_ok()) << a.message();
    EXPECT_FLOAT_EQ((*a)->find(0, LoraTarget::kQ)->scale, 32.0f / 4);
    EXPECT_FLOAT_EQ((*a)->find(0, LoraTarget::kK)->scale, 8.0f / 4);  // lora_alpha 8, rank 4
  }
  expect_error(variant([](auto& c) { c["alpha_pattern"] = {{std::string(300, 'x'), 2}}; }), "longer than 256 bytes");
  // Missing or other files.
  const std::string bin = variant([](auto&) {}, false);
  expect_error(bin, "no adapter_model.safetensors");
  std::ofstream(bin + "/adapter_model.bin") << "pickle";
  expect_error(bin, "adapter_model.bin (a PyTorch pickle) is not read");
  const std::string nothing = kDir + "/bad_peft_empty";
  fs::remove_all(nothing);
  fs::create_directories(nothing);
  expect_error(nothing, "no adapter_config.json");
  {
    std::ofstream(nothing + "/adapter_config.json") << "{\"r\": 4";
    std::ofstream(nothing + "/adapter_model.safetensors") << "x";
  }
  expect_error(nothing, "not valid JSON");
  // The model is unaffected.
  EXPECT_EQ(testing::greedy(*llama, {3, 4, 5}, 4).size(), 4u);
}

// 8 rows in one ragged batch: four adapters, a weighted mix of two, and two rows without;
// every row's hidden states equal its solo run bit for bit, prefill and decode.
TEST(Lora, RaggedBatchOfManyAdaptersEqualsEachRowAlone) {
  ASSERT_EQ(files_error(), "");
  auto m = load(base_path("llama_a"));
  ASSERT_NE(m, nullptr);
  const auto ad = llama_adapters(*m);
  ASSERT_EQ(ad.size(), 4u);
  const std::vector<LoraSet> sets = {
      {{{ad[0], 1.0f}}}, {{{ad[1], 0.5f}}}, {}, {{{ad[2], 1.0f}}}, {{{ad[3], 0.75f}}}, {{{ad[0], 0.5f}, {ad[2], 1.5f}}},
      {}, {{{ad[1], 2.0f}}},
  };
  const int32_t B = 8;
  const int64_t E = m->info().n_embd, V = m->info().n_vocab;
  std::mt19937 rng(17);
  std::vector<std::vector<int32_t>> prompts(B);
  for (int32_t b = 0; b < B; ++b) {
    prompts[b].resize(3 + static_cast<size_t>(b) * 4);
    for (auto& t : prompts[b]) t = 2 + static_cast<int32_t>(rng() % (V - 2));
  }
  // Solo: prefill then 3 decode steps of fixed tokens; the hidden state of every token.
  auto solo = [&](int32_t b, bool with_adapters = true) {
    auto st = testing::make_state(*m, 1, 256);
    EXPECT_TRUE(st.is_ok());
    const int32_t row[1] = {0};
    const LoraSet* s[1] = {with_adapters ? &sets[b] : nullptr};
    Tensor h;
    std::vector<float> out;
    Batch p{1, static_cast<int64_t>(prompts[b].size()), prompts[b].data(), row};
    p.lora = s;
    EXPECT_TRUE(m->forward(p, *st, h).is_ok());
    out.insert(out.end(), h.data(), h.data() + h.dim(0) * E);
    for (int step = 0; step < 3; ++step) {
      const int32_t tok = 5 + b + step;
      Batch d{1, 1, &tok, row};
      d.lora = s;
      EXPECT_TRUE(m->forward(d, *st, h).is_ok());
      out.insert(out.end(), h.data(), h.data() + E);
    }
    return out;
  };
  std::vector<std::vector<float>> want(B);
  for (int32_t b = 0; b < B; ++b) want[b] = solo(b);
  // Batched: one ragged prefill of all 8 rows (rows in another order than the sets), then decode.
  auto st = testing::make_state(*m, B, 256);
  ASSERT_TRUE(st.is_ok());
  std::vector<int32_t> rows(B), ids;
  std::vector<int64_t> n_tokens(B);
  std::vector<const LoraSet*> s(B);
  std::vector<std::vector<float>> got(B);
  for (int32_t b = 0; b < B; ++b) {
    rows[b] = B - 1 - b;
    n_tokens[b] = static_cast<int64_t>(prompts[b].size());
    ids.insert(ids.end(), prompts[b].begin(), prompts[b].end());
    s[b] = &sets[b];
  }
  Tensor h;
  Batch p{B, 0, ids.data(), rows.data(), n_tokens.data()};
  p.lora = s.data();
  ASSERT_TRUE(m->forward(p, *st, h).is_ok());
  int64_t off = 0;
  for (int32_t b = 0; b < B; ++b) {
    got[b].insert(got[b].end(), h.data() + off * E, h.data() + (off + n_tokens[b]) * E);
    off += n_tokens[b];
  }
  for (int step = 0; step < 3; ++step) {
    std::vector<int32_t> toks(B);
    for (int32_t b = 0; b < B; ++b) toks[b] = 5 + b + step;
    Batch d{B, 1, toks.data(), rows.data()};
    d.lora = s.data();
    ASSERT_TRUE(m->forward(d, *st, h).is_ok());
    for (int32_t b = 0; b < B; ++b) got[b].insert(got[b].end(), h.data() + b * E, h.data() + (b + 1) * E);
  }
  for (int32_t b = 0; b < B; ++b) EXPECT_EQ(got[b], want[b]) << "row " << b;
  // The adapters matter: a row with one differs from the same tokens without.
  EXPECT_NE(want[0], solo(0, false));
}

// Through the engine: 8 requests, 4 adapters, a mix and two without, batched on 8 rows, each
// equals the model's greedy run with its adapters; n-gram and draft-model speculation (the
// draft is the base model, run without adapters) give the same tokens; a prompt cache that
// holds the base model's state of the same prompts serves none of it to adapter requests.
TEST(Lora, EngineRequestsWithAdaptersEqualTheModelAlone) {
  ASSERT_EQ(files_error(), "");
  auto m = load(base_path("llama_a"));
  ASSERT_NE(m, nullptr);
  const auto ad = llama_adapters(*m);
  ASSERT_EQ(ad.size(), 4u);
  auto set = [](std::vector<LoraWeight> w) { return std::make_shared<const LoraSet>(LoraSet{std::move(w)}); };
  const std::vector<std::shared_ptr<const LoraSet>> sets = {
      set({{ad[0], 1.0f}}), set({{ad[1], 0.5f}}), nullptr,          set({{ad[2], 1.0f}}),
      set({{ad[3], 0.75f}}), set({{ad[0], 0.5f}, {ad[2], 1.5f}}), set({}), set({{ad[1], 2.0f}}),
  };
  const int32_t V = static_cast<int32_t>(m->info().n_vocab);
  std::vector<EngineRequest> reqs;
  for (int copy = 0; copy < 2; ++copy)
    for (EngineRequest r : repeating_requests(V, 12)) {
      r.sampling.temperature = 0.0f;
      reqs.push_back(r);
    }
  std::vector<std::vector<int32_t>> want;
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].lora = sets[i];
    want.push_back(testing::greedy(*m, reqs[i].prompt, 12, {}, sets[i].get()));
  }
  // Request 0 (an adapter) and the base model on the same prompt differ.
  EXPECT_NE(want[0], testing::greedy(*m, reqs[0].prompt, 12)) << "the adapter changes nothing";
  auto plain = speculative_engine(*m, 8, nullptr);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(run_all(*plain, reqs), want);
  auto ngram = speculative_engine(*m, 8, make_ngram_draft(), 4);
  ASSERT_NE(ngram, nullptr);
  EXPECT_EQ(run_all(*ngram, reqs), want);
  auto dm = load(base_path("llama_a"));
  ASSERT_NE(dm, nullptr);
  auto draft = make_model_draft(std::move(dm), 256);
  ASSERT_TRUE(draft.is_ok()) << draft.message();
  auto drafted = speculative_engine(*m, 8, std::shared_ptr<DraftSource>(std::move(draft).value()), 4);
  ASSERT_NE(drafted, nullptr);
  EXPECT_EQ(run_all(*drafted, reqs), want);
  // The prompt cache: the base model's states of these prompts are cached first.
  PromptCacheOptions po;
  po.ram_bytes = int64_t{1} << 28;
  po.fingerprint = "lora-test";
  std::shared_ptr<PromptCache> pc(PromptCache::create(po).value());
  EngineOptions o;
  o.n_rows = 8;
  o.n_ctx = 256;
  o.step_tokens = 64;
  o.prompt_cache = pc;
  auto cached = Engine::create(*m, o);
  ASSERT_TRUE(cached.is_ok()) << cached.message();
  std::vector<EngineRequest> base = reqs;
  for (auto& r : base) r.lora = nullptr;
  run_all(**cached, base);
  const int64_t entries_before = pc->stats().ram_entries;
  std::vector<RequestSummary> sums;
  EXPECT_EQ(run_all(**cached, reqs, &sums), want);
  // ... the adapter requests found none of the base model's states (each set has a cache of
  // its own), and stored nothing in the base model's cache.
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (has_lora(reqs[i])) {
      EXPECT_EQ(sums[i].cached_tokens, 0) << "request " << i;
    }
  }
  std::vector<EngineRequest> only_lora;
  std::vector<std::vector<int32_t>> want_lora;
  for (size_t i = 0; i < reqs.size(); ++i)
    if (has_lora(reqs[i])) {
      only_lora.push_back(reqs[i]);
      want_lora.push_back(want[i]);
    }
  const int64_t entries_mid = pc->stats().ram_entries;
  EXPECT_GE(entries_mid, entries_before);
  // Again: each adapter request now starts from its own set's cached state, and its tokens
  // are those of a cold run.
  std::vector<RequestSummary> again;
  EXPECT_EQ(run_all(**cached, only_lora, &again), want_lora);
  for (size_t k = 0; k < only_lora.size(); ++k) EXPECT_GT(again[k].cached_tokens, 0) << "adapter request " << k;
  EXPECT_EQ(pc->stats().ram_entries, entries_mid) << "adapter requests stored entries in the base model's cache";
  // The same adapter at another scale is another set: no hit, and the cold answer.
  EngineRequest rescaled = reqs[0];
  rescaled.lora = set({{ad[0], 0.25f}});
  std::vector<RequestSummary> one;
  EXPECT_EQ(run_all(**cached, {rescaled}, &one),
            std::vector<std::vector<int32_t>>{testing::greedy(*m, rescaled.prompt, 12, {}, rescaled.lora.get())});
  EXPECT_EQ(one[0].cached_tokens, 0);
  // An adapter loaded for another model instance is refused at submission.
  auto other = load(base_path("llama_a"));
  auto foreign = other->load_lora(lora_path("llama_a_r4"));
  ASSERT_TRUE(foreign.is_ok());
  EngineRequest bad = reqs[0];
  bad.lora = set({{*foreign, 1.0f}});
  Submission sub = plain->submit(bad, std::make_shared<CollectSink>());
  EXPECT_FALSE(sub.ok());
  EXPECT_NE(sub.status.message().find("not loaded for this engine's model"), std::string::npos) << sub.status.message();
}

// Bad adapters: each refused with an error naming the problem; the model still runs.
TEST(Lora, BadAdaptersAreRefusedByName) {
  ASSERT_EQ(files_error(), "");
  auto llama = load(base_path("llama_a"));
  ASSERT_NE(llama, nullptr);
  auto expect_error = [&](const std::string& path, const std::string& want) {
    auto a = llama->load_lora(path);
    ASSERT_FALSE(a.is_ok()) << path;
    EXPECT_NE(a.message().find(want), std::string::npos) << a.message();
  };
  // Another architecture's adapter; a model file; a missing file.
  expect_error(lora_path("qwen3_b_r4"), "an adapter for 'qwen3', but the model is 'llama'");
  expect_error(base_path("llama_a"), "not a LoRA adapter");
  expect_error(kDir + "/no_such_adapter.gguf", "no_such_adapter.gguf");
  // Same architecture, other shapes: gemma2_a's adapter renamed to llama would not fit; write
  // broken adapters with the gguf package instead (a missing lora_b, a wrong rank, a tensor
  // that adapts nothing, no alpha but NaN alpha).
  const std::string src = fs::path(SPECULA_FIXTURES_DIR).parent_path().parent_path().string();
  const std::string script = kDir + "/bad_adapters.py";
  {
    std::ofstream py(script);
    py << R"PY(
import sys
import numpy as np
import gguf
out = sys.argv[1]
def write(name, tensors, alpha=8.0, arch="llama"):
    w = gguf.GGUFWriter(f"{out}/bad_{name}.gguf", arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", alpha)
    for n, t in tensors.items():
        w.add_tensor(n, t.astype(np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
A = np.ones((4, 64)); B = np.ones((128, 4))
write("no_b", {"blk.0.attn_q.weight.lora_a": A})
write("rank", {"blk.0.attn_q.weight.lora_a": A, "blk.0.attn_q.weight.lora_b": np.ones((128, 5))})
write("shape", {"blk.0.attn_q.weight.lora_a": np.ones((4, 65)), "blk.0.attn_q.weight.lora_b": B})
write("nothing", {"blk.9.attn_q.weight.lora_a": A, "blk.9.attn_q.weight.lora_b": B})
write("embd", {"token_embd.weight.lora_a": A, "token_embd.weight.lora_b": B})
write("nan", {"blk.0.attn_q.weight.lora_a": A, "blk.0.attn_q.weight.lora_b": B}, alpha=float("nan"))
write("other", {"blk.0.attn_q.weight": A})
)PY";
  }
  ASSERT_EQ(std::system(("python3 '" + script + "' '" + kDir + "'").c_str()), 0) << src;
  expect_error(kDir + "/bad_no_b.gguf", "'blk.0.attn_q.weight.lora_a' has no 'blk.0.attn_q.weight.lora_b'");
  expect_error(kDir + "/bad_rank.gguf", "lora_a must be [64, rank] and lora_b [rank, 128]");
  expect_error(kDir + "/bad_shape.gguf", "got [65, 4] and [4, 128]");
  expect_error(kDir + "/bad_nothing.gguf", "adapts 'blk.9.attn_q.weight', which is not an adaptable weight");
  expect_error(kDir + "/bad_embd.gguf", "'token_embd.weight', which is not an adaptable weight");
  expect_error(kDir + "/bad_nan.gguf", "adapter.lora.alpha is not a finite number");
  expect_error(kDir + "/bad_other.gguf", "neither a .lora_a nor a .lora_b");
  // The model is unaffected.
  EXPECT_EQ(testing::greedy(*llama, {3, 4, 5}, 4).size(), 4u);
}

}  // namespace
}  // namespace specula
