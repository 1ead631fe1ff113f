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
// workspace_id, output_config.effort, thinking {"type": "disabled"}, tools []; refused
// with a 400 naming them until implemented: thinking, output_config.format, container,
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
// (invalid_request_error 400, authentication_error 401, permission_error 403,
// not_found_error 404, request_too_large 413, rate_limit_error 429, api_error 500,
// overloaded_error 503).
// Does not: images, extended thinking, forced tool choice, prompt-caching controls (the
// server's prompt cache works without them; cache_read_input_tokens reports its hits).
#pragma once

#include <cstdint>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "server/openai_api.h"
#include "server/tool_calls.h"

namespace specula::server {

// Parses a /v1/messages body (count_tokens: max_tokens not required, generation fields
// ignored). The result is a chat request (Endpoint::kChat) with OpenAI-style messages
// (the system prompt first).
std::variant<CompletionParams, ApiError> parse_messages_request(const std::string& body, bool count_tokens);

// {"type": "error", "error": {"type": <from the status>, "message"}}.
nlohmann::ordered_json anthropic_error_body(const ApiError& e);

// "end_turn" (end of sequence), "max_tokens", "stop_sequence" ("tool_use" is set by the
// caller when the answer holds calls).
std::string anthropic_stop_reason(const std::string& finish_reason, const std::string& stop_sequence);

struct AnthropicUsage {
  int64_t input_tokens = 0, output_tokens = 0, cache_read_input_tokens = 0;
};
// The non-streamed answer: a text block (when `text` is not empty, or nothing else is
// there) and a tool_use block per call (id "toolu_<message id>_<k>").
nlohmann::ordered_json anthropic_message(const std::string& id, const std::string& model, const std::string& text,
                                 const std::vector<ToolCall>& calls, const std::string& stop_reason,
                                 const std::string& stop_sequence, const AnthropicUsage& usage);
// A tool_use block (input: the call's arguments, an object).
nlohmann::ordered_json anthropic_tool_use(const std::string& message_id, size_t k, const ToolCall& call, bool with_input);
// One server-sent event: "event: <type>\ndata: <json>\n\n".
std::string anthropic_event(const nlohmann::ordered_json& data);

}  // namespace specula::server
