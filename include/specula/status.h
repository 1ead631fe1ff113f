// specula/status.h — recoverable errors: Status and Result<T>.
//
// Every fallible public or cross-layer call returns a Status or Result<T>. The
// message starts with the component in brackets and gives the offending values,
// e.g. "[gguf] tensor blk.3.attn_q: offset 123 past end of file (size 100)".
// Programmer invariants use SPECULA_CHECK (aborts); exceptions never cross the
// public API.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace specula {

class Status {
 public:
  Status() = default;  // ok
  static Status ok() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.ok_ = false;
    s.message_ = std::move(message);
    return s;
  }
  bool is_ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const std::string& message() const { return message_; }

 private:
  bool ok_ = true;
  std::string message_;
};

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
