// Tests for server/tool_calls: Hermes <tool_call> blocks, the fenced and bare JSON that
// small Qwen2.5 models write, what stays text, and the streaming hold-back.
#include "chat/tool_calls.h"

#include <gtest/gtest.h>

namespace specula::chat {
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

TEST(ToolCalls, Llama3Json) {
  auto a = parse_tool_calls(ToolFormat::kLlama3Json,
                            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", kTools);
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].name, "get_weather");
  EXPECT_EQ(a.calls[0].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(a.content, "");
  // <|python_tag|>, ";" between calls, "arguments" too.
  a = parse_tool_calls(ToolFormat::kLlama3Json,
                       "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"a;b\"}}; "
                       "{\"name\": \"get_time\", \"arguments\": {\"city\": \"Tokyo\"}}",
                       kTools);
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[0].arguments, "{\"city\":\"a;b\"}");
  EXPECT_EQ(a.calls[1].name, "get_time");
  // Not a tool, or text around it: text.
  for (const char* t : {"{\"name\": \"rm_rf\", \"parameters\": {}}", "Sure: {\"name\": \"get_time\", \"parameters\": {}}",
                        "The answer is 4."}) {
    a = parse_tool_calls(ToolFormat::kLlama3Json, t, kTools);
    EXPECT_TRUE(a.calls.empty()) << t;
    EXPECT_EQ(a.content, t);
  }
  EXPECT_TRUE(releasable_content(ToolFormat::kLlama3Json, " {\"na", true).call_started);
  EXPECT_TRUE(releasable_content(ToolFormat::kLlama3Json, "<|pyt", true).call_started);
  auto r = releasable_content(ToolFormat::kLlama3Json, "Hello there", true);
  EXPECT_EQ(r.content, 11u);
  EXPECT_FALSE(r.call_started);
  EXPECT_EQ(tool_format_of("<|start_header_id|>{% if tools %}{\"name\": function name, \"parameters\": ...}{% endif %}"),
            ToolFormat::kLlama3Json);
  EXPECT_EQ(tool_format_of("<|start_header_id|>{{ m.content }}"), ToolFormat::kNone);
}

TEST(ToolCalls, Mistral) {
  auto a = parse_tool_calls(ToolFormat::kMistral,
                            "Checking.[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, "
                            "\"id\": \"abc123xyz\"}, {\"name\": \"get_time\", \"arguments\": \"{\\\"city\\\": \\\"Tokyo\\\"}\"}]",
                            kTools);
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.content, "Checking.");
  EXPECT_EQ(a.calls[0].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(a.calls[1].arguments, "{\"city\":\"Tokyo\"}");
  // v11: name[ARGS]{...}, one marker per call.
  a = parse_tool_calls(ToolFormat::kMistral,
                       "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{\"city\": \"Tokyo\"}",
                       kTools);
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[1].name, "get_time");
  EXPECT_EQ(a.calls[1].arguments, "{\"city\":\"Tokyo\"}");
  // The marker as a control token (its text not in the answer): a bare array of known tools.
  a = parse_tool_calls(ToolFormat::kMistral, " [{\"name\": \"get_time\", \"arguments\": {}}]", kTools);
  ASSERT_EQ(a.calls.size(), 1u);
  a = parse_tool_calls(ToolFormat::kMistral, "[1, 2, 3] are numbers", kTools);
  EXPECT_TRUE(a.calls.empty());
  a = parse_tool_calls(ToolFormat::kMistral, "[TOOL_CALLS] not json", kTools);
  EXPECT_TRUE(a.calls.empty());
  EXPECT_EQ(a.content, "[TOOL_CALLS] not json");
  auto r = releasable_content(ToolFormat::kMistral, "Let me see [TOOL_C", false);
  EXPECT_EQ(r.content, 11u);
  EXPECT_FALSE(r.call_started);
  r = releasable_content(ToolFormat::kMistral, "Let me see [TOOL_CALLS] [", false);
  EXPECT_EQ(r.content, 11u);
  EXPECT_TRUE(r.call_started);
  EXPECT_TRUE(releasable_content(ToolFormat::kMistral, "[{\"name", true).call_started);
  EXPECT_EQ(tool_format_of("{{ '[TOOL_CALLS]' }}"), ToolFormat::kMistral);
}

TEST(ToolCalls, ForcedGrammars) {
  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time"}}])");
  auto g = forced_tool_grammar(ToolFormat::kHermes, tools, "*", false);
  ASSERT_TRUE(g.is_ok());
  EXPECT_NE(g->find("\"<tool_call>\\n{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": \" %json"), std::string::npos) << *g;
  EXPECT_NE(g->find("call_1"), std::string::npos);  // both tools
  g = forced_tool_grammar(ToolFormat::kLlama3Json, tools, "get_time", true);
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(g->find("get_weather"), std::string::npos) << *g;  // only the named tool
  EXPECT_NE(g->find("\\\"parameters\\\""), std::string::npos) << *g;
  g = forced_tool_grammar(ToolFormat::kMistral, tools, "*", true, "<[5]>");
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(g->rfind("start: <[5]> \" [\" call", 0), 0u) << *g;
  EXPECT_FALSE(forced_tool_grammar(ToolFormat::kNone, tools, "*", true).is_ok());
  EXPECT_FALSE(forced_tool_grammar(ToolFormat::kHermes, tools, "nope", true).is_ok());
}

}  // namespace
}  // namespace specula::chat
