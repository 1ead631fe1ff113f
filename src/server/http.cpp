// server/http.cpp — see http.h.
#include "server/http.h"

#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <future>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "core/strings.h"

namespace specula::server::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {
std::string str(beast::string_view s) { return std::string(s.data(), s.size()); }
}  // namespace

class Session;

struct HttpServer::Impl {
  Options opt;
  Handler handler;
  int max_connections = 0;

  std::atomic<bool> stop_flag{false};  // stop() was called
  std::atomic<bool> hard_stop{false};  // grace period over: writes give up
  bool shutting_down = false;           // loop thread: stop handling has begun
  std::chrono::steady_clock::time_point stop_began;

  std::atomic<uint64_t> open{0}, accepted{0}, refused{0}, timed_out{0}, malformed{0};
  std::atomic<int> refusing{0};  // refused connections still open

  std::mutex sessions_mu;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;

  std::mutex tasks_mu;
  std::condition_variable tasks_cv;
  std::deque<std::function<void()>> tasks;
  bool tasks_closed = false;
  std::vector<std::thread> workers;

  // Declared last: destroyed first, so sessions freed with its pending handlers still
  // find the members above.
  asio::io_context ioc;
  // One listening socket per address of Options::host (a list), each with its retry timer.
  struct Listener {
    explicit Listener(asio::io_context& io) : acceptor(io), retry(io) {}
    tcp::acceptor acceptor;
    asio::steady_timer retry;
  };
  std::list<Listener> listeners;
  asio::steady_timer stop_poll{ioc};

  std::string error_body(int status, const std::string& message, const std::string& path = "") const {
    return opt.error_body ? opt.error_body(status, message, path) : message + "\n";
  }
  std::string_view error_type() const { return opt.error_body ? "application/json" : "text/plain"; }
  void count(int status) const {
    if (opt.on_status) opt.on_status(status);
  }
  void submit(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(tasks_mu);
      tasks.push_back(std::move(task));
    }
    tasks_cv.notify_one();
  }
  void worker_loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(tasks_mu);
        tasks_cv.wait(lock, [&] { return tasks_closed || !tasks.empty(); });
        if (tasks.empty()) return;
        task = std::move(tasks.front());
        tasks.pop_front();
      }
      task();
    }
  }
  void do_accept(Listener& l);
  void poll_stop();
};

// One connection. Its socket, buffer and parser belong to the loop thread; during a
// handler the worker uses the Exchange half and reaches the socket only through posted
// writes and the fd_mu-guarded probes in client_gone().
class Session : public std::enable_shared_from_this<Session>, public Exchange {
 public:
  // The read buffer is bounded: a header section, a chunk header or trailer that never
  // ends fails at the limit (buffer_overflow) instead of growing.
  Session(HttpServer::Impl* srv, tcp::socket sock)
      : srv_(srv), sock_(std::move(sock)), timer_(srv->ioc), buf_(srv->opt.max_header_bytes + (64 << 10)) {
    fd_ = sock_.native_handle();
    ++srv_->open;
  }
  ~Session() override {
    forget();
    if (refusing_) --srv_->refusing;
    --srv_->open;
  }

  void start() {
    {
      std::lock_guard<std::mutex> lock(srv_->sessions_mu);
      srv_->sessions[this] = weak_from_this();
    }
    error_code ec;
    sock_.set_option(tcp::no_delay(true), ec);
    read_request();
  }
  // 503 at accept (over the connection cap), then a short drain. Beyond 64 refusals in
  // flight a flood is closed without an answer (refusals must not run out descriptors).
  void refuse() {
    {
      std::lock_guard<std::mutex> lock(srv_->sessions_mu);
      srv_->sessions[this] = weak_from_this();
    }
    ++srv_->refused;
    refusing_ = true;
    if (++srv_->refusing > 64) return close_now();
    error_close(503, "too many connections (limit " + std::to_string(srv_->max_connections) + "); try again later");
  }
  // Loop thread, at shutdown: a connection waiting for a request is closed now.
  void on_shutdown() {
    if (!handling_ && !closed_) {
      error_code ec;
      sock_.cancel(ec);
    }
  }
  void forget() {
    std::lock_guard<std::mutex> lock(srv_->sessions_mu);
    srv_->sessions.erase(this);
  }

  // ---- Exchange (worker thread) ----
  bool respond(int status, std::string_view content_type, std::string body, const Headers& extra) override {
    if (responded_) return false;
    responded_ = true;
    const bool keep = req_.keep_alive && !srv_->stop_flag.load();
    close_after_ = !keep;
    std::string head = status_line(status);
    head += "Content-Type: ";
    head += content_type;
    head += "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    head += keep ? (req_.version == 10 ? "Connection: keep-alive\r\n" : "") : "Connection: close\r\n";
    for (const auto& [k, v] : extra) head += k + ": " + v + "\r\n";
    head += "\r\n";
    srv_->count(status);
    if (req_.method != "HEAD") head += body;
    return write_raw(std::move(head));
  }
  bool begin_stream(int status, std::string_view content_type, const Headers& extra, std::string probe) override {
    if (responded_) return false;
    responded_ = streaming_ = true;
    chunked_ = req_.version >= 11;
    probe_ = std::move(probe);
    const bool keep = chunked_ && req_.keep_alive && !srv_->stop_flag.load();
    close_after_ = !keep;
    std::string head = status_line(status);
    head += "Content-Type: ";
    head += content_type;
    head += chunked_ ? "\r\nTransfer-Encoding: chunked\r\n" : "\r\n";
    if (!keep) head += "Connection: close\r\n";
    for (const auto& [k, v] : extra) head += k + ": " + v + "\r\n";
    head += "\r\n";
    srv_->count(status);
    return write_raw(std::move(head));
  }
  bool write(std::string_view data) override {
    if (!streaming_ || stream_ended_) return false;
    if (data.empty()) return !broken_;
    if (!chunked_) return write_raw(std::string(data));
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    std::string chunk = size;
    chunk.append(data.data(), data.size());
    chunk += "\r\n";
    return write_raw(std::move(chunk));
  }
  void end_stream() override {
    if (!streaming_ || stream_ended_) return;
    stream_ended_ = true;
    if (chunked_) write_raw("0\r\n\r\n");
  }
  bool client_gone() override {
    if (gone_) return true;
    gone_ = probe_peer();
    return gone_;
  }

 private:
  bool probe_peer() {
    {
      std::lock_guard<std::mutex> lock(fd_mu_);
      if (closed_ || broken_) return true;
      pollfd p{fd_, static_cast<short>(POLLIN | POLLRDHUP), 0};
      if (poll(&p, 1, 0) <= 0) return false;
      if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
      if (!(p.revents & (POLLIN | POLLRDHUP))) return false;
      if (!(p.revents & POLLRDHUP)) {
        // Readable without a FIN: unread bytes (a pipelined next request), or an error.
        char c;
        const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n != 0) return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
      }
      // The client sent FIN (maybe after more bytes): it closed, or only half-closed.
      // Probe once; a closed client's reset shows on a later call.
      if (probed_) return false;  // probed, and no reset came back: half-closed
      probed_ = true;
    }
    if (streaming_) return !write(probe_.empty() ? std::string_view("\r\n") : std::string_view(probe_));
    if (req_.version < 11 || responded_) return true;
    return !write_raw("HTTP/1.1 100 Continue\r\n\r\n");
  }

  std::string status_line(int status) const {
    return "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
  }

  // Posts one write to the loop and waits for it (write_timeout bounds it there).
  bool write_raw(std::string data) {
    if (broken_) return false;
    struct Op {
      std::string data;
      std::promise<bool> done;
    };
    auto op = std::make_shared<Op>();
    op->data = std::move(data);
    std::future<bool> fut = op->done.get_future();
    asio::post(srv_->ioc, [self = shared_from_this(), op] {
      if (self->closed_) {
        op->done.set_value(false);
        return;
      }
      self->arm(srv_seconds(self->srv_->opt.write_timeout_s));
      asio::async_write(self->sock_, asio::buffer(op->data), [self, op](error_code ec, size_t) {
        self->disarm();
        op->done.set_value(!ec);
      });
    });
    const auto t0 = std::chrono::steady_clock::now();
    while (fut.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      if (srv_->hard_stop.load()) {
        broken_ = true;
        return false;
      }
    }
    if (!fut.get()) broken_ = true;
    // A client that reads slowly makes writes wait: their waiting beyond 10 ms each adds
    // up, and past write_timeout for one response the client is dropped (a worker is
    // never held for long by a slow reader, however the waits are spread).
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    blocked_s_ += std::max(0.0, waited - 0.010);
    if (blocked_s_ > srv_->opt.write_timeout_s) broken_ = true;
    return !broken_;
  }
  static std::chrono::steady_clock::duration srv_seconds(double s) {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
  }

  // Deadline for the operation(s) started next: on expiry they are cancelled and see
  // timed_out_. disarm() after each completion.
  void arm(std::chrono::steady_clock::duration d) {
    timed_out_ = false;
    const uint64_t gen = ++timer_gen_;
    timer_.expires_after(d);
    timer_.async_wait([self = shared_from_this(), gen](error_code ec) {
      if (ec || gen != self->timer_gen_) return;
      self->timed_out_ = true;
      error_code ignored;
      self->sock_.cancel(ignored);
    });
  }
  void disarm() {
    ++timer_gen_;
    timer_.cancel();
  }

  void read_request() {
    if (srv_->stop_flag.load()) return close_now();
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(std::min<size_t>(srv_->opt.max_header_bytes, UINT32_MAX)));
    parser_->body_limit(srv_->opt.max_body_bytes);
    arm(srv_seconds(srv_->opt.header_timeout_s));
    bhttp::async_read_header(sock_, buf_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
      self->disarm();
      self->on_header(ec);
    });
  }

  // A read error: answer what deserves an answer, close.
  void on_read_error(error_code ec, bool in_body) {
    const bool got = in_body || parser_->got_some() || buf_.size() > 0;
    if (timed_out_) {
      ++srv_->timed_out;
      if (!got) return close_now();
      return error_close(408, std::string("request ") + (in_body ? "body" : "headers") + " not received within the deadline");
    }
    if (ec == bhttp::error::end_of_stream || ec == asio::error::eof) {
      if (!got) return close_now();
      return error_close(400, "incomplete request: the connection ended inside it");
    }
    if (ec == bhttp::error::partial_message) return error_close(400, "incomplete request: the connection ended inside it");
    if (ec == bhttp::error::buffer_overflow) {
      ++srv_->malformed;
      return error_close(431, "request framing (headers, chunk headers or trailers) larger than " +
                                  std::to_string(srv_->opt.max_header_bytes) + " bytes");
    }
    if (ec == asio::error::operation_aborted || ec.category() != bhttp::make_error_code(bhttp::error::body_limit).category()) return close_now();
    ++srv_->malformed;
    if (ec == bhttp::error::body_limit) {
      // A Content-Length over the limit stops the parser at the end of the header, before it
      // counts the header as done (content_length() may not be asked then: found by
      // fuzz/http_fuzz.cpp); the field itself is in the message already. A chunked body
      // that grows past the limit has none.
      const std::string declared = parser_->is_header_done() || parser_->got_some()
                                       ? str(parser_->get()[bhttp::field::content_length])
                                       : std::string();
      const std::string limit = std::to_string(srv_->opt.max_body_bytes);
      return error_close(413, !declared.empty() && declared.find_first_not_of("0123456789") == std::string::npos
                                  ? "request body of " + declared + " bytes is larger than the limit of " + limit + " bytes"
                                  : "request body larger than the limit of " + limit + " bytes");
    }
    if (ec == bhttp::error::header_limit)
      return error_close(431, "request header section larger than " + std::to_string(srv_->opt.max_header_bytes) + " bytes");
    if (ec == bhttp::error::bad_content_length) return error_close(400, "Content-Length is not a byte count");
    return error_close(400, "malformed request: " + ec.message());
  }

  void on_header(error_code ec) {
    if (ec) return on_read_error(ec, false);
    auto& h = parser_->get();
    // Framing that two parties could read differently is refused, never guessed
    // (RFC 9112 §6.1, §6.3): Transfer-Encoding other than a final "chunked", with a
    // Content-Length, or on HTTP/1.0; and an HTTP/1.1 request needs exactly one Host.
    const bool has_te = h.find(bhttp::field::transfer_encoding) != h.end();
    if (has_te && (!parser_->chunked() || h.version() < 11 || h.find(bhttp::field::content_length) != h.end())) {
      ++srv_->malformed;
      return error_close(400, "Transfer-Encoding must be 'chunked' alone, on HTTP/1.1, without Content-Length");
    }
    if (h.version() >= 11 && h.count(bhttp::field::host) != 1) {
      ++srv_->malformed;
      return error_close(400, "an HTTP/1.1 request needs exactly one Host header");
    }
    if (parser_->is_done()) return on_request();
    auto read_body = [self = shared_from_this()] {
      self->body_started_ = std::chrono::steady_clock::now();
      self->body_bytes_ = 0;
      self->read_body_some();
    };
    if (h.version() >= 11 && iequals(str(h[bhttp::field::expect]), "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      arm(srv_seconds(srv_->opt.write_timeout_s));
      asio::async_write(sock_, asio::buffer(kContinue), [self = shared_from_this(), read_body](error_code ec2, size_t) {
        self->disarm();
        if (ec2) return self->close_now();
        read_body();
      });
      return;
    }
    read_body();
  }

  // Reads the body piece by piece: each piece must come within body_timeout, and the
  // whole at no less than min_body_rate after the first body_timeout seconds (a client
  // that declares a large body and trickles it is dropped, whatever it declared).
  void read_body_some() {
    if (srv_->stop_flag.load()) return close_now();
    arm(srv_seconds(srv_->opt.body_timeout_s));
    bhttp::async_read_some(sock_, buf_, *parser_, [self = shared_from_this()](error_code ec, size_t n) {
      self->disarm();
      if (ec) return self->on_read_error(ec, true);
      if (self->parser_->is_done()) return self->on_request();
      self->body_bytes_ += n;
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - self->body_started_).count();
      const double grace = self->srv_->opt.body_timeout_s;
      if (elapsed > grace && static_cast<double>(self->body_bytes_) < (elapsed - grace) * self->srv_->opt.min_body_rate) {
        ++self->srv_->timed_out;
        return self->error_close(408, "request body arrives slower than the minimum rate");
      }
      self->read_body_some();
    });
  }

  void on_request() {
    auto& h = parser_->get();
    req_ = Request{};
    req_.method = str(h.method_string());
    req_.target = str(h.target());
    req_.path = req_.target.substr(0, req_.target.find('?'));
    req_.version = h.version() >= 11 ? 11 : 10;
    for (const auto& f : h) req_.headers.emplace_back(str(f.name_string()), str(f.value()));
    req_.body = std::move(h.body());
    req_.keep_alive = h.keep_alive();
    error_code ec;
    const auto remote = sock_.remote_endpoint(ec);
    if (!ec) req_.remote_addr = remote.address().to_string();
    parser_.reset();
    responded_ = streaming_ = chunked_ = stream_ended_ = probed_ = gone_ = false;
    blocked_s_ = 0;
    close_after_ = false;
    handling_ = true;
    srv_->submit([self = shared_from_this()] { self->run_handler(); });
  }

  void run_handler() {
    try {
      srv_->handler(req_, *this);
    } catch (const std::exception& e) {
      if (!responded_) respond(500, srv_->error_type(), srv_->error_body(500, std::string("internal error: ") + e.what(), req_.path), {});
    } catch (...) {
      if (!responded_) respond(500, srv_->error_type(), srv_->error_body(500, "internal error", req_.path), {});
    }
    if (!responded_ && !gone_) respond(500, srv_->error_type(), srv_->error_body(500, "the handler gave no response", req_.path), {});
    if (!responded_) close_after_ = true;  // the client left: nobody to answer
    if (streaming_ && !stream_ended_) {
      // Cut short (the handler failed or the client left): no last chunk, so the client
      // sees an incomplete response (RFC 9112 §7.1), and the connection closes.
      close_after_ = true;
    }
    asio::post(srv_->ioc, [self = shared_from_this()] {
      self->handling_ = false;
      if (self->closed_) return;
      if (self->broken_ || self->close_after_ || self->srv_->stop_flag.load()) return self->graceful_close();
      self->req_ = Request{};
      self->read_request();
    });
  }

  // Loop thread: an error response the layer writes itself, then close.
  void error_close(int status, const std::string& message) {
    std::string path;
    if (parser_ && parser_->is_header_done()) {
      path = str(parser_->get().target());
      path = path.substr(0, path.find('?'));
    }
    std::string body = srv_->error_body(status, message, path);
    std::string out = status_line(status);
    out += "Content-Type: ";
    out += srv_->error_type();
    out += "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    srv_->count(status);
    auto data = std::make_shared<std::string>(std::move(out));
    arm(srv_seconds(std::min(5.0, srv_->opt.write_timeout_s)));
    asio::async_write(sock_, asio::buffer(*data), [self = shared_from_this(), data](error_code ec, size_t) {
      self->disarm();
      if (ec) return self->close_now();
      self->graceful_close();
    });
  }

  // Loop thread: shut down our side, read (and drop) what the client still sends for a
  // moment so that closing does not reset the connection under our last response.
  void graceful_close() {
    if (closed_) return;
    error_code ec;
    sock_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close_now();
    arm(srv_seconds(srv_->stop_flag.load() ? 0.5 : refusing_ ? 0.1 : 2.0));
    drain();
  }
  void drain() {
    sock_.async_read_some(asio::buffer(drain_buf_), [self = shared_from_this()](error_code ec, size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ > (4u << 20)) {
        self->disarm();
        return self->close_now();
      }
      self->drain();
    });
  }
  void close_now() {
    std::lock_guard<std::mutex> lock(fd_mu_);
    if (closed_) return;
    closed_ = true;
    disarm();
    error_code ec;
    sock_.close(ec);
    forget();
  }

  HttpServer::Impl* srv_;
  tcp::socket sock_;
  asio::steady_timer timer_;
  uint64_t timer_gen_ = 0;
  bool timed_out_ = false;
  beast::flat_buffer buf_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::chrono::steady_clock::time_point body_started_;
  size_t body_bytes_ = 0;
  std::array<char, 4096> drain_buf_{};
  size_t drained_ = 0;
  std::atomic<bool> handling_{false};
  bool refusing_ = false;

  std::mutex fd_mu_;
  int fd_ = -1;
  std::atomic<bool> closed_{false};

  // Worker side of the current request (set on the loop thread before the handler runs;
  // the posts between the two threads order the accesses).
  Request req_;
  bool responded_ = false, streaming_ = false, chunked_ = false, stream_ended_ = false, probed_ = false;
  bool gone_ = false;  // client_gone() said so: the handler need not answer
  double blocked_s_ = 0;  // this response's write waits beyond 10 ms each
  bool close_after_ = false;
  std::atomic<bool> broken_{false};
  std::string probe_;
};

void HttpServer::Impl::do_accept(Listener& l) {
  l.acceptor.async_accept([this, &l](error_code ec, tcp::socket sock) {
    if (!l.acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors (EMFILE/ENFILE) or a transient error: retry shortly, not in a
      // tight loop.
      l.retry.expires_after(std::chrono::milliseconds(100));
      l.retry.async_wait([this, &l](error_code e2) {
        if (!e2 && l.acceptor.is_open()) do_accept(l);
      });
      return;
    }
    ++accepted;
    const bool over = open.load() >= static_cast<uint64_t>(max_connections);
    auto s = std::make_shared<Session>(this, std::move(sock));
    if (over || stop_flag.load())
      s->refuse();
    else
      s->start();
    do_accept(l);
  });
}

// stop() only sets a flag (it may run in a signal handler); the loop notices here.
void HttpServer::Impl::poll_stop() {
  stop_poll.expires_after(std::chrono::milliseconds(50));
  stop_poll.async_wait([this](error_code ec) {
    if (ec) return;
    if (stop_flag.load()) {
      if (!shutting_down) {
        shutting_down = true;
        stop_began = std::chrono::steady_clock::now();
        error_code e2;
        for (Listener& l : listeners) {
          l.acceptor.close(e2);
          l.retry.cancel();
        }
      }
      // Every poll: a connection that started reading a request after the last one is
      // closed too.
      try {
        std::vector<std::shared_ptr<Session>> live;
        {
          std::lock_guard<std::mutex> lock(sessions_mu);
          for (auto& [p, w] : sessions)
            if (auto s = w.lock()) live.push_back(std::move(s));
        }
        for (auto& s : live) s->on_shutdown();
      } catch (const std::exception&) {
        // out of memory: try again at the next poll
      }
      if (open.load() == 0) return;  // nothing left: run() returns
      if (std::chrono::steady_clock::now() - stop_began > std::chrono::seconds(8)) {
        hard_stop.store(true);
        ioc.stop();
        return;
      }
    }
    poll_stop();
  });
}

std::unique_ptr<HttpServer> HttpServer::create(Options options, Handler handler) {
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->impl_ = std::make_shared<Impl>();
  s->impl_->opt = std::move(options);
  s->impl_->handler = std::move(handler);
  return s;
}

HttpServer::~HttpServer() {
  if (!impl_) return;
  stop();
  {
    std::lock_guard<std::mutex> lock(impl_->tasks_mu);
    impl_->tasks_closed = true;
  }
  impl_->tasks_cv.notify_all();
  for (auto& t : impl_->workers)
    if (t.joinable()) t.join();
}

Status HttpServer::bind() {
  Impl& im = *impl_;
  // Each connection is a descriptor: let the process have as many as it may.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    if (rl.rlim_cur < rl.rlim_max) {
      rlimit want = rl;
      want.rlim_cur = std::min<rlim_t>(rl.rlim_max, 1 << 20);
      if (setrlimit(RLIMIT_NOFILE, &want) == 0) rl = want;
    }
    const long room = rl.rlim_cur == RLIM_INFINITY ? (1L << 20) : static_cast<long>(rl.rlim_cur) - 256;
    im.max_connections = static_cast<int>(std::max(16L, std::min<long>(im.opt.max_connections, room)));
  } else {
    im.max_connections = im.opt.max_connections;
  }
  // host: one address or a comma-separated list (llama-server's --host 127.0.0.1,::1); every
  // one must bind. With port 0 the later addresses take the port the first one got.
  const std::vector<std::string> hosts = split_list(im.opt.host);
  auto close_all = [&im] {
    for (Impl::Listener& open : im.listeners) {
      error_code ignored;
      open.acceptor.close(ignored);
    }
    im.listeners.clear();
  };
  if (hosts.empty()) return Status::invalid_argument("[server] no host address to listen on");
  int port = im.opt.port;
  for (const std::string& host : hosts) {
    const std::string where = host + ":" + std::to_string(port);
    error_code ec;
    tcp::resolver resolver(im.ioc);
    auto endpoints = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
    if (ec) {
      close_all();
      return Status::error("[server] cannot resolve " + host + ": " + ec.message());
    }
    std::string last = "no address";
    Impl::Listener& l = im.listeners.emplace_back(im.ioc);
    bool bound = false;
    for (const auto& e : endpoints) {
      error_code e2;
      l.acceptor.open(e.endpoint().protocol(), e2);
      if (!e2) l.acceptor.set_option(asio::socket_base::reuse_address(true), e2);
      // With several addresses, "::" must not also claim IPv4 (a later 0.0.0.0 would clash).
      if (!e2 && hosts.size() > 1 && e.endpoint().protocol() == tcp::v6())
        l.acceptor.set_option(asio::ip::v6_only(true), e2);
      if (!e2) l.acceptor.bind(e.endpoint(), e2);
      if (!e2) l.acceptor.listen(asio::socket_base::max_listen_connections, e2);
      if (!e2) {
        bound = true;
        break;
      }
      last = e2.message();
      error_code ignored;
      l.acceptor.close(ignored);
    }
    if (!bound) {
      close_all();
      return Status::error("[server] cannot bind " + where + " (" + last + "; in use, or not a local address?)");
    }
    error_code e3;
    if (port == 0) port = l.acceptor.local_endpoint(e3).port();
  }
  return Status::ok();
}

int HttpServer::port() const {
  error_code ec;
  if (impl_->listeners.empty()) return 0;
  const auto e = impl_->listeners.front().acceptor.local_endpoint(ec);
  return ec ? 0 : e.port();
}

void HttpServer::run() {
  Impl& im = *impl_;
  if (im.listeners.empty() || !im.listeners.front().acceptor.is_open()) return;
  const int n = std::max(1, im.opt.workers);
  for (int i = 0; i < n; ++i) im.workers.emplace_back([&im] { im.worker_loop(); });
  for (Impl::Listener& l : im.listeners) im.do_accept(l);
  im.poll_stop();
  for (;;) {
    try {
      im.ioc.run();
      break;
    } catch (const std::exception& e) {  // e.g. out of memory in one connection's handler
      std::fprintf(stderr, "specula: http loop: %s (continuing)\n", e.what());
    }
  }
  {
    std::lock_guard<std::mutex> lock(im.tasks_mu);
    im.tasks_closed = true;
  }
  im.tasks_cv.notify_all();
  for (auto& t : im.workers) t.join();
  im.workers.clear();
}

void HttpServer::stop() { impl_->stop_flag.store(true); }

bool HttpServer::stopping() const { return impl_->stop_flag.load(); }

Stats HttpServer::stats() const {
  Stats s;
  s.open_connections = impl_->open.load();
  s.accepted_total = impl_->accepted.load();
  s.refused_over_cap_total = impl_->refused.load();
  s.timed_out_total = impl_->timed_out.load();
  s.malformed_total = impl_->malformed.load();
  return s;
}

}  // namespace specula::server::http
