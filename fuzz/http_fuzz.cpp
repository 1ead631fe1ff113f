// fuzz/http_fuzz.cpp — libFuzzer target for the HTTP/1.1 connection layer (server/http.h:
// Boost.Beast's request parser under our framing rules, limits, pipelining, 100-continue,
// half-close, error answers) through a real loopback socket.
// One server runs for the whole fuzzing process (limits lowered so inputs reach them: body
// 4 KiB, header section 2 KiB); its handler answers POST /stream with a chunked stream of
// three pieces and anything else with the body's length. Each input is sent on a new
// connection (in one write, or — selector bit 0 — in pieces of the selector's upper bits
// + 1 bytes), the sending side is shut down, and everything the server answers is read
// until it closes.
// Properties: the server closes the connection within 5 s (no hang); what it sent is a
// sequence of well-framed HTTP/1.x responses (a status line with a 3-digit code, headers,
// a body framed by Content-Length, chunked encoding, or the close; none after a HEAD), of
// which only the last may be cut short, and only when the server reset the connection.
// Run with -detect_leaks=0 (scripts/fuzz does): the server's threads allocate across inputs.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "fuzz_util.h"
#include "server/http.h"

namespace {
using namespace specula;
namespace http = specula::server::http;

int server_port() {
  static const int port = [] {
    http::Options o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.max_body_bytes = 4096;
    o.max_header_bytes = 2048;
    o.header_timeout_s = 2;
    o.body_timeout_s = 2;
    o.write_timeout_s = 2;
    o.workers = 2;
    // Never destroyed: its thread serves until the process exits.
    static http::HttpServer* srv = http::HttpServer::create(o, [](const http::Request& req, http::Exchange& ex) {
      if (req.method == "POST" && req.path == "/stream") {
        if (!ex.begin_stream(200, "text/event-stream", {}, ":\n\n")) return;
        for (int i = 0; i < 3; ++i)
          if (!ex.write("data: " + std::to_string(i) + "\n\n")) return;
        ex.end_stream();
        return;
      }
      ex.respond(200, "text/plain", std::to_string(req.body.size()) + " " + req.header("Host"));
    }).release();
    if (Status st = srv->bind(); !st.is_ok()) fuzz::fail("cannot bind the server", st.message());
    std::thread([] { srv->run(); }).detach();
    return srv->port();
  }();
  return port;
}

// Parses HTTP/1.x responses from the front of `s`. Returns false on a syntax error;
// `*complete` tells whether the last one was whole.
bool well_framed(std::string_view s, bool* complete) {
  *complete = true;
  while (!s.empty()) {
    *complete = false;
    const size_t eoh = s.find("\r\n\r\n");
    if (eoh == std::string_view::npos) return s.size() < 4096 && std::string_view("HTTP/1.").substr(0, s.size()) == s.substr(0, 7);
    const std::string_view head = s.substr(0, eoh);
    if (head.size() < 12 || head.substr(0, 7) != "HTTP/1." || head[8] != ' ') return false;
    for (int i = 9; i < 12; ++i)
      if (head[static_cast<size_t>(i)] < '0' || head[static_cast<size_t>(i)] > '9') return false;
    const int status = std::stoi(std::string(head.substr(9, 3)));
    std::string lower(head);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    s.remove_prefix(eoh + 4);
    if (status == 100) {
      *complete = true;
      continue;
    }
    const size_t cl = lower.find("\r\ncontent-length: ");
    if (cl != std::string::npos) {
      const size_t n = std::stoul(lower.substr(cl + 18));
      // The answer to a HEAD request has no body (RFC 9110 §9.3.2): the next response, or
      // nothing, follows its header (this handler's bodies never start with "HTTP/1.").
      if (s.empty() || s.substr(0, 7) == "HTTP/1.") {
        *complete = true;
        continue;
      }
      if (s.size() < n) return true;
      s.remove_prefix(n);
    } else if (lower.find("\r\ntransfer-encoding: chunked") != std::string::npos) {
      while (true) {
        const size_t eol = s.find("\r\n");
        if (eol == std::string_view::npos) return true;
        size_t n = 0;
        for (char c : s.substr(0, eol)) {
          if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
          n = n * 16 + static_cast<size_t>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (std::tolower(c) - 'a' + 10));
        }
        if (s.size() < eol + 2 + n + 2) return true;
        if (s.substr(eol + 2 + n, 2) != "\r\n") return false;
        s.remove_prefix(eol + 2 + n + 2);
        if (n == 0) break;
      }
    } else {
      s = {};  // close-delimited
    }
    *complete = true;
  }
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int port = server_port();
  fuzz::Input in(data, size);
  const uint8_t mode = in.byte();
  const std::string_view bytes = in.rest();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) fuzz::fail("socket", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno == EINTR) {  // libFuzzer's end-of-run alarm: this input is not tried
      close(fd);
      return 0;
    }
    fuzz::fail("connect", std::strerror(errno));
  }
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  const size_t piece = (mode & 1) ? static_cast<size_t>(mode >> 1) + 1 : bytes.size() + 1;
  for (size_t off = 0; off < bytes.size();) {
    const ssize_t n = send(fd, bytes.data() + off, std::min(piece, bytes.size() - off), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the server closed (after an error answer): what it sent is read below
    off += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  std::string got;
  char buf[8192];
  bool reset = false;
  const auto t0 = std::chrono::steady_clock::now();
  while (true) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      got.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) fuzz::fail("the server neither answered nor closed within 5 s");
    reset = true;
    break;
  }
  close(fd);
  if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(5)) fuzz::fail("the server took over 5 s to close");
  bool complete = true;
  if (!well_framed(got, &complete)) fuzz::fail("a malformed response", got.substr(0, 512));
  if (!complete && !reset) fuzz::fail("a response cut short without a reset", got.substr(0, 512));
  return 0;
}
