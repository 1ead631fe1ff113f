// tests/server/openai_api_test.cpp — server::parse_completion_request: defaults, every
// field's accepted forms and its refusals (status 400, the field named in `param`), deep
// nesting, and the response builders' shapes (error body, logprobs, usage, chunks).
// No model needed.
#include "server/openai_api.h"

#include <gtest/gtest.h>

#include <string>

namespace specula::server {
namespace {

using nlohmann::json;

CompletionParams ok(const std::string& body, Endpoint e = Endpoint::kCompletions) {
  auto r = parse_completion_request(body, e);
  if (auto* err = std::get_if<ApiError>(&r)) {
    ADD_FAILURE() << body << " -> " << err->message;
    return {};
  }
  return std::get<CompletionParams>(r);
}

ApiError bad(const std::string& body, Endpoint e = Endpoint::kCompletions) {
  auto r = parse_completion_request(body, e);
  if (!std::holds_alternative<ApiError>(r)) {
    ADD_FAILURE() << body << " was accepted";
    return {};
  }
  return std::get<ApiError>(r);
}

TEST(OpenAiApi, TheModelsGenerationConfigReplacesTheDefaultsOfOmittedFields) {
  SamplingDefaults d;
  d.temperature = 0.7f;
  d.top_p = 0.8f;
  d.top_k = 20;
  auto r = parse_completion_request(R"({"prompt": "hi", "top_p": 0.5})", Endpoint::kCompletions, d);
  ASSERT_TRUE(std::holds_alternative<CompletionParams>(r));
  const SamplingParams& s = std::get<CompletionParams>(r).sampling;
  EXPECT_FLOAT_EQ(s.temperature, 0.7f);
  EXPECT_EQ(s.top_k, 20);
  EXPECT_FLOAT_EQ(s.top_p, 0.5f);  // given by the client
  EXPECT_FLOAT_EQ(s.min_p, 0.05f); // not in the model's config: llama-server's
}

TEST(OpenAiApi, DefaultsAreLlamaServers) {
  CompletionParams c = ok(R"({"prompt": "hi"})");
  EXPECT_EQ(c.prompts.at(0).text, "hi");
  EXPECT_FALSE(c.prompts.at(0).is_ids);
  EXPECT_FLOAT_EQ(c.sampling.temperature, 0.8f);
  EXPECT_EQ(c.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(c.sampling.top_p, 0.95f);
  EXPECT_FLOAT_EQ(c.sampling.min_p, 0.05f);
  EXPECT_FALSE(c.max_tokens.has_value());
  EXPECT_FALSE(c.seed_given);
  EXPECT_FALSE(c.stream);
  EXPECT_EQ(c.logprobs, -1);
  EXPECT_TRUE(c.stop.empty());
}

TEST(OpenAiApi, AcceptedForms) {
  CompletionParams c = ok(R"({"prompt": [2, 100, 262143], "max_tokens": 5, "temperature": 0, "seed": -1,
      "stop": ["a", "", "b"], "stream": true, "stream_options": {"include_usage": true}, "logprobs": 3,
      "top_k": 0, "n": 1, "user": {"x": [1, 2]}, "model": "m"})");
  EXPECT_TRUE(c.prompts.at(0).is_ids);
  EXPECT_EQ(c.prompts.at(0).ids, (std::vector<int32_t>{2, 100, 262143}));
  EXPECT_EQ(*c.max_tokens, 5);
  EXPECT_FLOAT_EQ(c.sampling.temperature, 0.0f);
  EXPECT_TRUE(c.seed_given);
  EXPECT_EQ(c.sampling.seed, static_cast<uint64_t>(-1));
  EXPECT_EQ(c.stop, (std::vector<std::string>{"a", "b"}));  // empty strings dropped
  EXPECT_TRUE(c.stream);
  EXPECT_TRUE(c.include_usage);
  EXPECT_EQ(c.logprobs, 3);
  EXPECT_EQ(c.model, "m");
  EXPECT_EQ(ok(R"({"prompt": ["one string"]})").prompts.at(0).text, "one string");
  // Batches (one choice per prompt): texts, or token-id arrays as lm-evaluation-harness's
  // local-completions sends them.
  CompletionParams batch = ok(R"({"prompt": ["a", [5, 6]]})");
  ASSERT_EQ(batch.prompts.size(), 2u);
  EXPECT_EQ(batch.prompts[0].text, "a");
  EXPECT_EQ(batch.prompts[1].ids, (std::vector<int32_t>{5, 6}));
  // max_tokens 0 on completions: score or prefill only (the field it came from is kept).
  CompletionParams score = ok(R"({"prompt": [[2, 3, 4]], "max_tokens": 0, "echo": true, "logprobs": 1})");
  EXPECT_EQ(*score.max_tokens, 0);
  EXPECT_TRUE(score.echo);
  EXPECT_EQ(ok(R"({"prompt": "x", "n_predict": 0})").max_tokens_field, "n_predict");
  EXPECT_EQ(*ok(R"({"prompt": "x", "n_predict": 0})").max_tokens, 0);
  EXPECT_EQ(*ok(R"({"prompt": "x", "max_tokens": 7.0})").max_tokens, 7);  // integral float
  EXPECT_EQ(ok(R"({"prompt": "x", "logprobs": true})").logprobs, 0);
  EXPECT_EQ(ok(R"({"prompt": "x", "stop": "\n"})").stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(*ok(R"({"prompt": "x", "max_tokens": 3, "max_completion_tokens": 9})").max_tokens, 9);
  EXPECT_EQ(ok(R"({"prompt": "x", "temperature": null})").sampling.temperature, 0.8f);  // null = omitted
}

TEST(OpenAiApi, ChatMessagesAreFlattened) {
  CompletionParams c = ok(R"({"messages": [{"role": "system", "content": "s"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "name": "bot"}], "logprobs": true, "top_logprobs": 4})",
                          Endpoint::kChat);
  ASSERT_EQ(c.messages.size(), 3u);
  EXPECT_EQ(c.messages[1]["content"], "a\n\nb");  // llama-server joins text parts with a blank line
  EXPECT_EQ(c.messages[2]["content"], "");
  EXPECT_EQ(c.messages[2]["name"], "bot");
  EXPECT_EQ(c.logprobs, 4);
}

TEST(OpenAiApi, RefusalsNameTheField) {
  struct Case {
    const char* body;
    Endpoint e;
    const char* param;
  };
  const Case cases[] = {
      {R"({"max_tokens": 1})", Endpoint::kCompletions, "prompt"},
      {R"({"prompt": 1})", Endpoint::kCompletions, "prompt"},
      {R"({"prompt": []})", Endpoint::kCompletions, "prompt"},
      {R"({"prompt": ["a", []]})", Endpoint::kCompletions, "prompt"},
      {R"({"prompt": ["a", 3.5]})", Endpoint::kCompletions, "prompt"},
      {R"({"prompt": [[1], [2]], "n": 2})", Endpoint::kCompletions, "n"},
      {R"({"prompt": [1, -1]})", Endpoint::kCompletions, "prompt"},
      {R"({"prompt": [1, 4294967296]})", Endpoint::kCompletions, "prompt"},
      {R"({"prompt": [1, 18446744073709551615]})", Endpoint::kCompletions, "prompt"},
      {R"({"prompt": [1, 2.5]})", Endpoint::kCompletions, "prompt"},
      {R"({"prompt": "x", "model": 3})", Endpoint::kCompletions, "model"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", Endpoint::kChat, "max_tokens"},
      {R"({"prompt": "x", "n_predict": -2})", Endpoint::kCompletions, "n_predict"},
      {R"({"prompt": "x", "max_completion_tokens": -1})", Endpoint::kCompletions, "max_completion_tokens"},
      {R"({"prompt": "x", "max_tokens": -1})", Endpoint::kCompletions, "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1.5})", Endpoint::kCompletions, "max_tokens"},
      {R"({"prompt": "x", "max_tokens": "3"})", Endpoint::kCompletions, "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1e300})", Endpoint::kCompletions, "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 99999999999})", Endpoint::kCompletions, "max_tokens"},
      {R"({"prompt": "x", "temperature": "hot"})", Endpoint::kCompletions, "temperature"},
      {R"({"prompt": "x", "temperature": 2.01})", Endpoint::kCompletions, "temperature"},
      {R"({"prompt": "x", "top_p": -0.1})", Endpoint::kCompletions, "top_p"},
      {R"({"prompt": "x", "unknown_field": 1})", Endpoint::kCompletions, "unknown_field"},
      {R"({"prompt": "x", "response_format": {"type": "xml"}})", Endpoint::kCompletions, "response_format"},
      {R"({"prompt": "x", "response_format": "json"})", Endpoint::kCompletions, "response_format"},
      {R"({"prompt": "x", "response_format": {"type": "json_schema"}})", Endpoint::kCompletions, "response_format"},
      {R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": 3}}})",
       Endpoint::kCompletions, "response_format.json_schema.schema"},
      {R"({"prompt": "x", "response_format": {"type": "json_object", "extra": 1}})", Endpoint::kCompletions,
       "response_format"},
      {R"({"prompt": "x", "grammar": 1})", Endpoint::kCompletions, "grammar"},
      {R"({"prompt": "x", "regex": ""})", Endpoint::kCompletions, "regex"},
      {R"({"prompt": "x", "choice": ["a", 1]})", Endpoint::kCompletions, "choice"},
      {R"({"prompt": "x", "guided_json": "{bad"})", Endpoint::kCompletions, "guided_json"},
      {R"({"prompt": "x", "regex": "a", "grammar": "root ::= [a]"})", Endpoint::kCompletions, "grammar"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})", Endpoint::kChat,
       "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function", "function": {"name": "f"}},
          "tools": [{"type": "function", "function": {"name": "g"}}]})", Endpoint::kChat, "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "sometimes",
          "tools": [{"type": "function", "function": {"name": "g"}}]})", Endpoint::kChat, "tool_choice"},
      {R"({"prompt": "x", "min_p": -0.1})", Endpoint::kCompletions, "min_p"},
      {R"({"prompt": "x", "top_k": -2})", Endpoint::kCompletions, "top_k"},
      {R"({"prompt": "x", "seed": 0.5})", Endpoint::kCompletions, "seed"},
      // Above INT64_MAX (once signed overflow in the range check: UBSan found it).
      {R"({"prompt": "x", "seed": 9223372036854775808})", Endpoint::kCompletions, "seed"},
      {R"({"prompt": "x", "seed": 18446744073709551615})", Endpoint::kCompletions, "seed"},
      {R"({"prompt": "x", "max_tokens": 18446744073709551615})", Endpoint::kCompletions, "max_tokens"},
      {R"({"prompt": "x", "n": 17})", Endpoint::kCompletions, "n"},
      {R"({"prompt": "x", "n": 2, "echo": true})", Endpoint::kCompletions, "echo"},
      {R"({"prompt": "x", "xtc_probability": 1.5})", Endpoint::kCompletions, "xtc_probability"},
      {R"({"prompt": "x", "dry_sequence_breakers": "x"})", Endpoint::kCompletions, "dry_sequence_breakers"},
      {R"({"prompt": "x", "stream": "true"})", Endpoint::kCompletions, "stream"},
      {R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", Endpoint::kCompletions, "stop"},
      {R"({"prompt": "x", "stop": [1]})", Endpoint::kCompletions, "stop"},
      {R"({"prompt": "x", "stream_options": []})", Endpoint::kCompletions, "stream_options"},
      {R"({"prompt": "x", "logprobs": 21})", Endpoint::kCompletions, "logprobs"},
      {R"({"prompt": "x", "top_logprobs": 21})", Endpoint::kCompletions, "top_logprobs"},
      {R"({"prompt": "x", "logit_bias": {"": 1}})", Endpoint::kCompletions, "logit_bias"},
      {R"({"prompt": "x", "n_probs": 21})", Endpoint::kCompletions, "n_probs"},
      {R"({"prompt": "x", "samplers": ["top_k"]})", Endpoint::kCompletions, "samplers"},
      {R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true})", Endpoint::kChat,
       "continue_final_message"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"messages": []}})", Endpoint::kChat,
       "chat_template_kwargs"},
      {R"({"prompt": "x", "logit_bias": {"1": 101}})", Endpoint::kCompletions, "logit_bias"},
      {R"({"prompt": "x", "presence_penalty": 2.5})", Endpoint::kCompletions, "presence_penalty"},
      {R"({"messages": []})", Endpoint::kChat, "messages"},
      {R"({"messages": [{"role": "robot", "content": "x"}]})", Endpoint::kChat, "messages"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", Endpoint::kChat, "messages"},
      {R"({"messages": [{"role": "user", "content": 1}]})", Endpoint::kChat, "messages"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})", Endpoint::kChat, "logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", Endpoint::kChat, "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0})", Endpoint::kChat,
       "max_completion_tokens"},
  };
  for (const Case& c : cases) {
    ApiError e = bad(c.body, c.e);
    EXPECT_EQ(http_status(e), 400) << c.body;
    EXPECT_STREQ(openai_error_type(e), "invalid_request_error") << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
    EXPECT_FALSE(e.message.empty());
  }
}

TEST(OpenAiApi, StructuredOutputFields) {
  struct Case {
    const char* body;
    ConstraintKind kind;
    const char* field;
    const char* text;
  };
  const Case cases[] = {
      {R"({"prompt": "x", "response_format": {"type": "json_object"}})", ConstraintKind::kJsonObject, "response_format", ""},
      {R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "n", "strict": true,
          "schema": {"type": "object", "properties": {"b": {}, "a": {}}}}}})",
       ConstraintKind::kJsonSchema, "response_format", R"({"type":"object","properties":{"b":{},"a":{}}})"},
      {R"({"prompt": "x", "response_format": {"type": "json_object", "schema": {"type": "array"}}})",
       ConstraintKind::kJsonSchema, "response_format", R"({"type":"array"})"},
      {R"({"prompt": "x", "json_schema": {"type": "integer"}})", ConstraintKind::kJsonSchema, "json_schema",
       R"({"type":"integer"})"},
      {R"({"prompt": "x", "guided_json": "{\"type\": \"string\"}"})", ConstraintKind::kJsonSchema, "guided_json",
       R"({"type":"string"})"},
      {R"({"prompt": "x", "regex": "a+b"})", ConstraintKind::kRegex, "regex", "a+b"},
      {R"({"prompt": "x", "guided_regex": "c"})", ConstraintKind::kRegex, "guided_regex", "c"},
      {R"({"prompt": "x", "grammar": "root ::= \"a\""})", ConstraintKind::kGbnf, "grammar", "root ::= \"a\""},
      {R"({"prompt": "x", "guided_grammar": "root ::= [a]"})", ConstraintKind::kGbnf, "guided_grammar", "root ::= [a]"},
      {R"({"prompt": "x", "choice": ["a", "b"]})", ConstraintKind::kChoice, "choice", ""},
      {R"({"prompt": "x", "guided_choice": ["a"]})", ConstraintKind::kChoice, "guided_choice", ""},
  };
  for (const Case& c : cases) {
    auto r = parse_completion_request(c.body, Endpoint::kCompletions);
    ASSERT_TRUE(std::holds_alternative<CompletionParams>(r)) << c.body << ": " << std::get<ApiError>(r).message;
    const CompletionParams& p = std::get<CompletionParams>(r);
    ASSERT_TRUE(p.constraint.has_value()) << c.body;
    EXPECT_EQ(p.constraint->kind, c.kind) << c.body;
    EXPECT_EQ(p.constraint_field, c.field) << c.body;
    if (*c.text) {
      EXPECT_EQ(p.constraint->text, c.text) << c.body;
    }
  }
  // No constraint: text, null, an empty grammar (llama-server's "none").
  for (const char* body : {R"({"prompt": "x", "response_format": {"type": "text"}})", R"({"prompt": "x", "regex": null})",
                           R"({"prompt": "x", "grammar": ""})"}) {
    auto r = parse_completion_request(body, Endpoint::kCompletions);
    ASSERT_TRUE(std::holds_alternative<CompletionParams>(r)) << body;
    EXPECT_FALSE(std::get<CompletionParams>(r).constraint.has_value()) << body;
  }
  auto r = parse_completion_request(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
      "tools": [{"type": "function", "function": {"name": "g"}}]})", Endpoint::kChat);
  ASSERT_TRUE(std::holds_alternative<CompletionParams>(r));
  EXPECT_EQ(std::get<CompletionParams>(r).forced_tool, "*");
  r = parse_completion_request(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function",
      "function": {"name": "g"}}, "tools": [{"type": "function", "function": {"name": "g"}}]})", Endpoint::kChat);
  ASSERT_TRUE(std::holds_alternative<CompletionParams>(r));
  EXPECT_EQ(std::get<CompletionParams>(r).forced_tool, "g");
}

TEST(OpenAiApi, MalformedBodies) {
  for (const char* body : {"", "{", "[1]", "\"x\"", "null", "{\"prompt\": NaN}", "{\"prompt\": \"\\ud800\"}",
                           "{\"prompt\": \"a\xff\"}", "{\"prompt\": 1e999}"}) {
    ApiError e = bad(body);
    EXPECT_EQ(http_status(e), 400) << body;
    EXPECT_TRUE(e.param.empty() || e.param == "prompt") << body;
  }
}

TEST(OpenAiApi, DeepNestingIsRefusedNotRecursed) {
  // 100k levels: parsing, copying or dumping this recursively would overflow the stack.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string& body : {deep, "{\"prompt\": " + deep + "}", "{\"max_tokens\": " + deep + "}",
                                  std::string(100000, '['), "{\"stop\": [" + deep + "]}"}) {
    ApiError e = bad(body);
    EXPECT_EQ(http_status(e), 400);
    EXPECT_LT(e.message.size(), 300u);
  }
  // Brackets inside strings do not count.
  CompletionParams c = ok("{\"prompt\": \"" + std::string(1000, '[') + "\"}");
  EXPECT_EQ(c.prompts.at(0).text.size(), 1000u);
  // Moderate nesting in an ignored field is fine.
  ok("{\"prompt\": \"x\", \"metadata\": " + std::string(30, '[') + std::string(30, ']') + "}");
}

TEST(OpenAiApi, ErrorMessagesAreShort) {
  std::string items = "1";
  for (int i = 0; i < 20000; ++i) items += ",1";
  const std::string big = "{\"prompt\": \"x\", \"temperature\": [" + items + "]}";
  ApiError e = bad(big);
  EXPECT_EQ(e.param, "temperature");
  EXPECT_LT(e.message.size(), 200u) << e.message.substr(0, 300);
}

TEST(OpenAiApi, ErrorBodyShape) {
  json j = openai_error_body(api_error(StatusCode::kBusy, "full", "", "queue_full"));
  EXPECT_EQ(j["error"]["message"], "full");
  EXPECT_EQ(j["error"]["type"], "rate_limit_error");
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(j["error"]["code"], "queue_full");
}

TEST(OpenAiApi, ResponseBuilders) {
  std::vector<TokenLogprob> lps = {{"Hel", -0.1f, {{"Hel", -0.1f}, {"He", -2.5f}}, 1, {1, 2}}, {"lo", -0.2f, {{"lo", -0.2f}}, 3, {3}}};
  json r = completion_response("cmpl-1", 5, "m", "Hello", &lps, "length", Usage{3, 2});
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"][0]["text"], "Hello");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["total_tokens"], 5);
  EXPECT_EQ(r["choices"][0]["logprobs"]["tokens"], json({"Hel", "lo"}));
  EXPECT_EQ(r["choices"][0]["logprobs"]["text_offset"], json({0, 3}));
  EXPECT_EQ(r["choices"][0]["logprobs"]["top_logprobs"][0].size(), 2u);
  json c = chat_response("chatcmpl-1", 5, "m", "Hi", &lps, "stop", Usage{3, 2});
  EXPECT_EQ(c["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(c["choices"][0]["logprobs"]["content"][0]["bytes"], json({'H', 'e', 'l'}));
  EXPECT_EQ(c["choices"][0]["logprobs"]["content"][0]["top_logprobs"][1]["token"], "He");
  const std::string content = "x";
  json ch = chat_chunk("chatcmpl-1", 5, "m", &content, true, nullptr, "");
  EXPECT_EQ(ch["object"], "chat.completion.chunk");
  EXPECT_EQ(ch["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(ch["choices"][0]["finish_reason"].is_null());
  json u = usage_chunk("cmpl-1", 5, "m", Endpoint::kCompletions, Usage{1, 2});
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["completion_tokens"], 2);
  // Invalid UTF-8 in a token is replaced when serialised, never thrown.
  std::vector<TokenLogprob> partial = {{"\xF0\x9F", -1.0f, {}, 4, {}}};
  const std::string s = dump_json(completion_response("c", 0, "m", "", &partial, "length", Usage{}));
  EXPECT_NE(s.find("\xEF\xBF\xBD"), std::string::npos) << s;
}

}  // namespace
}  // namespace specula::server

namespace specula::server {
namespace {

// llama-server's request forms (server/llama_api.h): mixed and prompt_string prompts,
// n_probs, return_tokens, text logit_bias keys, template options, response_fields on the
// native route only, and the fields accepted because they change nothing.
TEST(OpenAiApi, LlamaServerRequestForms) {
  CompletionParams c = ok(R"({"prompt": ["Hello", 12, " world"], "n_probs": 5, "return_tokens": true})");
  ASSERT_EQ(c.prompts.size(), 1u);
  EXPECT_TRUE(c.prompts[0].mixed.is_array());
  EXPECT_EQ(c.logprobs, 5);
  EXPECT_TRUE(c.return_tokens);
  c = ok(R"({"prompt": {"prompt_string": "Hi"}})");
  ASSERT_EQ(c.prompts.size(), 1u);
  EXPECT_EQ(c.prompts[0].text, "Hi");
  c = ok(R"({"prompt": [{"prompt_string": "a"}, "b", [1, 2]]})");
  EXPECT_EQ(c.prompts.size(), 3u);
  c = ok(R"({"prompt": "x", "logit_bias": {"Hello": -5, "7": 1}})");
  ASSERT_EQ(c.text_bias.size(), 1u);
  EXPECT_EQ(c.text_bias[0].first, "Hello");
  ASSERT_EQ(c.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(c.sampling.logit_bias[0].first, 7);
  c = ok(R"({"prompt": "x", "cache_prompt": true, "id_slot": 1, "n_keep": 4, "verbose": true, "return_progress": true,
             "speculative.n_max": 8, "mirostat": 0, "typical_p": 1, "min_keep": 0, "lora": []})");
  c = ok(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
             "continue_final_message": true, "chat_template_kwargs": {"enable_thinking": false}})",
         Endpoint::kChat);
  EXPECT_TRUE(c.continue_final_message);
  EXPECT_FALSE(c.add_generation_prompt);
  EXPECT_EQ(c.template_kwargs["enable_thinking"], false);
  // response_fields is the native answer's: /v1/completions refuses it, /completion reads it.
  EXPECT_EQ(bad(R"({"prompt": "x", "response_fields": ["content"]})").param, "response_fields");
  auto n = parse_native_completion_request(R"({"prompt": "x", "response_fields": ["content", "timings/prompt_n"]})");
  ASSERT_TRUE(std::holds_alternative<CompletionParams>(n));
  EXPECT_EQ(std::get<CompletionParams>(n).response_fields.size(), 2u);
  // Refused with the reason: what would change the result.
  ApiError e = bad(R"({"prompt": "x", "mirostat": 2})");
  EXPECT_EQ(e.param, "mirostat");
  EXPECT_NE(e.message.find("not implemented"), std::string::npos) << e.message;
  EXPECT_EQ(bad(R"({"prompt": {"prompt_string": "x", "multimodal_data": ["AA=="]}})").param, "prompt");
}

}  // namespace
}  // namespace specula::server
