// server/anthropic_api.h — Anthropic's Messages API (POST /v1/messages and
// /v1/messages/count_tokens) on top of the same engine as the OpenAI routes: request
// parsing into CompletionParams (a chat request rendered with the model's template),
// the response body, the streaming events and the error shape.
//
// Reference: Anthropic's API documentation ("Messages", "Streaming Messages", "Errors").
// Request fields read: model, max_tokens (required), messages (role user|assistant,
// content a string or text blocks), system (string or text blocks), stop_sequences,
// stream, temperature [0, 1] (default 1.0), top_p, top_k (no truncation by default;
// older clients send them, current SDKs through extra_body); ignored (they change no
// token): metadata, service_tier, cache_control, inference_geo, speed, user_profile_id,
// workspace_id, tools []; extended thinking (reasoning models, chat/reasoning.h): thinking
// {"type": "enabled", "budget_tokens"} (the thinking budget), {"type": "disabled"}
// (enable_thinking false, budget 0), {"type": "adaptive"}, output_config.effort (a budget),
// thinking blocks of earlier turns (reasoning_content); the answer's thinking is a thinking
// block first (signature ""), streamed as thinking_delta + signature_delta. Refused
// with a 400 naming them until implemented: container,
// mcp_servers, diagnostics, server tools, tool_choice any/tool, and content blocks other
// than text, tool_use and tool_result (image, document); any other field is refused as
// unknown. Tool use: client tools {name, description, input_schema} reach the chat
// template as functions; tool_use blocks of assistant turns become its tool calls and
// tool_result blocks its tool messages; calls the model writes come back as tool_use
// blocks (stop_reason "tool_use"; streamed as input_json_delta).
// Stream event grammar: message_start, content_block_start (index 0, text), ping,
// content_block_delta (text_delta)*, content_block_stop, message_delta (stop_reason,
// stop_sequence, usage.output_tokens), message_stop; a failure mid-stream is an `error`
// event. Errors: {"type": "error", "error": {"type", "message"}} with the HTTP status
// (server/errors.h's table: invalid_request_error 400, authentication_error 401,
// permission_error 403, not_found_error 404, request_too_large 413, rate_limit_error 429,
// api_error 500, overloaded_error 503).
// Does not: images, thinking signatures, prompt-caching controls (the
// server's prompt cache works without them; cache_read_input_tokens reports its hits).
#pragma once

#include <cstdint>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "chat/tool_calls.h"
#include "server/answer_format.h"
#include "server/errors.h"
#include "server/json_util.h"
#include "server/request.h"

namespace specula::server {

// Parses a /v1/messages body (count_tokens: max_tokens not required, generation fields
// ignored). The result is a chat request (Endpoint::kChat) with OpenAI-style messages
// (the system prompt first).
std::variant<CompletionParams, ApiError> parse_messages_request(const std::string& body, bool count_tokens);

// "end_turn" (end of sequence), "max_tokens", "stop_sequence" ("tool_use" is set by the
// caller when the answer holds calls).
std::string anthropic_stop_reason(const std::string& finish_reason, const std::string& stop_sequence);

struct AnthropicUsage {
  int64_t input_tokens = 0, output_tokens = 0, cache_read_input_tokens = 0;
};
// The non-streamed answer: a text block (when `text` is not empty, or nothing else is
// there) and a tool_use block per call (id "toolu_<message id>_<k>").
nlohmann::ordered_json anthropic_message(const std::string& id, const std::string& model, const std::string& text,
                                 const std::vector<chat::ToolCall>& calls, const std::string& stop_reason,
                                 const std::string& stop_sequence, const AnthropicUsage& usage);
// A tool_use block (input: the call's arguments, an object).
nlohmann::ordered_json anthropic_tool_use(const std::string& message_id, size_t k, const chat::ToolCall& call, bool with_input);
// One server-sent event: "event: <type>\ndata: <json>\n\n".
std::string anthropic_event(const nlohmann::ordered_json& data);

// The answer format of /v1/messages: a message object, or its stream of events.
class AnthropicFormat : public AnswerFormat {
 public:
  std::unique_ptr<AnswerFormat> another() const override { return std::make_unique<AnthropicFormat>(); }
  nlohmann::ordered_json error_body(const ApiError& e) const override { return anthropic_error_body(e); }
  StatusCode unknown_model_code() const override { return StatusCode::kNotFound; }
  std::string id_prefix() const override { return "msg_"; }
  nlohmann::ordered_json whole(const std::string& text, const std::vector<TokenLogprob>& lps,
                               const CompletionStream::Update& u) override;
  // The text block starts with the first text; tool_use blocks follow it at the end.
  std::string stream_start() override;
  std::string stream_piece(const CompletionStream::Update& u) override;
  std::string stream_end(const CompletionStream::Update& u) override;

 private:
  // Opens the text block when needed; a delta for non-empty text.
  std::string text_delta(const std::string& text, bool open_even_if_empty = false);
  // The thinking block (first, before any text): opened with the first thinking, closed
  // (signature_delta, content_block_stop) when the text starts or at the end.
  std::string thinking_delta(const std::string& thinking);
  std::string close_thinking();
  bool text_open_ = false;
  bool thinking_open_ = false;
  int index_ = 0;
};

}  // namespace specula::server
