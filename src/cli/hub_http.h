// cli/hub_http.h — the HTTP side of `specula pull` (cli/hub.cpp): SHA-256 over OpenSSL's
// EVP digest, URLs (parsing, encoding, redirect resolution) and one request at a time over
// cpp-httplib with the hub's headers and bounded bodies. Internal to cli/hub.cpp.
// Does not: follow redirects by itself, retry, or know the hub's API (hub.cpp does).
#pragma once

#include <openssl/evp.h>

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "cli/hub.h"

namespace specula::hub::detail {

constexpr size_t kMaxJsonBytes = size_t{64} << 20;  // the API answer (a repo lists its files)
constexpr size_t kMaxErrorBody = size_t{64} << 10;  // kept of a non-2xx body, for the message

// ---- SHA-256 (OpenSSL's EVP digest; libcrypto comes with cpp-httplib's TLS) ----------------

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    SPECULA_CHECK(ctx_ != nullptr && EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) == 1);
  }
  void update(const void* data, size_t n) { SPECULA_CHECK(EVP_DigestUpdate(ctx_.get(), data, n) == 1); }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    SPECULA_CHECK(EVP_DigestFinal_ex(ctx_.get(), md, &len) == 1);
    static const char* kHex = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < len; ++i) out += kHex[md[i] >> 4], out += kHex[md[i] & 15];
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

// ---- small helpers ----------------------------------------------------------------------

inline bool is_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}
inline bool is_alnum(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// A server-sent string shown in a message: at most 200 bytes, control characters as '?'.
inline std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 200)) out += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c;
  if (s.size() > 200) out += "...";
  return out;
}

// Percent-encodes all but RFC 3986's unreserved characters (and '/' when keep_slash).
inline std::string url_encode(std::string_view s, bool keep_slash) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (is_alnum(static_cast<char>(c)) || c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// 512 B, 12.3 kB, 45.6 MB, 7.89 GB.
inline std::string human_bytes(uint64_t bytes) {
  char b[32];
  const double x = static_cast<double>(bytes);
  if (bytes < 1000)
    std::snprintf(b, sizeof(b), "%llu B", static_cast<unsigned long long>(bytes));
  else if (x < 1e6)
    std::snprintf(b, sizeof(b), "%.1f kB", x / 1e3);
  else if (x < 1e9)
    std::snprintf(b, sizeof(b), "%.1f MB", x / 1e6);
  else
    std::snprintf(b, sizeof(b), "%.2f GB", x / 1e9);
  return b;
}

inline double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Parses a decimal header value; -1 when absent or not a number.
inline int64_t header_int(const httplib::Headers& h, const char* key) {
  auto it = h.find(key);
  if (it == h.end() || it->second.empty() || it->second.size() > 18) return -1;
  int64_t v = 0;
  for (char c : it->second) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

inline std::string header(const httplib::Headers& h, const char* key) {
  auto it = h.find(key);
  return it == h.end() ? std::string() : it->second;
}

// ---- URLs -------------------------------------------------------------------------------

struct Url {
  std::string scheme;  // "http" or "https"
  std::string host;    // as written ("[::1]" for IPv6)
  int port = 0;
  std::string path;  // starts with '/', percent-encoded
  std::string origin() const { return scheme + "://" + host + ":" + std::to_string(port); }
  // As a person writes it: without the scheme's default port.
  std::string shown_origin() const {
    const bool default_port = (scheme == "http" && port == 80) || (scheme == "https" && port == 443);
    return default_port ? scheme + "://" + host : origin();
  }
  std::string str() const { return shown_origin() + path; }
};

inline Result<Url> parse_url(const std::string& s) {
  const size_t sep = s.find("://");
  if (sep == std::string::npos) return Status::error("[hub] '" + printable(s) + "' is not an http(s) URL");
  Url u;
  for (char c : s.substr(0, sep)) u.scheme += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (u.scheme != "http" && u.scheme != "https")
    return Status::error("[hub] '" + printable(s) + "': only http:// and https:// URLs are supported");
  const size_t start = sep + 3;
  size_t end = s.find_first_of("/?#", start);
  if (end == std::string::npos) end = s.size();
  const std::string authority = s.substr(start, end - start);
  u.path = end < s.size() && s[end] == '/' ? s.substr(end) : "/" + s.substr(end);
  if (const size_t hash = u.path.find('#'); hash != std::string::npos) u.path.resize(hash);
  if (authority.empty() || authority.find('@') != std::string::npos)
    return Status::error("[hub] '" + printable(s) + "': no host (or a user name, which is not supported)");
  std::string port;
  if (authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) return Status::error("[hub] '" + printable(s) + "': unclosed '[' in the host");
    u.host = authority.substr(0, close + 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return Status::error("[hub] '" + printable(s) + "': bad host");
      port = authority.substr(close + 2);
    }
  } else {
    const size_t colon = authority.find(':');
    u.host = authority.substr(0, colon);
    if (colon != std::string::npos) port = authority.substr(colon + 1);
  }
  for (char c : u.host)
    if (static_cast<unsigned char>(c) <= 0x20 || c == '/' || c == '\\')
      return Status::error("[hub] '" + printable(s) + "': bad host");
  if (u.host.empty() || u.host == "[]") return Status::error("[hub] '" + printable(s) + "': no host");
  if (port.empty()) {
    u.port = u.scheme == "https" ? 443 : 80;
  } else {
    if (port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        std::stoi(port) < 1 || std::stoi(port) > 65535)
      return Status::error("[hub] '" + printable(s) + "': bad port '" + printable(port) + "'");
    u.port = std::stoi(port);
  }
  for (char c : u.path)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      return Status::error("[hub] '" + printable(s) + "': the path holds a space or control character");
  return u;
}

// A Location header relative to the URL it came from.
inline Result<Url> resolve_location(const Url& base, const std::string& loc) {
  if (loc.empty()) return Status::error("[hub] " + base.str() + ": redirect without a Location");
  if (loc.find("://") != std::string::npos) return parse_url(loc);
  if (loc.size() >= 2 && loc[0] == '/' && loc[1] == '/') return parse_url(base.scheme + ":" + loc);
  Url u = base;
  if (loc[0] == '/') {
    u.path = loc;
  } else {
    std::string dir = base.path.substr(0, base.path.find('?'));
    u.path = dir.substr(0, dir.rfind('/') + 1) + loc;
  }
  for (char c : u.path)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      return Status::error("[hub] " + base.str() + ": bad redirect Location '" + printable(loc) + "'");
  return u;
}

// ---- HTTP -------------------------------------------------------------------------------

struct Reply {
  bool responded = false;  // a status line and headers arrived
  int status = 0;
  httplib::Headers headers;
  std::string body;  // the body of a non-2xx answer (bounded), or of a 2xx one without a sink
  httplib::Error error = httplib::Error::Success;
  std::string cancel_reason;  // set when on_response / the sink stopped the transfer
};

struct Http {
  const PullOptions& o;
  std::string endpoint_origin;
  std::string token;

  httplib::Headers headers_for(const Url& u) const {
    httplib::Headers h = {{"User-Agent", "specula/0.1 (hub client; cpp-httplib)"}};
    if (!token.empty() && u.origin() == endpoint_origin) h.emplace("Authorization", "Bearer " + token);
    return h;
  }

  // One request, no redirect followed. `on_response` sees the status and headers first
  // (returning false cancels); the body of a 2xx answer goes to `sink` when given.
  Reply send(const Url& u, bool head, httplib::Headers h, const std::function<bool(Reply&)>& on_response,
             const std::function<bool(const char*, size_t)>& sink, size_t body_limit) const {
    Reply r;
    httplib::Client cli(u.origin());
    if (!cli.is_valid()) {
      r.error = httplib::Error::Connection;
      return r;
    }
    cli.set_follow_location(false);
    cli.set_keep_alive(false);
    cli.set_decompress(false);
    cli.set_connection_timeout(o.connect_timeout_s, 0);
    cli.set_read_timeout(o.read_timeout_s, 0);
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
    cli.enable_server_certificate_verification(true);
#endif
    h.emplace("Accept-Encoding", "identity");
    if (head) {
      auto res = cli.Head(u.path, h);
      r.error = res.error();
      if (res) {
        r.responded = true;
        r.status = res->status;
        r.headers = res->headers;
      }
      return r;
    }
    auto res = cli.Get(
        u.path, h,
        [&](const httplib::Response& res) {
          r.responded = true;
          r.status = res.status;
          r.headers = res.headers;
          return on_response ? on_response(r) : true;
        },
        [&](const char* data, size_t n) {
          if (sink && r.status >= 200 && r.status < 300) return sink(data, n);
          if (r.body.size() + n > body_limit) {
            r.cancel_reason = "the answer is larger than " + std::to_string(body_limit) + " bytes";
            return false;
          }
          r.body.append(data, n);
          return true;
        });
    r.error = res.error();
    return r;
  }

  // The error for a request that got no complete answer.
  Status transport_error(const Url& u, const Reply& r, const std::string& what) const {
    if (!r.cancel_reason.empty()) return Status::error("[hub] " + what + " (" + u.str() + "): " + r.cancel_reason);
    const std::string msg = "[hub] " + what + ": ";
    const std::string hint = " (is the endpoint right and reachable? set it with --endpoint or HF_ENDPOINT)";
    switch (r.error) {
      case httplib::Error::Connection:
        if (!r.responded) return Status::error(msg + "cannot connect to " + u.shown_origin() + hint);
        return Status::error(msg + "connection to " + u.shown_origin() + " lost");
      case httplib::Error::ConnectionTimeout:
        return Status::error(msg + "connecting to " + u.shown_origin() + " timed out after " +
                             std::to_string(o.connect_timeout_s) + " s" + hint);
      case httplib::Error::Read:
        return Status::error(msg + "connection lost (or no data for " + std::to_string(o.read_timeout_s) +
                             " s) while reading " + u.str());
      case httplib::Error::Write:
        return Status::error(msg + "connection lost while sending the request to " + u.str());
      case httplib::Error::SSLConnection:
        return Status::error(msg + "TLS handshake with " + u.shown_origin() + " failed (is it an https server?)");
      case httplib::Error::SSLServerVerification:
        return Status::error(msg + "the TLS certificate of " + u.shown_origin() + " does not verify");
      case httplib::Error::SSLLoadingCerts:
        return Status::error(msg + "cannot load the system's CA certificates for " + u.shown_origin());
      default:
        return Status::error(msg + "HTTP client error '" + httplib::to_string(r.error) + "' from " + u.str());
    }
  }

  // "HTTP 404 (Repository not found)" from a non-2xx answer: the server's message from a
  // JSON {"error": ...} body or its X-Error-Message header when there is one.
  static std::string status_text(const Reply& r) {
    std::string s = "HTTP " + std::to_string(r.status);
    std::string detail = header(r.headers, "X-Error-Message");
    if (detail.empty()) {
      auto j = nlohmann::json::parse(r.body, nullptr, false);
      if (j.is_object() && j.contains("error") && j["error"].is_string()) detail = j["error"].get<std::string>();
    }
    if (!detail.empty()) s += " (" + printable(detail) + ")";
    if (r.status == 401 || r.status == 403) s += "; a gated or private repository needs HF_TOKEN";
    return s;
  }
};

}  // namespace specula::hub::detail
