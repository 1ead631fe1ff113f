// server/responses_api.h — OpenAI's Responses API on the same engine as the other routes:
// POST /v1/responses (whole or streamed), GET /v1/responses/{id}, DELETE
// /v1/responses/{id}, POST /v1/responses/{id}/cancel, GET /v1/responses/{id}/input_items.
//
// Reference: OpenAI's API reference ("Responses": create, retrieve, delete, cancel, input
// items; "Streaming events"), and the openai Python SDK's types (openai/types/responses/).
// A request becomes a chat request (CompletionParams, Endpoint::kChat) rendered with the
// model's template:
//   instructions          -> a system message first (not carried to follow-ups, as OpenAI)
//   input                 -> a string (one user message) or items: messages (role user,
//                            system, developer or assistant; content a string or
//                            input_text / output_text parts), function_call (an assistant
//                            turn's tool call), function_call_output (a tool message),
//                            reasoning (an assistant turn's reasoning_content)
//   previous_response_id  -> the stored conversation (server/response_store.h) first, then
//                            the new items: a follow-up sends only what is new
//   tools / tool_choice / parallel_tool_calls -> function tools (chat/tool_calls.h)
//   text.format           -> json_schema / json_object constraints (grammar/constraint.h)
//   max_output_tokens, temperature, top_p (+ the OpenAI sampling fields), stream, store,
//   reasoning.effort (a thinking budget), metadata (kept and echoed), user,
//   chat_template_kwargs (specula's, as on chat).
// Ignored (they change no token): service_tier, prompt_cache_key, safety_identifier,
// truncation "disabled", include [] / ["reasoning.encrypted_content"]. Refused with a 400
// naming them: background true, conversation, prompt, non-function tools, images and files,
// item_reference items, any unknown field or item type.
// The answer: a Response object — output items reasoning (thinking, chat/reasoning.h),
// message (output_text), function_call (call_id "call_<hex>") — with status completed, or
// incomplete (incomplete_details.reason max_output_tokens), usage (input_tokens with
// input_tokens_details.cached_tokens from the prompt cache, output_tokens with
// output_tokens_details.reasoning_tokens). Streamed: named SSE events, each with a
// sequence_number: response.created, response.in_progress, then per item
// output_item.added, content_part.added, output_text.delta* / reasoning_text.delta*,
// *.done, content_part.done, output_item.done (function calls: function_call_arguments
// .delta and .done), and response.completed (or response.incomplete; a failure: an error
// event, then response.failed).
// Errors: OpenAI's error body; an unknown previous_response_id is a 404 naming it, one of
// another model or evicted a 400.
// Does not: background responses, conversations objects, built-in tools (web search,
// file search, computer use, code interpreter), images, logprobs.
#pragma once

#include <memory>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "server/answer_format.h"
#include "server/errors.h"
#include "server/generation.h"
#include "server/http.h"
#include "server/request.h"
#include "server/response_store.h"
#include "server/served_model.h"

namespace specula::server {

// A parsed POST /v1/responses.
struct ResponsesRequest {
  CompletionParams params;                 // the chat request it renders to
  nlohmann::ordered_json history;          // the stored conversation (previous_response_id), items
  nlohmann::ordered_json input;            // this request's input items (a string made one message)
  std::string previous_response_id;
  bool store = true;
  nlohmann::ordered_json echo;             // request fields the Response object repeats
};

// Parses a body; `store` resolves previous_response_id, `model` is the served model's id
// (a stored response of another model is refused).
std::variant<ResponsesRequest, ApiError> parse_responses_request(const std::string& body, ResponseStore& store,
                                                                 const std::string& model,
                                                                 const SamplingDefaults& defaults = {});

// The items a conversation of Responses items renders to, as chat messages (system
// instructions first when not empty). Errors name the item ("input[2].type ...").
std::variant<nlohmann::ordered_json, ApiError> items_to_messages(const nlohmann::ordered_json& items,
                                                                 const std::string& instructions);

// The answer format of /v1/responses (one choice).
class ResponsesFormat : public AnswerFormat {
 public:
  ResponsesFormat(const ResponsesRequest& request, ResponseStore& store);
  std::unique_ptr<AnswerFormat> another() const override { return std::make_unique<ResponsesFormat>(req_, store_); }
  nlohmann::ordered_json error_body(const ApiError& e) const override { return openai_error_body(e); }
  std::string id_prefix() const override { return "resp_"; }
  nlohmann::ordered_json whole(const std::string& text, const std::vector<TokenLogprob>& lps,
                               const CompletionStream::Update& u) override;
  std::string stream_start() override;
  std::string stream_piece(const CompletionStream::Update& u) override;
  std::string stream_end(const CompletionStream::Update& u) override;
  const std::string& response_id() const { return id_; }
  // The Response object before any output (what GET shows while it runs).
  nlohmann::ordered_json in_progress_object(const std::string& model) const;
  // Whether the answer was written (whole or to its last event).
  bool finished() const { return finished_; }

 private:
  // The Response object with `status` and `output` (and usage when finished).
  nlohmann::ordered_json response_object(const std::string& status, const nlohmann::ordered_json& output) const;
  std::string event(const std::string& type, nlohmann::ordered_json data);
  // Streaming helpers: open/close the reasoning and message items.
  std::string reasoning_delta(const std::string& text);
  std::string close_reasoning(const std::string& status = "completed");
  std::string text_delta(const std::string& text);
  std::string close_message(const std::string& status = "completed");
  // The finished answer (its output items in done_items_): the Response object with its
  // status and usage, stored when asked.
  nlohmann::ordered_json finish(const CompletionStream::Update& u, std::string* status);
  nlohmann::ordered_json function_call_item(const chat::ToolCall& call, size_t k) const;

  const ResponsesRequest& req_;
  ResponseStore& store_;
  std::string id_;          // resp_<hex>
  std::string reasoning_id_, message_id_;
  int64_t created_ = 0;
  int64_t seq_ = 0;         // the next sequence_number
  int output_index_ = 0;    // the next output item's index
  bool reasoning_open_ = false, message_open_ = false;
  bool finished_ = false;
  int reasoning_index_ = -1, message_index_ = -1;
  std::string reasoning_text_, message_text_;
  nlohmann::ordered_json done_items_ = nlohmann::ordered_json::array();  // streamed items, finished
};

// The routes (server/routes.h).
void handle_responses(ServedModel& served, const http::Request& req, http::Exchange& ex, GenerationLog* log);
// GET / DELETE /v1/responses/{id}, POST .../cancel, GET .../input_items: the store's
// (no model runs, none need be loaded).
void handle_response_item(ResponseStore& store, const http::Request& req, http::Exchange& ex);
// Whether `path` is one of those: /v1/responses/ and something.
bool is_response_item_path(const std::string& path);

}  // namespace specula::server
