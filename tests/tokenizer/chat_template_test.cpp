// tests/tokenizer/chat_template_test.cpp — ChatTemplate against Python Jinja2 (the
// transformers setup) byte for byte: five chat templates over a set of conversations
// and ~65 single-feature snippets (tests/fixtures/chat_templates/expected.json, made by
// tools/make_chat_template_fixtures.py); malformed templates give positioned parse
// errors; raise_exception surfaces its message; hostile templates fail fast; GGUF
// template lookup on the real model files (skipped when absent).
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "../test_util.h"
#include "formats/gguf.h"

namespace specula::tokenizer {
namespace {

using nlohmann::ordered_json;

std::string fixture_dir() { return std::string(SPECULA_FIXTURES_DIR) + "/chat_templates"; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const ordered_json& expected() {
  static const ordered_json doc = ordered_json::parse(read_file(fixture_dir() + "/expected.json"));
  return doc;
}

std::string models_dir() {
  return std::filesystem::path(specula::testing::default_model_path()).parent_path().string();
}

TEST(ChatTemplate, FixtureTemplatesMatchJinja2) {
  const auto& cases = expected().at("cases");
  ASSERT_GE(cases.size(), 70u);
  int n_checked = 0;
  for (const auto& c : cases) {
    const std::string tpl_name = c.at("template");
    SCOPED_TRACE(tpl_name + " / " + c.at("name").get<std::string>());
    auto tpl = ChatTemplate::parse(read_file(fixture_dir() + "/" + tpl_name));
    ASSERT_TRUE(tpl.is_ok()) << tpl.message();
    auto out = tpl->render(c.at("context"));
    if (c.contains("error")) {
      ASSERT_FALSE(out.is_ok());
      EXPECT_NE(out.message().find(c.at("error").get<std::string>()), std::string::npos) << out.message();
    } else {
      ASSERT_TRUE(out.is_ok()) << out.message();
      EXPECT_EQ(out.value(), c.at("expected").get<std::string>());
    }
    ++n_checked;
  }
  EXPECT_EQ(n_checked, static_cast<int>(cases.size()));
}

TEST(ChatTemplate, SnippetsMatchJinja2) {
  const auto& context = expected().at("snippet_context");
  for (const auto& s : expected().at("snippets")) {
    const std::string source = s.at("source");
    SCOPED_TRACE(source);
    auto tpl = ChatTemplate::parse(source);
    ASSERT_TRUE(tpl.is_ok()) << tpl.message();
    auto out = tpl->render(context);
    ASSERT_TRUE(out.is_ok()) << out.message();
    EXPECT_EQ(out.value(), s.at("expected").get<std::string>());
  }
}

TEST(ChatTemplate, MalformedTemplatesGivePositionedParseErrors) {
  const std::regex positioned(R"(^\[chat_template\] \d+:\d+: .+)");
  for (const auto& e : expected().at("parse_errors")) {
    const std::string source = e.at("source");
    SCOPED_TRACE(source);
    auto tpl = ChatTemplate::parse(source);
    ASSERT_FALSE(tpl.is_ok());
    EXPECT_TRUE(std::regex_search(tpl.message(), positioned)) << tpl.message();
  }
  auto tpl = ChatTemplate::parse("line1\nline2 {{ x + * }}");
  ASSERT_FALSE(tpl.is_ok());
  EXPECT_EQ(tpl.message().rfind("[chat_template] 2:", 0), 0u) << tpl.message();
  tpl = ChatTemplate::parse("ok\n{% if x %}\n{% endfor %}");
  ASSERT_FALSE(tpl.is_ok());
  EXPECT_NE(tpl.message().find("3:"), std::string::npos) << tpl.message();
}

TEST(ChatTemplate, RaiseExceptionSurfacesMessage) {
  auto tpl = ChatTemplate::parse("a\n{% if messages | length > 1 %}{{ raise_exception('too many: ' ~ messages | length) }}{% endif %}ok");
  ASSERT_TRUE(tpl.is_ok()) << tpl.message();
  auto out = tpl->render(ordered_json::parse(R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})"));
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.message().find("raise_exception: too many: 2"), std::string::npos) << out.message();
  EXPECT_EQ(out.message().rfind("[chat_template] 2:", 0), 0u) << out.message();
  out = tpl->render(ordered_json::parse(R"({"messages": [{"role": "user", "content": "a"}]})"));
  ASSERT_TRUE(out.is_ok()) << out.message();
  EXPECT_EQ(out.value(), "a\nok");
}

TEST(ChatTemplate, UndefinedMisuseIsAnError) {
  for (const char* source : {"{{ x.y }}", "{{ x + 1 }}", "{{ x['k'] }}", "{{ m.content.strip() }}", "{{ x | tojson }}",
                             "{{ 1 + 'a' }}", "{{ 1 / 0 }}", "{{ 'a' < 1 }}", "{{ none.x.y }}", "{{ 'abc'() }}"}) {
    SCOPED_TRACE(source);
    auto tpl = ChatTemplate::parse(source);
    ASSERT_TRUE(tpl.is_ok()) << tpl.message();
    auto out = tpl->render(ordered_json::parse(R"({"m": {"role": "user"}})"));
    EXPECT_FALSE(out.is_ok()) << out.value();
  }
  auto tpl = ChatTemplate::parse("{{ x.y }}");
  EXPECT_NE(tpl->render(ordered_json::object()).message().find("'x' is undefined"), std::string::npos);
}

TEST(ChatTemplate, AcceptsSortedJsonAndRejectsNonObjects) {
  auto tpl = ChatTemplate::parse("{{ d | tojson }}|{{ tools }}|{{ add_generation_prompt }}");
  ASSERT_TRUE(tpl.is_ok());
  auto out = tpl->render(nlohmann::json::parse(R"({"d": {"b": 1, "a": "é"}})"));
  ASSERT_TRUE(out.is_ok()) << out.message();
  EXPECT_EQ(out.value(), "{\"a\": \"é\", \"b\": 1}|None|False");
  out = tpl->render(ordered_json::parse(R"({"d": {"b": 1, "a": "é"}})"));
  ASSERT_TRUE(out.is_ok());
  EXPECT_EQ(out.value(), "{\"b\": 1, \"a\": \"é\"}|None|False");
  EXPECT_FALSE(tpl->render(ordered_json::array()).is_ok());
}

// Each hostile template must fail (not hang, not crash) well within a second.
TEST(ChatTemplate, HostileTemplatesFailFast) {
  ChatTemplateLimits small;
  small.max_output_bytes = 1 << 20;
  small.max_string_bytes = 8 << 20;
  small.max_loop_iterations = 200'000;
  small.max_steps = 2'000'000;
  std::string deep_ifs, deep_parens = "{{ ", long_chain = "{{ 1";
  for (int k = 0; k < 5000; ++k) deep_ifs += "{% if true %}";
  for (int k = 0; k < 5000; ++k) deep_parens += "(";
  deep_parens += "1";
  for (int k = 0; k < 5000; ++k) deep_parens += ")";
  deep_parens += " }}";
  for (int k = 0; k < 100000; ++k) long_chain += "+1";
  long_chain += " }}";
  std::string deep_list = "{{ ";
  for (int k = 0; k < 3000; ++k) deep_list += "[";
  for (int k = 0; k < 3000; ++k) deep_list += "]";
  deep_list += " }}";

  const std::vector<std::pair<std::string, bool>> hostile = {  // (source, fails at parse)
      {deep_ifs, true},
      {deep_parens, true},
      {long_chain, true},
      {deep_list, true},
      {"{% for i in range(100000000000) %}x{% endfor %}", false},
      {"{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}{% endfor %}{% endfor %}{% endfor %}", false},
      {"{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}", false},
      {"{{ 'x' * 100000000000 }}", false},
      {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", false},
      {"{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}", false},
      {"{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}", false},
      {"{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l == ns.l }}", false},
      {"{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l | tojson }}", false},
      {"{% set ns = namespace() %}{% set ns.self = ns %}", false},
      {"{% set ns = namespace() %}{% set ns.self = [ns] %}", false},
      {"{% for i in range(150000) %}xxxxxxxxxxxxxxxxxxxxxxxx{% endfor %}", false},
      {"{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}", false},
      {"{{ 2 ** 64 }}", false},
  };
  for (const auto& [source, at_parse] : hostile) {
    SCOPED_TRACE(source.substr(0, 120));
    const auto t0 = std::chrono::steady_clock::now();
    auto tpl = ChatTemplate::parse(source);
    if (at_parse) {
      EXPECT_FALSE(tpl.is_ok());
    } else {
      ASSERT_TRUE(tpl.is_ok()) << tpl.message();
      tpl->set_limits(small);
      auto out = tpl->render(ordered_json::object());
      EXPECT_FALSE(out.is_ok()) << "rendered " << out.value().size() << " bytes";
      if (!out.is_ok()) {
        EXPECT_EQ(out.message().rfind("[chat_template] ", 0), 0u);
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 2.0);
  }
}

// Every prefix of a real template either fails to parse or renders (maybe with an
// error); nothing crashes.
TEST(ChatTemplate, TruncatedTemplatesNeverCrash) {
  const std::string full = read_file(fixture_dir() + "/qwen2.5.jinja");
  ASSERT_FALSE(full.empty());
  const auto ctx = expected().at("cases")[0].at("context");
  int parsed = 0;
  for (size_t n = 0; n <= full.size(); n += 3) {
    auto tpl = ChatTemplate::parse(full.substr(0, n));
    if (!tpl.is_ok()) continue;
    ++parsed;
    (void)tpl->render(ctx);
  }
  EXPECT_GT(parsed, 1);
}

TEST(ChatTemplate, QwenGgufTemplateLoads) {
  const std::string path = models_dir() + "/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "Qwen2.5-Coder 1.5B GGUF not found at " << path;
  auto f = gguf::GgufFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.message();
  auto src = chat_template_from_gguf(f.value());
  ASSERT_TRUE(src.has_value());
  EXPECT_EQ(*src, read_file(fixture_dir() + "/qwen2.5.jinja"));
  auto tpl = ChatTemplate::parse(*src);
  ASSERT_TRUE(tpl.is_ok()) << tpl.message();
  auto out = tpl->render(ordered_json::parse(R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true})"));
  ASSERT_TRUE(out.is_ok()) << out.message();
  EXPECT_EQ(out.value(),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, GemmaGgufHasNoTemplate) {
  const std::string path = specula::testing::default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "Gemma 3 270M GGUF not found at " << path;
  auto f = gguf::GgufFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_FALSE(chat_template_from_gguf(f.value()).has_value());
}

}  // namespace
}  // namespace specula::tokenizer
