// server/webui.cpp — see webui.h.
#include "server/webui.h"

#include "webui_index.inc"

namespace specula::server {

bool is_webui_path(const std::string& path) { return path == "/" || path == "/index.html"; }

bool serve_webui(const http::Request& req, http::Exchange& ex) {
  if (!is_webui_path(req.path) || (req.method != "GET" && req.method != "HEAD")) return false;
  std::string body(reinterpret_cast<const char*>(kIndexHtml), kIndexHtml_size);
  ex.respond(200, "text/html; charset=utf-8", std::move(body),
             {{"Content-Security-Policy",
               "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:"},
              {"X-Content-Type-Options", "nosniff"},
              {"Cache-Control", "no-cache"}});
  return true;
}

}  // namespace specula::server
