// server/http.h — the HTTP/1.1 connection layer of `specula serve`: accepts connections,
// reads requests under deadlines, hands each complete request to a handler on a worker
// thread and writes its response. Request parsing is Boost.Beast's (RFC 9112); I/O is
// Boost.Asio on one event-loop thread, so an idle, slow or stalled connection costs a
// socket and a few KiB, never a thread.
//
// Per connection (RFC 9112 §9):
// - Deadlines: the request line and headers must arrive within header_timeout of the
//   connection opening (or of the previous response ending, on keep-alive) — a client
//   trickling one byte at a time is dropped at that deadline, not kept alive by each
//   byte; each piece of the body within body_timeout, and the whole body at
//   min_body_rate or faster after the first body_timeout seconds; a response's writes
//   may wait for the client at most write_timeout in total (a client that reads its
//   stream slowly or not at all is dropped).
//   A request that times out after some bytes gets 408; an idle connection just closes.
// - A Content-Length over max_body_bytes gets 413 before any body byte is read, and a
//   malformed one (negative, not a number, over 2^64) 400; the connection then closes
//   without the unread body ever being parsed as a request (no request smuggling).
//   Ambiguous framing is refused (400): Transfer-Encoding other than a final chunked,
//   or with Content-Length, or on HTTP/1.0; an HTTP/1.1 request without exactly one
//   Host. Header section (or chunk framing) over max_header_bytes: 431. Malformed
//   request: 400. `Expect: 100-continue` is answered with 100 before the body is read.
// - Pipelining: requests are read and answered strictly in order on a connection; bytes
//   of later requests wait in the connection's buffer.
// - Half-close: a client that shuts down its sending side after a request still gets
//   its response; the connection closes after it.
// - HTTP/1.0: keep-alive only when asked for; streamed responses are close-delimited
//   (no chunked encoding), HTTP/1.1 streams are chunked.
// - Connections beyond max_connections get a 503 with `Connection: close` at once
//   (beyond 64 such refusals in flight, a plain close).
// - Closing after an error first shuts down our sending side and drains the client's
//   unread bytes briefly, so the client reads the error instead of a reset.
//
// Threads: one event-loop thread (the caller of run()) owns every socket; `workers`
// threads run handlers. A handler may block (waiting for tokens); while it runs its
// connection reads nothing, and Exchange::client_gone() tells whether the client is
// still there.
// Does not: TLS, HTTP/2, compression, or routing (server.cpp routes).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specula/status.h"

namespace specula::server::http {

struct Request {
  std::string method;   // as sent ("GET", "POST", ...)
  std::string target;   // as sent ("/v1/completions?x=1")
  std::string path;     // target without query ("/v1/completions")
  int version = 11;     // 10: HTTP/1.0, 11: HTTP/1.1
  std::vector<std::pair<std::string, std::string>> headers;  // in order, names as sent
  std::string body;
  std::string remote_addr;  // numeric ("127.0.0.1", "::1", "::ffff:10.0.0.2")
  bool keep_alive = true;   // what the request asked for (RFC 9112 §9.3)

  // The first header of that name (case-insensitive), or "" / false.
  std::string header(std::string_view name) const;
  bool has_header(std::string_view name) const;
};

using Headers = std::vector<std::pair<std::string, std::string>>;

// Case-insensitive ASCII comparison (header names); a status code's reason phrase.
bool iequals(std::string_view a, std::string_view b);
const char* reason_phrase(int status);

// The answer side of one request, used by the handler on its worker thread. Exactly one
// response: either respond() once, or begin_stream(), write()s, end_stream(). A handler
// that returns without answering gets a 500.
class Exchange {
 public:
  virtual ~Exchange() = default;
  // A whole response with Content-Length. Returns false when the client is gone.
  virtual bool respond(int status, std::string_view content_type, std::string body, const Headers& extra = {}) = 0;
  // Starts a streamed response (chunked on HTTP/1.1, close-delimited on HTTP/1.0).
  // `probe` is sent as a piece of the stream when the client may have left (see
  // client_gone); it must be harmless to the client (an SSE comment ":\n\n").
  virtual bool begin_stream(int status, std::string_view content_type, const Headers& extra, std::string probe) = 0;
  // Sends one piece of the stream; blocks until written or write_timeout. False: the
  // client is gone (or too slow) — stop producing.
  virtual bool write(std::string_view data) = 0;
  // Ends the stream (last chunk; HTTP/1.0: closes the connection). A handler that
  // returns without it cuts the stream: no last chunk, the connection closes.
  virtual void end_stream() = 0;
  // True when the client has certainly gone: the connection was reset, or it was closed
  // and a probe was refused. A client that only half-closed (shutdown of its sending
  // side) is not gone: on its first end-of-stream the layer probes it once — an interim
  // `100 Continue` before the response (HTTP/1.1; RFC 9110 §15.2 lets a server send it
  // at any time before the final response), the stream's probe after — and a closed
  // client's TCP stack answers the probe with a reset that the next call sees. HTTP/1.0
  // clients cannot be probed before the response; their end-of-stream counts as gone.
  // Cheap (one poll); call it while waiting. Once it has said true, the handler may
  // return without answering (nobody would read it; nothing is counted).
  virtual bool client_gone() = 0;
};

using Handler = std::function<void(const Request&, Exchange&)>;

struct Options {
  std::string host = "127.0.0.1";     // an address or name, or several separated by commas
  int port = 8080;                    // 0: any free port
  size_t max_body_bytes = 1 << 20;    // 413 beyond
  size_t max_header_bytes = 64 << 10; // 431 beyond
  int max_connections = 1024;         // 503 beyond; lowered to fit RLIMIT_NOFILE
  double header_timeout_s = 10;       // connection open / last response → end of headers
  double body_timeout_s = 10;         // + Content-Length / min_body_rate
  double min_body_rate = 64 << 10;    // bytes per second
  double write_timeout_s = 30;        // per response write
  int workers = 16;                   // handler threads
  // Error bodies the layer writes itself (400, 408, 413, 431, 500, 503), e.g. the API's
  // JSON error shape; `path` is the request's path when its headers were read, else "".
  // Default: plain text.
  std::function<std::string(int status, const std::string& message, const std::string& path)> error_body;
  // Called once per response the layer or a handler sends (for /metrics).
  std::function<void(int status)> on_status;
};

struct Stats {
  uint64_t open_connections = 0;
  uint64_t accepted_total = 0;
  uint64_t refused_over_cap_total = 0;  // answered 503 at accept
  uint64_t timed_out_total = 0;         // dropped by a header, body or write deadline
  uint64_t malformed_total = 0;         // 400/413/431 from the layer
};

class HttpServer {
 public:
  static std::unique_ptr<HttpServer> create(Options options, Handler handler);
  ~HttpServer();
  // Binds and listens. Errors: host not resolvable, address in use.
  Status bind();
  int port() const;
  // Serves until stop(); returns once every connection is closed and every handler has
  // returned (connections still writing after a grace period are cut).
  void run();
  // Async-signal-safe (sets a flag the loop polls): stops accepting, closes idle
  // connections, lets running handlers finish.
  void stop();
  bool stopping() const;
  Stats stats() const;

  struct Impl;

 private:
  HttpServer() = default;
  std::shared_ptr<Impl> impl_;
};

}  // namespace specula::server::http
