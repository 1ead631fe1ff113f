// fuzz/request_fuzz.cpp — libFuzzer target for the request parsers of every API family the
// server answers: OpenAI /v1/completions and /v1/chat/completions (server/openai_api.h),
// llama-server's native /completion, Anthropic /v1/messages and count_tokens
// (server/anthropic_api.h), OpenAI /v1/responses (server/responses_api.h, with a stored
// response to continue from) — and for a chat request that parses, the rendering of its
// messages and tools by a committed chat template, as the server does next.
// Input: a selector byte (route = selector % 6), then the request body.
// Properties: a parser returns parameters or an ApiError with a message; a parsed request
// keeps its documented bounds (n in 1..16, logprobs in -1..20, at most 16 stop strings);
// rendering returns text or a "[chat_template] " error.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "chat/prompt.h"
#include "fuzz_util.h"
#include "server/anthropic_api.h"
#include "server/openai_api.h"
#include "server/response_store.h"
#include "server/responses_api.h"

namespace {
using namespace specula;
using namespace specula::server;
using json = nlohmann::ordered_json;

const chat::ChatTemplate& chat_template() {
  static const chat::ChatTemplate tpl = [] {
    auto t = chat::ChatTemplate::parse(fuzz::read_file(std::string(SPECULA_FIXTURES_DIR) + "/chat_templates/qwen2.5.jinja"));
    if (!t.is_ok()) fuzz::fail("the committed template does not parse", t.message());
    t->set_limits({size_t{1} << 20, int64_t{4} << 20, 20'000, 200'000, 100});
    return std::move(t).value();
  }();
  return tpl;
}

void check(const CompletionParams& c) {
  if (c.n < 1 || c.n > 16) fuzz::fail("n outside 1..16", std::to_string(c.n));
  if (c.logprobs < -1 || c.logprobs > 20) fuzz::fail("logprobs outside -1..20", std::to_string(c.logprobs));
  if (c.stop.size() > 16) fuzz::fail("more than 16 stop strings");
  if (c.endpoint != Endpoint::kChat || !c.messages.is_array()) return;
  const chat::ChatTemplate& tpl = chat_template();
  json ctx = {{"messages", chat::template_messages(tpl, c.messages)},
              {"add_generation_prompt", c.add_generation_prompt},
              {"bos_token", ""},
              {"eos_token", "<|endoftext|>"}};
  if (c.template_kwargs.is_object())
    for (auto it = c.template_kwargs.begin(); it != c.template_kwargs.end(); ++it) ctx[it.key()] = it.value();
  if (!c.tools.is_null()) ctx["tools"] = c.tools;
  auto r = tpl.render_marked(ctx);
  if (!r.is_ok() && !fuzz::starts_with(r.message(), "[chat_template] ")) fuzz::fail("an unnamed template error", r.message());
}

template <typename T>
void expect(const std::variant<T, ApiError>& v) {
  if (const ApiError* e = std::get_if<ApiError>(&v)) {
    if (e->message.empty()) fuzz::fail("an error without a message");
    return;
  }
  if constexpr (std::is_same_v<T, ResponsesRequest>) {
    check(std::get<T>(v).params);
  } else {
    check(std::get<T>(v));
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ResponseStore store;  // in memory only
  static const bool stored = [] {
    StoredResponse r;
    r.id = "resp_0123456789abcdef01234567";
    r.model = "fuzz-model";
    r.response = json::object({{"id", r.id}, {"object", "response"}, {"status", "completed"}});
    r.conversation = json::parse(
        R"([{"type":"message","role":"user","content":[{"type":"input_text","text":"Hi"}]},)"
        R"({"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hello"}]}])");
    store.put(r, false);
    return true;
  }();
  (void)stored;
  fuzz::Input in(data, size);
  const uint8_t route = in.byte() % 6;
  const std::string body(in.rest());
  switch (route) {
    case 0: expect(parse_completion_request(body, Endpoint::kCompletions)); break;
    case 1: expect(parse_completion_request(body, Endpoint::kChat)); break;
    case 2: expect(parse_native_completion_request(body)); break;
    case 3: expect(parse_messages_request(body, false)); break;
    case 4: expect(parse_messages_request(body, true)); break;
    default: expect(parse_responses_request(body, store, "fuzz-model")); break;
  }
  return 0;
}
