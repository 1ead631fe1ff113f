// Engine tests across cache layouts (state/) on the real default model, Gemma 3 270M,
// whose sliding-window layers are rings of 512:
//  * speculative decoding is lossless on every layout: n-gram and draft-model speculation
//    give exactly the plain tokens at B = 1 and 4, greedy and seeded sampling, for f16,
//    q8_0, q4_0, turbo4/turbo3 and delayed q4_0 — with 470-485-token prompts, so decoding
//    crosses the ring's wrap while drafts are rejected and rolled back;
//  * membership: rows admitted, retired, extracted and re-inserted mid-generation decode
//    exactly as they do alone;
//  * the KV budget: a request that does not fit waits (running rows unaffected), one that
//    can never fit is refused at submit, and the budget is reported;
//  * engine/ names no cache layout and no model family (a source check).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "engine/engine.h"
#include "decoding/draft.h"
#include "../test_util.h"
#include "engine_test_util.h"

namespace specula {
namespace {

class LayoutsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!testing::default_model_present()) return;
    auto m = load_model(testing::default_model_path());
    ASSERT_TRUE(m.is_ok()) << m.message();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    if (model_ == nullptr) GTEST_SKIP() << "model not found: " << testing::default_model_path();
  }
  static std::unique_ptr<Engine> engine(const CacheOptions& cache, int32_t rows, std::shared_ptr<DraftSource> draft = nullptr,
                                        int64_t kv_budget = 0) {
    EngineOptions o;
    o.cache = cache;
    o.draft = std::move(draft);
    o.spec_depth = 5;
    o.n_rows = rows;
    o.n_ctx = 600;
    o.step_tokens = 256;
    o.kv_budget = kv_budget;
    auto e = Engine::create(*model_, o);
    EXPECT_TRUE(e.is_ok()) << e.message();
    return std::move(e).value();
  }
  // ~470-token prompts built from a repeated phrase: the n-gram source proposes a lot
  // (some of it wrong); max_tokens takes decoding past position 512.
  static std::vector<EngineRequest> requests(float temperature) {
    std::vector<EngineRequest> reqs;
    for (int i = 0; i < 4; ++i) {
      std::mt19937 rng(70 + i);
      std::vector<int32_t> phrase;
      for (int k = 0; k < 11 + 3 * i; ++k) phrase.push_back(1000 + static_cast<int32_t>(rng() % 30000));
      EngineRequest r;
      r.prompt = {2};
      while (r.prompt.size() < static_cast<size_t>(470 + 5 * i)) r.prompt.insert(r.prompt.end(), phrase.begin(), phrase.end());
      r.max_tokens = 48 + 2 * i;
      r.ignore_eos = true;
      r.sampling.temperature = temperature;
      r.sampling.seed = 4000 + i;
      reqs.push_back(r);
    }
    return reqs;
  }
  static Model* model_;
};
Model* LayoutsTest::model_ = nullptr;

CacheOptions cache(const std::string& k, const std::string& v, int64_t delay = 0) {
  CacheOptions o;
  o.type_k = k;
  o.type_v = v;
  o.delay = delay;
  return o;
}

struct LayoutCase {
  const char* name;
  CacheOptions cache;
  bool sampled;   // also check seeded sampling (T = 0.8)
  bool solo_spec; // also check n-gram speculation at B = 1
};

void PrintTo(const LayoutCase& c, std::ostream* os) { *os << c.name; }

class SpeculationOnLayout : public LayoutsTest, public ::testing::WithParamInterface<LayoutCase> {};

TEST_P(SpeculationOnLayout, IsLossless) {
  const LayoutCase& lc = GetParam();
  const std::string name = lc.name;
  const CacheOptions& c = lc.cache;
  std::vector<float> temperatures = {0.0f};
  if (lc.sampled) temperatures.push_back(0.8f);
  for (float temperature : temperatures) {
    const auto reqs = requests(temperature);
    std::vector<std::vector<int32_t>> plain;
    {
      auto e = engine(c, 1);
      for (const auto& r : reqs) plain.push_back(run_all(*e, {r})[0]);
    }
    for (size_t i = 0; i < plain.size(); ++i)
      ASSERT_GT(reqs[i].prompt.size() + plain[i].size(), 512u) << name << ": decoding does not cross position 512";
    if (lc.solo_spec) {
      auto e = engine(c, 1, make_ngram_draft());
      std::vector<std::vector<int32_t>> b1;
      for (const auto& r : reqs) b1.push_back(run_all(*e, {r})[0]);
      EXPECT_EQ(b1, plain) << name << " n-gram B=1, temperature " << temperature;
    }
    auto e4 = engine(c, 4, make_ngram_draft());
    EXPECT_EQ(run_all(*e4, reqs), plain) << name << " n-gram B=4, temperature " << temperature;
    const EngineStats st = e4->stats();
    EXPECT_GT(st.accepted, 0u) << name;
    EXPECT_LT(st.accepted, st.drafted) << name << ": no draft was rejected, rollback untested";
    // The model drafting for itself from a q4_0 cache: close to the target, not equal,
    // so drafts are both accepted and rejected.
    auto dm = load_model(testing::default_model_path());
    ASSERT_TRUE(dm.is_ok());
    auto d = make_model_draft(std::move(dm).value(), 600, cache("q4_0", "q4_0"));
    ASSERT_TRUE(d.is_ok()) << d.message();
    auto ed = engine(c, 4, std::shared_ptr<DraftSource>(std::move(d).value()));
    EXPECT_EQ(run_all(*ed, reqs), plain) << name << " draft model B=4, temperature " << temperature;
    std::printf("[layouts] %-14s T=%.1f n-gram %llu/%llu accepted, draft model %llu/%llu\n", name.c_str(),
                temperature, static_cast<unsigned long long>(st.accepted),
                static_cast<unsigned long long>(st.drafted),
                static_cast<unsigned long long>(ed->stats().accepted),
                static_cast<unsigned long long>(ed->stats().drafted));
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllLayouts, SpeculationOnLayout,
    ::testing::Values(LayoutCase{"f16", cache("f16", "f16"), true, true},
                      LayoutCase{"q8_0", cache("q8_0", "q8_0"), false, false},
                      LayoutCase{"q4_0", cache("q4_0", "q4_0"), false, false},
                      LayoutCase{"turbo4_turbo3", cache("turbo4", "turbo3"), false, true},
                      LayoutCase{"q4_0_delay24", cache("q4_0", "q4_0", 24), true, false}),
    [](const ::testing::TestParamInfo<LayoutCase>& i) { return std::string(i.param.name); });

// Greedy decoding driven by hand over one StateRows: rows join, leave, are extracted and
// re-inserted between steps; every row's tokens equal its solo run.
TEST_F(LayoutsTest, MembershipChangesKeepEveryRowExact) {
  const int64_t V = model_->info().n_vocab, E = model_->info().n_embd;
  auto argmax = [&](const float* l) { return static_cast<int32_t>(std::max_element(l, l + V) - l); };
  struct Seq {
    std::vector<int32_t> prompt, out;
  };
  std::vector<Seq> seqs(4);
  for (int i = 0; i < 4; ++i) {
    std::mt19937 rng(200 + i);
    seqs[i].prompt = {2};
    for (int k = 0; k < 30 + 20 * i; ++k) seqs[i].prompt.push_back(1000 + static_cast<int32_t>(rng() % 100000));
  }
  const int kSteps = 24;
  for (const CacheOptions& c : {cache("f16", "f16"), cache("q8_0", "turbo3", 8)}) {
    // Solo runs.
    std::vector<std::vector<int32_t>> solo;
    for (const Seq& s : seqs) {
      auto st = testing::make_state(*model_, 1, 256, c);
      ASSERT_TRUE(st.is_ok()) << st.message();
      Tensor h;
      std::vector<float> logits(V);
      const int32_t row[1] = {0};
      ASSERT_TRUE(model_->forward(Batch{1, static_cast<int64_t>(s.prompt.size()), s.prompt.data(), row}, *st, h).is_ok());
      model_->project_logits(h.data() + (h.dim(0) - 1) * E, 1, logits.data());
      std::vector<int32_t> out = {argmax(logits.data())};
      for (int k = 1; k < kSteps; ++k) {
        ASSERT_TRUE(model_->forward(Batch{1, 1, &out.back(), row}, *st, h).is_ok());
        model_->project_logits(h.data(), 1, logits.data());
        out.push_back(argmax(logits.data()));
      }
      solo.push_back(out);
    }
    // Together, with membership changes between steps.
    auto st = new_state(*model_, c, 256);
    ASSERT_TRUE(st.is_ok());
    std::vector<int> who;                         // state row -> sequence
    std::vector<std::vector<int32_t>> got(4);
    std::vector<float> logits;
    Tensor h;
    auto admit = [&](int i) {  // prefill sequence i in its own row
      ASSERT_TRUE(st->reserve(1).is_ok());
      const int32_t r = st->insert(st->new_row().value());
      who.push_back(i);
      const int32_t row[1] = {r};
      ASSERT_TRUE(model_->forward(Batch{1, static_cast<int64_t>(seqs[i].prompt.size()), seqs[i].prompt.data(), row}, *st, h).is_ok());
      logits.resize(V);
      model_->project_logits(h.data() + (h.dim(0) - 1) * E, 1, logits.data());
      got[i].push_back(argmax(logits.data()));
    };
    admit(0);
    admit(1);
    RowState parked;
    int parked_seq = -1;
    for (int step = 0; step < 60; ++step) {
      if (step == 3) admit(2);
      if (step == 6) {  // extract sequence 1 and retire its row
        const int32_t r = static_cast<int32_t>(std::find(who.begin(), who.end(), 1) - who.begin());
        auto ex = st->extract(r);
        ASSERT_TRUE(ex.is_ok());
        parked = std::move(ex).value();
        parked_seq = 1;
        std::vector<int32_t> keep;
        std::vector<int> who2;
        for (int32_t k = 0; k < st->n_rows(); ++k)
          if (k != r) keep.push_back(k), who2.push_back(who[k]);
        st->filter(keep);
        who = who2;
      }
      if (step == 9) admit(3);
      if (step == 12) {  // re-insert sequence 1
        ASSERT_TRUE(st->reserve(1).is_ok());
        st->insert(std::move(parked));
        who.push_back(parked_seq);
      }
      // One decode step for every row that still needs tokens.
      std::vector<int32_t> rows, ids;
      std::vector<int> seq_of;
      for (int32_t r = 0; r < st->n_rows(); ++r) {
        const int i = who[r];
        if (static_cast<int>(got[i].size()) >= kSteps) continue;
        rows.push_back(r);
        ids.push_back(got[i].back());
        seq_of.push_back(i);
      }
      if (rows.empty()) break;
      ASSERT_TRUE(model_->forward(Batch{static_cast<int32_t>(rows.size()), 1, ids.data(), rows.data()}, *st, h).is_ok());
      logits.resize(rows.size() * V);
      model_->project_logits(h.data(), static_cast<int64_t>(rows.size()), logits.data());
      for (size_t k = 0; k < rows.size(); ++k) got[seq_of[k]].push_back(argmax(logits.data() + k * V));
    }
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i], solo[i]) << "sequence " << i << " with " << c.type_k << "/" << c.type_v;
  }
}

TEST_F(LayoutsTest, AdmissionWaitsForTheKvBudget) {
  const CacheOptions c = cache("q8_0", "q8_0");
  auto probe = engine(c, 4);
  const int64_t one = probe->bytes_for(300);  // what a 300-token request reserves
  probe.reset();
  // Room for one such request at a time (but not two).
  auto e = engine(c, 4, nullptr, one + one / 2);
  EXPECT_EQ(e->stats().kv_budget, one + one / 2);
  EngineRequest r;
  r.prompt.assign(40, 0);
  r.prompt[0] = 2;
  for (size_t i = 1; i < r.prompt.size(); ++i) r.prompt[i] = 1000 + static_cast<int32_t>(i * 37);
  r.max_tokens = 260;
  r.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  const auto alone = run_all(*e, {r});
  auto s1 = std::make_shared<CollectSink>(), s2 = std::make_shared<CollectSink>();
  ASSERT_TRUE(e->submit(r, s1).handle);
  ASSERT_TRUE(e->submit(r, s2).handle);
  ASSERT_TRUE(s1->wait(300) && s2->wait(300));
  EXPECT_EQ(s1->tokens, alone[0]);
  EXPECT_EQ(s2->tokens, alone[0]);
  // The second waited for the first (its queue time covers the first's decoding).
  EXPECT_GT(s2->summary.queue_seconds, 0.5 * s1->summary.decode_seconds);
  // A request larger than the whole budget is refused at once, naming the budget.
  EngineRequest big = r;
  big.max_tokens = 550;
  Submission sub = e->submit(big, std::make_shared<CollectSink>());
  EXPECT_EQ(sub.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(sub.status.message().find("budget"), std::string::npos) << sub.status.message();
  EXPECT_EQ(e->stats().kv_reserved, 0);
}

TEST(EngineLayering, EngineNamesNoLayoutOrModelFamily) {
  const std::filesystem::path src = std::filesystem::path(SPECULA_FIXTURES_DIR).parent_path().parent_path() / "src" / "engine";
  ASSERT_TRUE(std::filesystem::exists(src)) << src;
  int files = 0;
  for (const auto& f : std::filesystem::directory_iterator(src)) {
    std::ifstream in(f.path());
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    for (char& ch : text) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    for (const char* word : {"gemma", "qwen", "mistral", "kvlayout", "kv_layout", "recurrentlayout", "kvcodec", "turbo", "q8_0"})
      EXPECT_EQ(text.find(word), std::string::npos) << f.path() << " names '" << word << "'";
    ++files;
  }
  EXPECT_GE(files, 4);
}

}  // namespace
}  // namespace specula
