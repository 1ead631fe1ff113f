// tests/sampling/params_test.cpp — sampling/params.h's field table and what reads it: the
// OpenAI and Anthropic parsers accept each field in its range and refuse it outside, naming
// it; the generation key changes with exactly the fields the table marks; the defaults per
// API; and docs/API.md holds the table as sampling_fields_markdown() writes it.
#include "sampling/params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "server/anthropic_api.h"
#include "server/openai_api.h"
#include "server/sampling_fields.h"

namespace specula {
namespace {

using json = nlohmann::ordered_json;

TEST(SamplingFields, NamesAreUniqueAndEveryFlagIsSpelledOnce) {
  std::set<std::string> names, flags;
  for (const SamplingField& f : sampling_fields()) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
    if (f.cli != nullptr) {
      EXPECT_TRUE(flags.insert(f.cli).second) << f.cli;
    }
    EXPECT_NE(f.spelling(SamplingApi::kOpenAi), nullptr) << f.name << ": every field is read on the OpenAI routes";
    if (f.key == KeyRule::kWhenGate) {
      EXPECT_NE(find_sampling_field(f.gate), nullptr) << f.name;
    }
    EXPECT_FALSE(std::string(f.help).empty()) << f.name;
  }
}

// Each numeric field: its bounds are accepted, just outside them is a 400 naming it.
TEST(SamplingFields, TheOpenAiParserReadsEveryFieldInItsRange) {
  for (const SamplingField& f : sampling_fields()) {
    if (f.kind != SamplingKind::kFloat && f.kind != SamplingKind::kInt) continue;
    const double hi = f.hi, lo = f.lo_open ? (f.kind == SamplingKind::kInt ? f.lo + 1 : f.lo + 0.5) : f.lo;
    for (double v : {lo, hi}) {
      json body = {{"prompt", "hi"}};
      body[f.name] = f.kind == SamplingKind::kInt ? json(static_cast<int64_t>(v)) : json(v);
      auto r = server::parse_completion_request(body.dump(), server::Endpoint::kCompletions);
      ASSERT_TRUE(std::holds_alternative<server::CompletionParams>(r)) << body.dump() << ": "
                                                                       << std::get<server::ApiError>(r).message;
      SamplingParams expect = api_default_sampling(SamplingApi::kOpenAi);
      f.set_number(expect, v);
      normalize_request_sampling(expect);
      EXPECT_EQ(f.number(std::get<server::CompletionParams>(r).sampling), f.number(expect)) << body.dump();
    }
    for (double v : {f.lo - 1, f.hi + (f.kind == SamplingKind::kInt ? 1 : 0.5)}) {
      if (f.kind == SamplingKind::kInt && v > 2147483647.0) continue;
      json body = {{"prompt", "hi"}};
      body[f.name] = f.kind == SamplingKind::kInt ? json(static_cast<int64_t>(v)) : json(v);
      auto r = server::parse_completion_request(body.dump(), server::Endpoint::kCompletions);
      ASSERT_TRUE(std::holds_alternative<server::ApiError>(r)) << body.dump() << " was accepted";
      EXPECT_EQ(std::get<server::ApiError>(r).param, f.name);
    }
  }
}

TEST(SamplingFields, AnthropicReadsItsOwnSpellingsRangesAndDefaults) {
  auto parse = [](const std::string& extra) {
    return server::parse_messages_request(
        R"({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}])" + extra + "}", false);
  };
  auto ok = parse("");
  ASSERT_TRUE(std::holds_alternative<server::CompletionParams>(ok));
  const SamplingParams& s = std::get<server::CompletionParams>(ok).sampling;
  EXPECT_FLOAT_EQ(s.temperature, 1.0f);
  EXPECT_EQ(s.top_k, 0);
  EXPECT_FLOAT_EQ(s.top_p, 1.0f);
  EXPECT_FLOAT_EQ(s.min_p, 0.0f);
  auto hot = parse(R"(, "temperature": 1.5)");
  ASSERT_TRUE(std::holds_alternative<server::ApiError>(hot));  // [0, 1] there
  EXPECT_EQ(std::get<server::ApiError>(hot).param, "temperature");
  auto neg = parse(R"(, "top_k": -1)");
  ASSERT_TRUE(std::holds_alternative<server::ApiError>(neg));  // [0, ...] there
  auto unknown = parse(R"(, "min_p": 0.1)");
  ASSERT_TRUE(std::holds_alternative<server::ApiError>(unknown));  // not an Anthropic field
  EXPECT_EQ(std::get<server::ApiError>(unknown).param, "min_p");
}

// The key changes with a field marked kAlways, with a gated field only when its gate is
// on, and with the seed only when sampling.
TEST(SamplingFields, TheGenerationKeyFollowsTheTable) {
  const SamplingParams base;
  const std::string k0 = generation_key_bytes(base);
  for (const SamplingField& f : sampling_fields()) {
    if (f.kind != SamplingKind::kFloat && f.kind != SamplingKind::kInt && f.kind != SamplingKind::kSeed) continue;
    SamplingParams p = base;
    f.set_number(p, f.kind == SamplingKind::kSeed ? 99 : (f.number(p) == f.hi ? f.lo : f.hi));
    const bool changes = generation_key_bytes(p) != k0;
    const bool want = f.key == KeyRule::kAlways || (f.key == KeyRule::kWhenSampling && base.temperature > 0) ||
                      (f.key == KeyRule::kWhenGate && find_sampling_field(f.gate)->number(p) != 0);
    EXPECT_EQ(changes, want) << f.name;
  }
  SamplingParams greedy = base;
  greedy.temperature = 0;
  SamplingParams greedy_seeded = greedy;
  greedy_seeded.seed = 1234;
  EXPECT_EQ(generation_key_bytes(greedy), generation_key_bytes(greedy_seeded));
  SamplingParams dry = base;
  dry.dry_multiplier = 0.8f;
  SamplingParams dry2 = dry;
  dry2.dry_sequence_breakers = {"\n"};
  EXPECT_NE(generation_key_bytes(dry), generation_key_bytes(dry2));
  SamplingParams biased = base;
  biased.logit_bias = {{5, -1.0f}};
  EXPECT_NE(generation_key_bytes(biased), k0);
}

// docs/API.md's sampling table is the table's own rendering. To regenerate it after a
// change to the table: SPECULA_UPDATE_DOCS=1 build/release/specula_tests
// --gtest_filter=SamplingFields.DocsTableIsCurrent (it rewrites the lines between the markers).
TEST(SamplingFields, DocsTableIsCurrent) {
  const std::string path = std::string(SPECULA_FIXTURES_DIR) + "/../../docs/API.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string begin = "<!-- sampling-fields:begin (sampling_fields_markdown(); do not edit) -->\n";
  const std::string end = "<!-- sampling-fields:end -->";
  const size_t a = doc.find(begin), b = doc.find(end);
  ASSERT_NE(a, std::string::npos) << "docs/API.md lacks the marker " << begin;
  ASSERT_NE(b, std::string::npos);
  const std::string table = sampling_fields_markdown();
  const char* update = std::getenv("SPECULA_UPDATE_DOCS");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream(path, std::ios::binary) << doc.substr(0, a + begin.size()) + table + doc.substr(b);
    return;
  }
  EXPECT_EQ(doc.substr(a + begin.size(), b - a - begin.size()), table)
      << "docs/API.md's sampling table is stale (SPECULA_UPDATE_DOCS=1 build/release/specula_tests "
         "--gtest_filter=SamplingFields.DocsTableIsCurrent rewrites it); the current one:\n"
      << table;
}

}  // namespace
}  // namespace specula
