// server/errors.cpp — see errors.h.
#include "server/errors.h"

namespace specula::server {

using json = nlohmann::ordered_json;

namespace {

struct Row {
  StatusCode code;
  int http;
  const char* openai;
  const char* anthropic;
  const char* api_code;  // the OpenAI code when the ApiError gives none ("" = null)
};

constexpr Row kTable[] = {
    {StatusCode::kInvalidArgument, 400, "invalid_request_error", "invalid_request_error", ""},
    // A context overflow: llama-server's type (its clients test it), OpenAI's code.
    {StatusCode::kContextOverflow, 400, "exceed_context_size_error", "invalid_request_error", "context_length_exceeded"},
    {StatusCode::kUnimplemented, 400, "invalid_request_error", "invalid_request_error", ""},
    {StatusCode::kUnauthenticated, 401, "authentication_error", "authentication_error", ""},
    {StatusCode::kPermissionDenied, 403, "permission_error", "permission_error", ""},
    {StatusCode::kNotFound, 404, "not_found_error", "not_found_error", ""},
    {StatusCode::kTimeout, 408, "invalid_request_error", "invalid_request_error", ""},
    {StatusCode::kTooLarge, 413, "invalid_request_error", "request_too_large", ""},
    {StatusCode::kBusy, 429, "rate_limit_error", "rate_limit_error", ""},
    {StatusCode::kInternal, 500, "server_error", "api_error", ""},
    {StatusCode::kUnavailable, 503, "server_error", "overloaded_error", ""},
    {StatusCode::kCancelled, 503, "server_error", "overloaded_error", ""},
};

const Row& row(StatusCode c) {
  for (const Row& r : kTable)
    if (r.code == c) return r;
  return row(StatusCode::kInternal);  // kOk never reaches an answer
}

}  // namespace

ApiError bad_request(std::string param, std::string message) {
  return ApiError{StatusCode::kInvalidArgument, std::move(message), std::move(param), "", 0, nullptr};
}

ApiError api_error(StatusCode code, std::string message, std::string param, std::string api_code) {
  return ApiError{code, std::move(message), std::move(param), std::move(api_code), 0, nullptr};
}

ApiError from_status(const Status& st, std::string param) {
  return ApiError{st.code(), st.user_message(), std::move(param), "", 0, nullptr};
}

int http_status(const ApiError& e) { return e.http_override != 0 ? e.http_override : row(e.code).http; }
const char* openai_error_type(const ApiError& e) { return row(e.code).openai; }
const char* anthropic_error_type(const ApiError& e) { return row(e.code).anthropic; }

json openai_error_body(const ApiError& e) {
  const std::string code = e.api_code.empty() ? row(e.code).api_code : e.api_code;
  json err = {{"message", e.message}, {"type", openai_error_type(e)}};
  err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  err["code"] = code.empty() ? json(nullptr) : json(code);
  if (e.details.is_object())
    for (auto it = e.details.begin(); it != e.details.end(); ++it) err[it.key()] = it.value();
  return json{{"error", err}};
}

json anthropic_error_body(const ApiError& e) {
  return json{{"type", "error"}, {"error", {{"type", anthropic_error_type(e)}, {"message", e.message}}}};
}

ApiError connection_error(int status, const std::string& message) {
  ApiError e;
  e.message = message;
  e.http_override = status;
  switch (status) {
    case 408: e.code = StatusCode::kTimeout; e.api_code = "request_timeout"; break;
    case 413: e.code = StatusCode::kTooLarge; e.api_code = "body_too_large"; break;
    case 431: e.code = StatusCode::kTooLarge; e.api_code = "headers_too_large"; break;
    case 503: e.code = StatusCode::kUnavailable; e.api_code = "too_many_connections"; break;
    default: e.code = status >= 500 ? StatusCode::kInternal : StatusCode::kInvalidArgument;
  }
  return e;
}

}  // namespace specula::server
