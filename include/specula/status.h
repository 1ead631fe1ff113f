// specula/status.h — recoverable errors: Status and Result<T>.
//
// Every fallible public or cross-layer call returns a Status or Result<T>. A Status
// carries a code (StatusCode: what kind of failure, which a front door maps to its own
// error shape — server/errors.h holds the HTTP table) and a message that starts with the
// component in brackets and gives the offending values, e.g.
// "[gguf] tensor blk.3.attn_q: offset 123 past end of file (size 100)". Callers tell
// failures apart by code, never by the message's text. Status::error(message) without a
// code is kInternal: a failure nobody classified is the engine's, not the caller's.
// Programmer invariants use SPECULA_CHECK (aborts); exceptions never cross the
// public API.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace specula {

// What kind of failure a Status is. Codes name who is at fault and what may help; they
// are stable (front doors map them to HTTP statuses and API error types).
enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,   // the caller's input is wrong: a request field, a file, a flag, a grammar
  kNotFound,          // a named thing does not exist: a route, a model, a file
  kTooLarge,          // input over a size limit (a body, a batch)
  kContextOverflow,   // the prompt (+ max_tokens) does not fit the context
  kBusy,              // a queue or connection limit is full: retry later
  kUnavailable,       // shutting down, or not ready
  kUnimplemented,     // a valid request for something not implemented
  kUnauthenticated,   // missing or wrong credentials
  kPermissionDenied,  // not allowed from here
  kTimeout,           // a deadline passed
  kCancelled,         // cancelled by the caller or a shutdown
  kInternal,          // the engine failed (a bug, or a failure nobody classified)
};

// The code's name: "ok", "invalid_argument", "not_found", ... (the enumerator without its
// k, in snake case; the C API's specula_status_name).
inline const char* status_code_name(StatusCode c) {
  switch (c) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kTooLarge: return "too_large";
    case StatusCode::kContextOverflow: return "context_overflow";
    case StatusCode::kBusy: return "busy";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kUnimplemented: return "unimplemented";
    case StatusCode::kUnauthenticated: return "unauthenticated";
    case StatusCode::kPermissionDenied: return "permission_denied";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}
class Status {
 public:
  Status() = default;  // ok
  static Status ok() { return Status(); }
  // An unclassified failure: kInternal.
  static Status error(std::string message) { return error(StatusCode::kInternal, std::move(message)); }
  static Status error(StatusCode code, std::string message) {
    Status s;
    s.code_ = code == StatusCode::kOk ? StatusCode::kInternal : code;
    s.message_ = std::move(message);
    return s;
  }
  static Status invalid_argument(std::string message) { return error(StatusCode::kInvalidArgument, std::move(message)); }
  static Status not_found(std::string message) { return error(StatusCode::kNotFound, std::move(message)); }
  static Status unavailable(std::string message) { return error(StatusCode::kUnavailable, std::move(message)); }
  static Status internal(std::string message) { return error(StatusCode::kInternal, std::move(message)); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // The message without its leading "[component] " tags (without_component_tags), for
  // people who called an API and never saw the components.
  std::string user_message() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// `message` without the "[component] " tags at its start ("[engine] [sampler] top_p ..." ->
// "top_p ..."): what a log needs, not what an API user can act on.
inline std::string without_component_tags(const std::string& message) {
  size_t i = 0;
  while (i < message.size() && message[i] == '[') {
    const size_t close = message.find("] ", i);
    if (close == std::string::npos || close - i > 24 || message.find(' ', i) < close) break;
    i = close + 2;
  }
  return message.substr(i);
}
inline std::string Status::user_message() const { return without_component_tags(message_); }

// Result<T>: a value or an error Status (never an ok Status without a value).
template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}            // NOLINT(implicit)
  Result(Status status) : v_(std::move(status)) {      // NOLINT(implicit)
    if (std::get<Status>(v_).is_ok()) v_ = Status::error("[internal] Result built from ok Status");
  }
  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &std::get<T>(v_); }
  const T* operator->() const { return &std::get<T>(v_); }
  T& operator*() & { return value(); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  const std::string& message() const { return status().message(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace specula

// Aborting check for programmer invariants (never for user input).
#define SPECULA_CHECK(cond)                                                              \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "SPECULA_CHECK failed: %s at %s:%d\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

// Propagate an error Status/Result from an expression returning Status.
#define SPECULA_RETURN_IF_ERROR(expr)        \
  do {                                       \
    ::specula::Status _st = (expr);          \
    if (!_st.is_ok()) return _st;            \
  } while (0)
