// tests/engine/fault_injection_test.cpp — the engine's failure rules under injected faults
// (core/fault.h), on the default model (Gemma 3 270M):
//   - a state failure (begin, forward, resolve) fails every member of the round's group —
//     also a row that had ended earlier in the same step (the resolve hole: such a row was
//     reported as a normal stop and its untrusted state published to the prompt cache) — and
//     nothing of the group reaches the prompt cache;
//   - a consumer's failure (delivery) or a grammar's (mask) ends only that request;
//   - a draft source's failure (propose, commit) and the cache's (extract, disk write) cost
//     only speed or the cache;
//   - randomized: faults at every point, at random steps of a busy engine (plain and n-gram
//     speculative rows, f16 and q8_0 KV, seeded sampling and greedy, constrained rows, the
//     same prompt twice at once as n > 1 does, a prompt cache in RAM and on disk): every
//     request ends; one that succeeds produces exactly its solo tokens; rows, reservations
//     and the queue go back to idle; afterwards, with faults off, every request answered
//     from the (possibly warm) prompt cache equals its cold run.
// Oracle: the same requests run one at a time on a fault-free engine without a cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <random>

#include "../test_util.h"
#include "core/fault.h"
#include "decoding/draft.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "grammar/constraint.h"
#include "state/prompt_cache.h"

namespace specula {
namespace {

// Fails each point with its probability (or on a chosen call), counting what it did.
struct Injector {
  std::mutex mu;
  std::mt19937_64 rng{1};
  double p[fault::kPoints] = {};
  int64_t calls[fault::kPoints] = {}, fired[fault::kPoints] = {};
  int64_t fail_call[fault::kPoints];  // fail exactly this call (1-based) of a point; -1: none
  Injector() { std::fill(std::begin(fail_call), std::end(fail_call), -1); }
  static bool hook(fault::Point pt, void* user) {
    auto* self = static_cast<Injector*>(user);
    std::lock_guard<std::mutex> lock(self->mu);
    const int i = static_cast<int>(pt);
    ++self->calls[i];
    const bool fire = self->calls[i] == self->fail_call[i] ||
                      (self->p[i] > 0 && std::uniform_real_distribution<double>(0, 1)(self->rng) < self->p[i]);
    if (fire) ++self->fired[i];
    return fire;
  }
  int64_t total_fired() {
    std::lock_guard<std::mutex> lock(mu);
    int64_t n = 0;
    for (int64_t f : fired) n += f;
    return n;
  }
};

struct HookScope {
  explicit HookScope(Injector& in) { fault::set_hook(&Injector::hook, &in); }
  ~HookScope() { fault::set_hook(nullptr, nullptr); }
};

class FaultInjectionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!testing::default_model_present()) return;
    auto m = load_model(testing::default_model_path());
    ASSERT_TRUE(m.is_ok()) << m.message();
    model_ = std::move(m).value().release();
    tok_ = testing::default_tokenizer().release();
    auto g = GrammarVocab::create(*tok_, static_cast<int32_t>(model_->info().n_vocab), std::vector<int32_t>{1, 106});
    ASSERT_TRUE(g.is_ok()) << g.message();
    vocab_ = new std::shared_ptr<const GrammarVocab>(std::move(g).value());
  }
  static void TearDownTestSuite() {
    delete vocab_;
    delete tok_;
    delete model_;
    vocab_ = nullptr;
    tok_ = nullptr;
    model_ = nullptr;
  }
  void SetUp() override {
    if (model_ == nullptr) GTEST_SKIP() << "model not found: " << testing::default_model_path();
  }

  // With a folder: disk only (every entry is a file: the disk tier's writes and reads).
  static std::shared_ptr<PromptCache> cache(const std::string& dir = "") {
    PromptCacheOptions po;
    po.ram_bytes = dir.empty() ? int64_t{256} << 20 : 0;
    po.dir = dir;
    po.disk_bytes = dir.empty() ? 0 : int64_t{256} << 20;
    po.fingerprint = "fault-test";
    auto pc = PromptCache::create(po);
    EXPECT_TRUE(pc.is_ok()) << pc.message();
    return std::shared_ptr<PromptCache>(std::move(pc).value());
  }
  static std::unique_ptr<Engine> engine(int32_t rows, std::shared_ptr<PromptCache> pc, const std::string& kv = "f16",
                                        bool speculative = false, Model* model = nullptr) {
    EngineOptions o;
    o.n_rows = rows;
    o.n_ctx = 256;
    o.step_tokens = 48;  // prompts prefill over several steps, beside decoding rows
    o.max_queue = 64;
    o.eog_ids = {1, 106};
    o.cache.type_k = o.cache.type_v = kv;
    o.prompt_cache = std::move(pc);
    o.cache_checkpoint_every = 32;
    if (speculative) {
      o.draft = make_ngram_draft();
      o.spec_depth = 4;
    }
    auto e = Engine::create(model != nullptr ? *model : *model_, o);
    EXPECT_TRUE(e.is_ok()) << e.message();
    return std::move(e).value();
  }

  // A pool of request specs: prompts sharing prefixes (so the cache has something to serve),
  // greedy and seeded, some constrained to a regex.
  struct Spec {
    std::vector<int32_t> prompt;
    int32_t max_tokens;
    float temperature;
    uint64_t seed;
    bool constrained;
  };
  // vocab > 0: a model of that many ids (prompt ids below it, no grammar: its vocabulary
  // has no text).
  static std::vector<Spec> pool(int32_t vocab = 0) {
    std::vector<Spec> out;
    std::mt19937 rng(7);
    std::vector<int32_t> base = {2};
    for (int i = 0; i < 70; ++i)
      base.push_back(vocab > 0 ? 5 + static_cast<int32_t>(rng() % (vocab - 10)) : 1000 + static_cast<int32_t>(rng() % 50000));
    for (int k = 0; k < 12; ++k) {
      Spec s;
      s.prompt.assign(base.begin(), base.begin() + 20 + 4 * k);
      for (int i = 0; i < k % 3; ++i) s.prompt.push_back(vocab > 0 ? 3 + k + i : 3000 + k * 7 + i);
      s.max_tokens = 4 + (k * 5) % 9;
      s.temperature = k % 2 ? 0.9f : 0.0f;
      s.seed = 100 + static_cast<uint64_t>(k);
      s.constrained = vocab == 0 && k % 4 == 3;
      out.push_back(std::move(s));
    }
    return out;
  }
  static EngineRequest request(const Spec& s) {
    EngineRequest r;
    r.prompt = s.prompt;
    r.max_tokens = s.max_tokens;
    r.sampling.temperature = s.temperature;
    r.sampling.seed = s.seed;
    r.ignore_eos = !s.constrained;
    if (s.constrained) {
      ConstraintSpec spec;
      spec.kind = ConstraintKind::kRegex;
      spec.text = "[a-z]{1,4}( [a-z]{1,4}){0,6}";
      auto c = TokenConstraint::create(*vocab_, spec);
      EXPECT_TRUE(c.is_ok()) << c.message();
      r.constraint = std::shared_ptr<TokenConstraint>(std::move(c).value());
    }
    return r;
  }
  // Each spec run alone on a fault-free engine without a cache (KV type `kv`).
  static std::vector<std::vector<int32_t>> solo(const std::vector<Spec>& specs, const std::string& kv = "f16",
                                                Model* model = nullptr) {
    auto e = engine(1, nullptr, kv, false, model);
    std::vector<std::vector<int32_t>> out;
    for (const Spec& s : specs) out.push_back(run_all(*e, {request(s)})[0]);
    return out;
  }
  // The process's threads (/proc/self/task): engines, mask workers and cache writers that
  // ended leave none behind.
  static size_t thread_count() {
    size_t n = 0;
    for ([[maybe_unused]] const auto& t : std::filesystem::directory_iterator("/proc/self/task")) ++n;
    return n;
  }
  static void expect_idle(Engine& e, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    EngineStats st = e.stats();
    while ((st.running_rows != 0 || st.queue_depth != 0 || st.kv_reserved != 0) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      st = e.stats();
    }
    EXPECT_EQ(st.running_rows, 0) << what;
    EXPECT_EQ(st.queue_depth, 0) << what;
    EXPECT_EQ(st.kv_reserved, 0) << what;
  }

// Faults at random moments of a busy engine on `model` until `want_faults` have fired
  // (KV types `kvs` in turn; speculative in two configurations of three; every fourth with a
  // disk-only prompt cache).
  static void randomized(Model* model, const std::vector<Spec>& specs, const std::vector<std::string>& kvs,
                  int64_t want_faults, const std::string& label) {
    const size_t threads_before = thread_count();
    std::map<std::string, std::vector<std::vector<int32_t>>> cold_by_kv;
    for (const std::string& kv : kvs) cold_by_kv[kv] = solo(specs, kv, model);
    const std::string dir = (std::filesystem::temp_directory_path() / ("specula_fault_test_" + label)).string();
    std::filesystem::remove_all(dir);
    uint64_t seed = 20261203;
    if (const char* s = std::getenv("SPECULA_FAULT_SEED")) seed = std::strtoull(s, nullptr, 10);
    std::mt19937_64 rng(seed);
    Injector in;
    in.rng.seed(seed);
    const double kGroup = 0.015, kOther = 0.06;
    for (fault::Point pt : {fault::Point::kForward, fault::Point::kBegin, fault::Point::kResolve}) in.p[static_cast<int>(pt)] = kGroup;
    for (fault::Point pt : {fault::Point::kMask, fault::Point::kDraftPropose, fault::Point::kDraftCommit,
                            fault::Point::kDeliver, fault::Point::kCacheExtract, fault::Point::kCacheWrite})
      in.p[static_cast<int>(pt)] = kOther;
    in.p[static_cast<int>(fault::Point::kCacheWrite)] = 0.5;  // (few writes: each entry is written once)
    int64_t requests = 0, succeeded = 0, failed = 0, rounds = 0;
    for (int cfg = 0; in.total_fired() < want_faults && cfg < 60; ++cfg) {
      const std::string kv = kvs[static_cast<size_t>(cfg) % kvs.size()];
      const bool spec = cfg % 3 != 0;
      auto pc = cache(cfg % 4 == 0 ? dir + "/" + std::to_string(cfg) : "");
      auto e = engine(4, pc, kv, spec, model);
      const auto& cold = cold_by_kv.at(kv);
      for (int batch = 0; batch < 6 && in.total_fired() < want_faults; ++batch, ++rounds) {
        std::vector<size_t> pick;
        for (int i = 0; i < 6; ++i) pick.push_back(rng() % specs.size());
        pick.push_back(pick[0]);  // the same request twice at once (n > 1's choices share a prompt)
        std::vector<EngineRequest> reqs;
        for (size_t k : pick) reqs.push_back(request(specs[k]));
        std::vector<RequestSummary> sums;
        std::vector<std::vector<int32_t>> got;
        {
          HookScope hook(in);
          got = run_all(*e, reqs, &sums);
        }
        for (size_t i = 0; i < pick.size(); ++i) {
          ++requests;
          if (sums[i].outcome == Outcome::kFailed) {
            ++failed;
            EXPECT_FALSE(sums[i].error.empty());
          } else {
            ++succeeded;
            ASSERT_EQ(got[i], cold[pick[i]]) << "config " << cfg << " (" << kv << (spec ? ", speculative" : "")
                                             << ") request " << pick[i] << ": a request that succeeded differs from "
                                             << "its solo run";
          }
        }
        if (cfg % 4 == 0) (void)pc->flush();  // (the disk tier's writes, now)
        expect_idle(*e, "config " + std::to_string(cfg));
      }
      // Faults off: whatever the cache kept serves exactly the cold answers.
      const auto warm = run_all(*e, [&] {
        std::vector<EngineRequest> all;
        for (const Spec& s : specs) all.push_back(request(s));
        return all;
      }());
      for (size_t k = 0; k < specs.size(); ++k)
        ASSERT_EQ(warm[k], cold[k]) << "config " << cfg << ": request " << k << " from the prompt cache differs";
      expect_idle(*e, "config " + std::to_string(cfg) + " after");
    }
    std::string counts;
    for (int i = 0; i < fault::kPoints; ++i)
      counts += std::string(i ? ", " : "") + fault::point_name(static_cast<fault::Point>(i)) + " " +
                std::to_string(in.fired[i]) + "/" + std::to_string(in.calls[i]);
    std::printf("[fault injection] %s, seed %llu: %lld faults (%s); %lld rounds, %lld requests: %lld succeeded = solo, "
                "%lld failed\n",
                label.c_str(), static_cast<unsigned long long>(seed), static_cast<long long>(in.total_fired()), counts.c_str(),
                static_cast<long long>(rounds), static_cast<long long>(requests), static_cast<long long>(succeeded),
                static_cast<long long>(failed));
    EXPECT_GE(in.total_fired(), want_faults);
    EXPECT_EQ(thread_count(), threads_before) << "threads left behind";
    for (int i = 0; i < fault::kPoints; ++i) {
      if (in.calls[i] > 0 || label == "gemma3") {
        EXPECT_GT(in.fired[i], 0) << fault::point_name(static_cast<fault::Point>(i));
      }
    }
    std::filesystem::remove_all(dir);
  }

  static inline Model* model_ = nullptr;
  static inline tokenizer::Tokenizer* tok_ = nullptr;
  static inline std::shared_ptr<const GrammarVocab>* vocab_ = nullptr;
};

// The resolve hole: a row that ends (max_tokens) in a step whose resolve fails was reported
// as a normal finish and its untrusted state cached. Now it fails with the group.
TEST_F(FaultInjectionTest, ResolveFailureFailsRowsThatEndedInTheStep) {
  auto pc = cache();
  auto e = engine(2, pc);
  const auto specs = pool();
  EngineRequest a = request(specs[0]), b = request(specs[1]);
  a.max_tokens = 2;  // ends in the second decode step: the third resolve (the first is the prefill's)
  b.max_tokens = 12;
  Injector in;
  in.fail_call[static_cast<int>(fault::Point::kResolve)] = 3;
  std::vector<RequestSummary> sums;
  {
    HookScope hook(in);
    run_all(*e, {a, b}, &sums);
  }
  ASSERT_EQ(in.fired[static_cast<int>(fault::Point::kResolve)], 1);
  EXPECT_EQ(sums[0].outcome, Outcome::kFailed) << "a row that ended in the failed step";
  EXPECT_EQ(sums[1].outcome, Outcome::kFailed);
  EXPECT_NE(sums[0].error.find("rollback failed"), std::string::npos) << sums[0].error;
  // Nothing of the failed step was published: a request that extends a's prompt and answer
  // finds at most a's prompt in the cache (a state from before the step), never a's
  // finished state (the step's).
  const auto cold = solo({specs[0], specs[1]});
  EngineRequest ext = request(specs[0]);
  ext.prompt.insert(ext.prompt.end(), cold[0].begin(), cold[0].begin() + 2);
  ext.prompt.push_back(1234);
  ext.max_tokens = 1;
  std::vector<RequestSummary> ext_sum;
  run_all(*e, {ext}, &ext_sum);
  EXPECT_LE(ext_sum[0].cached_tokens, static_cast<int64_t>(a.prompt.size()))
      << "the failed step's state of a reached the prompt cache";
  std::vector<RequestSummary> again;
  EngineRequest a2 = request(specs[0]), b2 = request(specs[1]);
  const auto warm = run_all(*e, {a2, b2}, &again);
  EXPECT_EQ(warm[0], cold[0]);
  EXPECT_EQ(warm[1], cold[1]);
  expect_idle(*e, "after the resolve failure");
}

// A round whose resolve fails publishes no prompt checkpoint of its prefill chunks (they were
// stored before the resolve, from a state the failed round left untrusted).
TEST_F(FaultInjectionTest, ResolveFailureKeepsPrefillCheckpointsOut) {
  auto pc = cache();
  auto e = engine(2, pc);  // prompt checkpoints every 32 tokens (Gemma's sliding-window layers)
  EngineRequest a = request(pool()[0]);
  a.max_tokens = 40;
  EngineRequest b;
  std::mt19937 rng(99);
  b.prompt.push_back(2);
  for (int i = 0; i < 79; ++i) b.prompt.push_back(20000 + static_cast<int32_t>(rng() % 20000));
  b.max_tokens = 2;
  b.ignore_eos = true;
  auto sa = std::make_shared<CollectSink>(), sb = std::make_shared<CollectSink>();
  ASSERT_TRUE(e->submit(a, sa).handle);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (e->stats().generated_tokens < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a decodes: its rows are in each round's transaction
  Injector in;
  in.p[static_cast<int>(fault::Point::kResolve)] = 1.0;  // every round fails from now on
  {
    HookScope hook(in);
    ASSERT_TRUE(e->submit(b, sb).handle);
    ASSERT_TRUE(sa->wait());
    ASSERT_TRUE(sb->wait());
  }
  EXPECT_EQ(sb->summary.outcome, Outcome::kFailed);
  EngineRequest c;
  c.prompt.assign(b.prompt.begin(), b.prompt.begin() + 40);
  c.prompt.push_back(1234);
  c.max_tokens = 1;
  std::vector<RequestSummary> sums;
  run_all(*e, {c}, &sums);
  EXPECT_LT(sums[0].cached_tokens, 32) << "the failed round's prompt checkpoint of b reached the prompt cache";
  expect_idle(*e, "after the failed rounds");
}

// Each point alone: what fails, and what does not.
TEST_F(FaultInjectionTest, EachPointFailsWhatItShould) {
  const auto specs = pool();
  const std::vector<Spec> two = {specs[2], specs[3]};  // specs[3] is constrained
  const auto cold = solo(two);
  struct Want {
    fault::Point point;
    bool group_fails;    // every request of the step fails
    bool one_fails;      // exactly the affected request fails
    bool nothing_fails;  // only speed or the cache is lost
  };
  const std::vector<Want> wants = {
      {fault::Point::kForward, true, false, false},      {fault::Point::kBegin, true, false, false},
      {fault::Point::kResolve, true, false, false},      {fault::Point::kDeliver, false, true, false},
      {fault::Point::kMask, false, true, false},         {fault::Point::kDraftPropose, false, false, true},
      {fault::Point::kDraftCommit, false, false, true},  {fault::Point::kCacheExtract, false, false, true},
  };
  for (const Want& w : wants) {
    const std::string name = fault::point_name(w.point);
    auto e = engine(2, cache(), "f16", /*speculative=*/true);
    Injector in;
    in.fail_call[static_cast<int>(w.point)] = 3;
    std::vector<RequestSummary> sums;
    std::vector<std::vector<int32_t>> got;
    {
      HookScope hook(in);
      got = run_all(*e, {request(two[0]), request(two[1])}, &sums);
    }
    ASSERT_EQ(in.fired[static_cast<int>(w.point)], 1) << name << ": the point was not reached 3 times";
    int failed = 0;
    for (size_t i = 0; i < sums.size(); ++i) {
      if (sums[i].outcome == Outcome::kFailed) {
        ++failed;
        EXPECT_FALSE(sums[i].error.empty()) << name;
      } else {
        EXPECT_EQ(got[i], cold[i]) << name << ": a request that went on differs from its solo run";
      }
    }
    const int want = w.group_fails ? 2 : w.one_fails ? 1 : 0;
    EXPECT_EQ(failed, want) << name;
    expect_idle(*e, name);
  }
}

// Faults over all points on Gemma 3 (KV f16 and q8_0; its sliding-window
// layers keep ring layouts), greedy and seeded rows, constrained rows, n-gram speculation.
// (400 in the suite, ~35 s here; SPECULA_FAULT_COUNT=1000 for the long run.)
TEST_F(FaultInjectionTest, RandomizedFaultsNeverCorruptAnswers) {
  int64_t n = 400;
  if (const char* s = std::getenv("SPECULA_FAULT_COUNT")) n = std::max<int64_t>(1, std::strtoll(s, nullptr, 10));
  randomized(nullptr, pool(), {"f16", "q8_0"}, n, "gemma3");
}

// A hybrid model with recurrent layers (a tiny random-weight qwen35 GGUF written at test time
// by tools/make_qwen35_fixtures.py): recurrent state checkpoints in the prompt cache.
TEST_F(FaultInjectionTest, RandomizedFaultsOnARecurrentModel) {
  const std::string dir = (std::filesystem::temp_directory_path() / "specula_fault_tiny").string();
  std::filesystem::create_directories(dir);
  const std::string src = std::filesystem::path(SPECULA_FIXTURES_DIR).parent_path().parent_path().string();
  const std::string cmd = "python3 '" + src + "/tools/make_qwen35_fixtures.py' --models-only --out '" + dir +
                          "' > '" + dir + ".log' 2>&1";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "tools/make_qwen35_fixtures.py failed (see " << dir << ".log)";
  auto m = load_model(dir + "/qwen35_tiny_a.gguf");
  ASSERT_TRUE(m.is_ok()) << m.message();
  std::unique_ptr<Model> model = std::move(m).value();
  randomized(model.get(), pool(static_cast<int32_t>(model->info().n_vocab)), {"f16"}, 1000, "qwen35-recurrent");
}

}  // namespace
}  // namespace specula
