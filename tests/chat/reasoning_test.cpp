// tests/chat/reasoning_test.cpp — chat/reasoning.h: which templates think, where a
// generation starts, and the split of an answer into reasoning and content — whole, and
// streamed in every way a text can arrive (the streamed pieces always equal the whole split).
#include "chat/reasoning.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace specula::chat {
namespace {

TEST(Reasoning, FormatOfTemplate) {
  EXPECT_EQ(reasoning_format_of("{{ '<|im_start|>assistant\\n<think>\\n' }}"), ReasoningFormat::kThink);
  EXPECT_EQ(reasoning_format_of("{{ messages[0].content }}"), ReasoningFormat::kNone);
}

TEST(Reasoning, PromptOpensThinking) {
  EXPECT_TRUE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
  EXPECT_TRUE(prompt_opens_thinking("x<think>"));
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n"));
  EXPECT_FALSE(prompt_opens_thinking(""));
  EXPECT_TRUE(prompt_closes_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_closes_thinking("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_closes_thinking("<|im_start|>assistant\n"));
  // A tag in client text (before trusted_from) does not count.
  const std::string prefill = "<|im_start|>assistant\n<think>";
  EXPECT_FALSE(prompt_opens_thinking(prefill, prefill.size()));
  EXPECT_TRUE(prompt_opens_thinking(prefill, prefill.size() - 7));
}

TEST(Reasoning, WholeSplit) {
  struct Case {
    std::string text;
    bool in_thinking;
    std::string reasoning, content;
    bool has;
  };
  const std::vector<Case> cases = {
      {"<think>\nplan\n</think>\n\nAnswer.", false, "\nplan\n", "\n\nAnswer.", true},
      {"plan</think>Answer", true, "plan", "Answer", true},
      {"Just an answer", false, "", "Just an answer", false},
      {" <think>not at the start</think>", false, "", " <think>not at the start</think>", false},
      {"<think>cut by max_tokens", false, "cut by max_tokens", "", true},
      {"still thinking </thi", true, "still thinking </thi", "", true},
      {"<thin", false, "", "<thin", false},
      {"", true, "", "", true},
      {"a</think>b</think>c", true, "a", "b</think>c", true},
  };
  for (const Case& c : cases) {
    const SplitAnswer s = split_reasoning(c.text, c.in_thinking);
    EXPECT_EQ(s.reasoning, c.reasoning) << c.text;
    EXPECT_EQ(s.content, c.content) << c.text;
    EXPECT_EQ(s.has_reasoning, c.has) << c.text;
  }
}

// reasoning + content is the text without its two tags, nothing trimmed.
TEST(Reasoning, SplitKeepsEveryByte) {
  const std::string t = "<think> a\n b </think>\n c ";
  const SplitAnswer s = split_reasoning(t, false);
  EXPECT_EQ(s.reasoning + s.content, " a\n b \n c ");
}

std::vector<std::vector<std::string>> chunkings(const std::string& t) {
  std::vector<std::vector<std::string>> out;
  std::vector<std::string> bytes;
  for (char ch : t) bytes.push_back(std::string(1, ch));
  out.push_back(bytes);
  for (size_t i = 0; i <= t.size(); ++i)
    for (size_t j = i; j <= t.size(); ++j) out.push_back({t.substr(0, i), t.substr(i, j - i), t.substr(j)});
  return out;
}

TEST(Reasoning, StreamedEqualsWhole) {
  const std::vector<std::string> texts = {"<think>\nplan it\n</think>\n\nDone.", "x</think>y", "<think>open",
                                          "<th", "plain <think> text", "</think>", "<think></think>", "a</thinkb"};
  for (const std::string& t : texts)
    for (bool in_thinking : {false, true}) {
      const SplitAnswer whole = split_reasoning(t, in_thinking);
      for (const auto& pieces : chunkings(t)) {
        ReasoningStream s(ReasoningFormat::kThink, in_thinking);
        std::string r, c;
        for (const std::string& p : pieces) {
          const SplitAnswer a = s.feed(p);
          r += a.reasoning;
          c += a.content;
        }
        const SplitAnswer a = s.finish();
        r += a.reasoning;
        c += a.content;
        ASSERT_EQ(r, whole.reasoning) << t;
        ASSERT_EQ(c, whole.content) << t;
        ASSERT_EQ(a.has_reasoning, whole.has_reasoning) << t;
      }
    }
}

// A partial closing tag is held back, never sent as reasoning before it is known.
TEST(Reasoning, PartialTagHeld) {
  ReasoningStream s(ReasoningFormat::kThink, true);
  SplitAnswer a = s.feed("abc</th");
  EXPECT_EQ(a.reasoning, "abc");
  a = s.feed("ink>rest");
  EXPECT_EQ(a.reasoning, "");
  EXPECT_EQ(a.content, "rest");
}

TEST(Reasoning, InactivePassesThrough) {
  ReasoningStream s;
  const SplitAnswer a = s.feed("<think>x</think>");
  EXPECT_EQ(a.content, "<think>x</think>");
  EXPECT_FALSE(a.has_reasoning);
}

}  // namespace
}  // namespace specula::chat
