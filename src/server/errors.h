// server/errors.h — the server's one error model: an ApiError is a StatusCode (what kind
// of failure, include/specula/status.h), a message for the API's user, the request field
// at fault and, where an API defines one, its error code string ("context_length_exceeded").
// One table (errors.cpp kTable) maps each StatusCode to its HTTP status and to the error
// type of each API family — OpenAI's {"error": {"message", "type", "param", "code"}} and
// Anthropic's {"type": "error", "error": {"type", "message"}}:
//
//   code               HTTP  OpenAI type            Anthropic type
//   invalid_argument   400   invalid_request_error  invalid_request_error
//   context_overflow   400   exceed_context_size_error invalid_request_error (code context_length_exceeded)
//   unimplemented      400   invalid_request_error  invalid_request_error
//   unauthenticated    401   authentication_error   authentication_error
//   permission_denied  403   permission_error       permission_error
//   not_found          404   not_found_error        not_found_error
//   timeout            408   invalid_request_error  invalid_request_error
//   too_large          413   invalid_request_error  request_too_large
//   busy               429   rate_limit_error       rate_limit_error
//   internal           500   server_error           api_error
//   unavailable        503   server_error           overloaded_error
//   cancelled          503   server_error           overloaded_error
//
// Errors are told apart by code, never by their text. Messages read as API errors: an
// engine Status becomes an ApiError through from_status(), which drops the "[component] "
// tags meant for logs.
// Does not: write HTTP (server.cpp and the route files do).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "specula/status.h"

namespace specula::server {

struct ApiError {
  StatusCode code = StatusCode::kInvalidArgument;
  std::string message;
  std::string param;     // the request field at fault; empty -> null
  std::string api_code;  // the API's own code string (OpenAI "code"); empty -> null
  // The HTTP status when the connection layer chose it itself (405, 408, 431); 0: the
  // table's for `code`.
  int http_override = 0;
  // More fields of OpenAI's error object (a context overflow's n_prompt_tokens and n_ctx,
  // as llama-server reports them); null: none.
  nlohmann::ordered_json details;
};

// Shorthands.
ApiError bad_request(std::string param, std::string message);  // kInvalidArgument
ApiError api_error(StatusCode code, std::string message, std::string param = "", std::string api_code = "");
// An engine Status as an ApiError: its code, its message without "[component] " tags.
ApiError from_status(const Status& st, std::string param = "");

// The table.
int http_status(const ApiError& e);
const char* openai_error_type(const ApiError& e);
const char* anthropic_error_type(const ApiError& e);

// {"error": {"message", "type", "param", "code"}}.
nlohmann::ordered_json openai_error_body(const ApiError& e);
// {"type": "error", "error": {"type", "message"}}.
nlohmann::ordered_json anthropic_error_body(const ApiError& e);

// The ApiError for a status the HTTP connection layer answers by itself (400 malformed,
// 408 timeout, 413 body too large, 431 headers too large, 500, 503 over the connection cap).
ApiError connection_error(int http_status, const std::string& message);

}  // namespace specula::server
