// server/openai_api.h — the OpenAI family: POST /v1/completions and /v1/chat/completions
// (and llama-server's /completion and /chat/completions aliases): parsing a body into
// CompletionParams, the response objects (whole and streamed chunks) and the answer
// format the generation driver writes through.
//
// Follows the OpenAI API reference (platform.openai.com/docs/api-reference: completions,
// chat, "Error codes") for field names, types and the error body
// {"error": {"message", "type", "param", "code"}} (server/errors.h). Sampling fields are
// read as sampling/params.h's table spells them (server/sampling_fields.h); defaults for
// omitted fields are llama-server's (SamplingParams' own: temperature 0.8, top_k 40,
// top_p 0.95, min_p 0.05), since specula is a drop-in for it, unless the model states its
// own (a Hugging Face folder's generation_config.json; as vLLM). Nothing requested is
// silently dropped: a field is read, or on a stated list of fields that change nothing, or
// refused with a 400 naming it (see parse_completion_request).
// Does not tokenize, render chat templates or talk HTTP (prompt.h, generation.h do).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/answer_format.h"
#include "server/errors.h"
#include "server/json_util.h"
#include "server/request.h"

namespace specula::server {

// The structured-output fields of a body (OpenAI's response_format; llama-server's
// grammar / json_schema; vLLM's regex / choice / guided_json / guided_regex /
// guided_choice / guided_grammar), at most one of them. Errors name the field.
std::optional<ApiError> parse_constraint_fields(const nlohmann::ordered_json& body, CompletionParams& c);

// reasoning_effort (OpenAI's, also Responses' reasoning.effort) as a thinking budget in
// tokens: none 0, minimal 128, low 512, medium 2048, high 8192, xhigh unlimited (-1);
// nullopt for anything else (kReasoningEfforts lists the names for errors).
std::optional<int64_t> reasoning_effort_budget(const nlohmann::ordered_json& effort);
extern const char* const kReasoningEfforts;

// Parses a body for `endpoint`. Every wrong type or value is an ApiError naming the field
// ("'temperature' must be in [0.0, 2.0], got \"hot\"").
// `defaults`: the model's sampling defaults (generation_config.json), which replace
// llama-server's for the fields the body leaves out.
std::variant<CompletionParams, ApiError> parse_completion_request(const std::string& body, Endpoint endpoint,
                                                                  const SamplingDefaults& defaults = {});
// llama-server's native /completion body: the fields of /v1/completions plus the native
// answer's own (response_fields).
std::variant<CompletionParams, ApiError> parse_native_completion_request(const std::string& body,
                                                                         const SamplingDefaults& defaults = {});

// Builders. `finish_reason` empty -> null; `index`: the choice's index. Strings are emitted
// as valid UTF-8 (invalid bytes replaced by U+FFFD when serialised with dump_json).
nlohmann::ordered_json completion_response(const std::string& id, int64_t created, const std::string& model,
                                           const std::string& text, const std::vector<TokenLogprob>* logprobs,
                                           const std::string& finish_reason, const Usage& usage);
nlohmann::ordered_json completion_chunk(const std::string& id, int64_t created, const std::string& model,
                                        const std::string& text, const std::vector<TokenLogprob>* logprobs,
                                        int64_t text_offset, const std::string& finish_reason, int index = 0);
nlohmann::ordered_json chat_response(const std::string& id, int64_t created, const std::string& model,
                                     const std::string& content, const std::vector<TokenLogprob>* logprobs,
                                     const std::string& finish_reason, const Usage& usage);
// delta_role: include "role":"assistant" (first chunk).
nlohmann::ordered_json chat_chunk(const std::string& id, int64_t created, const std::string& model,
                                  const std::string* content, bool delta_role,
                                  const std::vector<TokenLogprob>* logprobs, const std::string& finish_reason,
                                  int index = 0);
nlohmann::ordered_json usage_chunk(const std::string& id, int64_t created, const std::string& model, Endpoint endpoint,
                                   const Usage& usage);
nlohmann::ordered_json usage_json(const Usage& usage);

// The answer format of /v1/completions or /v1/chat/completions: whole bodies with
// llama-server's "timings", SSE chunks ending with "data: [DONE]", tool calls as
// OpenAI's tool_calls (streamed as deltas).
class OpenAiFormat : public AnswerFormat {
 public:
  explicit OpenAiFormat(Endpoint endpoint) : endpoint_(endpoint) {}
  std::unique_ptr<AnswerFormat> another() const override { return std::make_unique<OpenAiFormat>(endpoint_); }
  nlohmann::ordered_json error_body(const ApiError& e) const override { return openai_error_body(e); }
  std::string id_prefix() const override { return endpoint_ == Endpoint::kChat ? "chatcmpl-" : "cmpl-"; }
  bool wants_prompt_text(const CompletionParams& c) const override { return c.verbose; }
  nlohmann::ordered_json whole(const std::string& text, const std::vector<TokenLogprob>& lps,
                               const CompletionStream::Update& u) override;
  nlohmann::ordered_json combine(std::vector<nlohmann::ordered_json> choices, const Usage& total) const override;
  std::string stream_piece(const CompletionStream::Update& u) override;
  std::string stream_end(const CompletionStream::Update& u) override;
  std::string stream_close(const Usage* usage) override;

 private:
  std::string text_piece(const std::string& text, const std::vector<TokenLogprob>& logprobs);
  // A reasoning_content delta (chat); the role chunk first when it has not gone out.
  std::string reasoning_piece(const std::string& reasoning);
  std::string role_piece();
  // With include_usage every chunk but the last carries "usage": null (OpenAI's shape).
  std::string chunk(nlohmann::ordered_json j) const;
  // OpenAI's tool_calls array (streamed: with each call's index).
  nlohmann::ordered_json tool_calls_json(const std::vector<chat::ToolCall>& calls, bool with_index) const;

  Endpoint endpoint_;
  bool sent_role_ = false;
  int64_t text_offset_ = 0;
  // The last chunk's timings, repeated on the usage chunk that follows it (llama-server puts
  // them on whichever chunk is last).
  nlohmann::ordered_json timings_;
};

}  // namespace specula::server
