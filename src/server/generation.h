// server/generation.h — the one generation driver of the server: every API family's
// generation route ends here, for any n and both stream modes.
//
// run_generation(served, request, exchange, format):
//   1. prepare_request (engine_request.h): prompt ids, constraint, sampling, limits;
//   2. submit choice 0; with n > 1 wait for its first token (its prompt's state is then in
//      the prompt cache) and submit choices 1..n-1, each with seed + i and its own clone of
//      the untouched grammar;
//   3. wait for the choices' updates (CompletionStream, the engine thread's mailbox),
//      writing each through its own AnswerFormat: SSE events as they come, or one body
//      at the end (choices combined, usage summed); echo's prompt goes first;
//   4. a client that leaves is noticed within one wait (its connection is probed) and its
//      requests are cancelled; a server that stops cancels what still runs.
// Errors before the first byte are the family's error answers; a failure mid-stream is
// the family's error event. Every request this driver submits ends before it returns, or
// is cancelled.
// Does not: parse requests (the family files) or know any API's shape (AnswerFormat does).
#pragma once

#include "server/answer_format.h"
#include "server/http.h"
#include "server/request.h"
#include "server/served_model.h"

namespace specula::server {

// What the request log line (server.cpp) reports of a generation.
struct GenerationLog {
  std::string id;                 // the answer's id
  int64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
  double ttft_seconds = -1;       // submitted -> first token of choice 0 (-1: none)
  std::string finish;             // choice 0's finish reason
};

// `log`, when given, is filled in for the request log.
void run_generation(ServedModel& served, const CompletionParams& c, http::Exchange& ex, AnswerFormat& fmt,
                    GenerationLog* log = nullptr);

// Answer helpers shared by the route files.
void send_json(http::Exchange& ex, const nlohmann::ordered_json& body);
// An error answer in OpenAI's shape (the side routes), or in `fmt`'s family's.
void send_error(http::Exchange& ex, const ApiError& e);
void send_error(http::Exchange& ex, const AnswerFormat& fmt, const ApiError& e);
// Unix time in seconds.
int64_t unix_now();

// An in-memory answer: the status and body a handler gives (the predict route's instances,
// /health_generate's probe). Streams are refused.
class BufferExchange : public http::Exchange {
 public:
  bool respond(int status, std::string_view, std::string body, const http::Headers&) override {
    status_ = status;
    body_ = std::move(body);
    return true;
  }
  bool begin_stream(int, std::string_view, const http::Headers&, std::string) override { return false; }
  bool write(std::string_view) override { return false; }
  void end_stream() override {}
  bool client_gone() override { return false; }
  int status() const { return status_; }
  const std::string& body() const { return body_; }

 private:
  int status_ = 0;
  std::string body_;
};

}  // namespace specula::server
