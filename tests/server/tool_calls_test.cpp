// Tests for server/tool_calls: Hermes <tool_call> blocks, the fenced and bare JSON that
// small Qwen2.5 models write, what stays text, and the streaming hold-back.
#include "server/tool_calls.h"

#include <gtest/gtest.h>

namespace specula::server {
namespace {

const std::vector<std::string> kTools = {"get_weather", "get_time"};

TEST(ToolCalls, TaggedCalls) {
  auto a = parse_tool_calls(ToolFormat::kHermes,
                            "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                            "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": \"Tokyo\"}}\n</tool_call>",
                            kTools);
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.content, "Let me check.");
  EXPECT_EQ(a.calls[0].name, "get_weather");
  EXPECT_EQ(a.calls[0].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(a.calls[1].name, "get_time");
  // An unclosed last call (EOS right after the JSON) still counts; no arguments -> {}.
  a = parse_tool_calls(ToolFormat::kHermes, "<tool_call>\n{\"name\": \"x\"}", kTools);
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].arguments, "{}");
  EXPECT_EQ(a.content, "");
}

TEST(ToolCalls, FencedAndBareJson) {
  auto a = parse_tool_calls(ToolFormat::kHermes,
                            "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\"city\": \"Paris\"}\n}\n```", kTools);
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].name, "get_weather");
  EXPECT_EQ(a.content, "");
  // Two objects in one block, and an array.
  a = parse_tool_calls(ToolFormat::kHermes,
                       "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"A\"}}\n"
                       "{\"name\": \"get_time\", \"arguments\": {\"city\": \"B}\"}}\n```",
                       kTools);
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[1].arguments, "{\"city\":\"B}\"}");
  a = parse_tool_calls(ToolFormat::kHermes,
                       " [{\"name\": \"get_time\", \"arguments\": {}}, {\"name\": \"get_weather\", \"arguments\": {}}] ",
                       kTools);
  ASSERT_EQ(a.calls.size(), 2u);
}

TEST(ToolCalls, WhatIsNotACallStaysText) {
  const std::vector<std::string> texts = {
      "Plain answer.",
      "<tool_call>\n{not json}\n</tool_call>",                                   // bad JSON in a tag
      "```json\n{\"name\": \"rm_rf\", \"arguments\": {}}\n```",                   // not one of the tools
      "```python\nprint({\"name\": \"get_time\"})\n```",                         // code, not a call
      "{\"name\": \"get_time\", \"arguments\": \"x\"} and more",                  // bare, with text after
      "<tool_call>\n{\"name\": \"f\", \"arguments\": \"city=Paris\"}\n</tool_call>",  // arguments not an object
      "```json\n{\"name\": \"get_time\", \"arguments\": {}}",                    // fence never closed: still a call
  };
  for (size_t k = 0; k + 1 < texts.size(); ++k) {
    auto a = parse_tool_calls(ToolFormat::kHermes, texts[k], kTools);
    EXPECT_TRUE(a.calls.empty()) << texts[k];
    EXPECT_EQ(a.content, texts[k]);
  }
  EXPECT_EQ(parse_tool_calls(ToolFormat::kHermes, texts.back(), kTools).calls.size(), 1u);
  EXPECT_TRUE(parse_tool_calls(ToolFormat::kNone, "<tool_call>{\"name\": \"x\"}</tool_call>", kTools).calls.empty());
}

TEST(ToolCalls, StreamingHoldsBackPossibleCalls) {
  auto r = releasable_content(ToolFormat::kHermes, "Sure, let me look.", false);
  EXPECT_EQ(r.content, 18u);
  EXPECT_FALSE(r.call_started);
  r = releasable_content(ToolFormat::kHermes, "Sure <tool_c", false);  // maybe a tag
  EXPECT_EQ(r.content, 5u);
  EXPECT_FALSE(r.call_started);
  r = releasable_content(ToolFormat::kHermes, "Sure <tool_call>\n{", false);
  EXPECT_EQ(r.content, 5u);
  EXPECT_TRUE(r.call_started);
  r = releasable_content(ToolFormat::kHermes, "Here:\n``", false);
  EXPECT_EQ(r.content, 6u);
  r = releasable_content(ToolFormat::kHermes, "  {\"na", true);  // a bare object as the answer
  EXPECT_EQ(r.content, 0u);
  EXPECT_TRUE(r.call_started);
  r = releasable_content(ToolFormat::kHermes, "\n", true);  // nothing but space yet: wait
  EXPECT_EQ(r.content, 0u);
  EXPECT_FALSE(r.call_started);
  EXPECT_EQ(releasable_content(ToolFormat::kNone, "<tool_c", false).content, 7u);
  EXPECT_EQ(tool_format_of("{{ '<tool_call>' }}"), ToolFormat::kHermes);
  EXPECT_EQ(tool_format_of("{{ messages }}"), ToolFormat::kNone);
}

}  // namespace
}  // namespace specula::server
