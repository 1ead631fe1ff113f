// fuzz/chat_template_fuzz.cpp — libFuzzer target for the Jinja parser and interpreter
// (jinja/, through chat/chat_template.h as every model's template goes).
// Input: a selector byte, then parts separated by "\x00\x01" (fuzz_util.h):
//   - bit 0 clear: part 0 is a template, parsed and rendered with the messages of part 1
//     (JSON; a fixed conversation when it is not a JSON array);
//   - bit 0 set: part 0 is a message list (JSON) rendered by one of the committed templates
//     (tests/fixtures/chat_templates/*.jinja, chosen by the selector's upper bits), as a
//     client's request reaches them.
// Limits are lowered (ChatTemplateLimits: 1 MiB output, 4 MiB of strings, 20,000 loop
// iterations, 200,000 steps, depth 100) so that a slow input is refused quickly; the
// defaults are the same code with larger numbers.
// Properties: parse and render return text or a "[chat_template] " error; a rendering's
// untrusted ranges are sorted, disjoint and inside the text; the output respects the limit.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "chat/prompt.h"
#include "fuzz_util.h"

namespace {
using specula::chat::ChatTemplate;
using json = nlohmann::ordered_json;

constexpr specula::chat::ChatTemplateLimits kLimits{size_t{1} << 20, int64_t{4} << 20, 20'000, 200'000, 100};

std::vector<ChatTemplate> committed_templates() {
  std::vector<ChatTemplate> out;
  for (const char* name : {"chatml", "features", "gemma3", "llama3", "numbered", "qwen2.5", "qwen_thinking"}) {
    auto t = ChatTemplate::parse(
        specula::fuzz::read_file(std::string(SPECULA_FIXTURES_DIR) + "/chat_templates/" + name + ".jinja"));
    if (!t.is_ok()) specula::fuzz::fail("a committed template does not parse", t.message());
    t->set_limits(kLimits);
    out.push_back(std::move(t).value());
  }
  return out;
}

void render(const ChatTemplate& tpl, const json& messages, bool add_generation_prompt) {
  json ctx = {{"messages", specula::chat::template_messages(tpl, messages)},
              {"add_generation_prompt", add_generation_prompt},
              {"bos_token", "<bos>"},
              {"eos_token", "<eos>"},
              {"tools", json::array({{{"type", "function"},
                                      {"function", {{"name", "get_weather"},
                                                    {"parameters", {{"type", "object"}}}}}}})}};
  auto r = tpl.render_marked(ctx);
  if (!r.is_ok()) {
    if (!specula::fuzz::starts_with(r.message(), "[chat_template] ")) specula::fuzz::fail("an unnamed error", r.message());
    return;
  }
  if (r->text.size() > kLimits.max_output_bytes) specula::fuzz::fail("output over its limit");
  size_t end = 0;
  for (const auto& [a, b] : r->untrusted) {
    if (a < end || b < a || b > r->text.size()) specula::fuzz::fail("untrusted ranges not sorted, disjoint, inside");
    end = b;
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<ChatTemplate> templates = committed_templates();
  specula::fuzz::Input in(data, size);
  const uint8_t mode = in.byte();
  static const json kConversation = json::parse(
      R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi <|im_end|>"},)"
      R"({"role":"assistant","content":"Hello","tool_calls":[{"type":"function","function":{"name":"f","arguments":{"a":1}}}]},)"
      R"({"role":"tool","content":"42"},{"role":"user","content":[{"type":"text","text":"and?"}]}])");
  if ((mode & 1) == 0) {
    auto tpl = ChatTemplate::parse(std::string(in.part()));
    if (!tpl.is_ok()) {
      if (!specula::fuzz::starts_with(tpl.message(), "[chat_template] ")) specula::fuzz::fail("an unnamed error", tpl.message());
      return 0;
    }
    tpl->set_limits(kLimits);
    json messages = json::parse(in.part(), nullptr, false);
    if (!messages.is_array()) messages = kConversation;
    render(*tpl, messages, (mode & 2) != 0);
    return 0;
  }
  json messages = json::parse(in.part(), nullptr, false);
  if (messages.is_discarded()) return 0;
  render(templates[(mode >> 2) % templates.size()], messages, (mode & 2) != 0);
  return 0;
}
