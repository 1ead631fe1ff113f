// server/webui.h — the chat page at / (llama-server has one too): webui/index.html, built
// into the binary at build time (scripts/embed_file.cmake), served to GET / and
// /index.html with a Content-Security-Policy that lets it load nothing from elsewhere.
// The page calls the server's own /v1/chat/completions (streamed; its Stop button aborts
// the request, and the server cancels it: its row is freed), keeps conversations in the
// browser's localStorage and renders markdown itself. ServerOptions::webui (--no-webui)
// turns it off; its paths need no API key (the page asks for the key in its settings).
#pragma once

#include <string>

#include "server/http.h"

namespace specula::server {

// Whether `path` is one of the page's.
bool is_webui_path(const std::string& path);

// Answers a GET (or HEAD) of one of the page's paths and returns true; false (answering
// nothing) for any other request.
bool serve_webui(const http::Request& req, http::Exchange& ex);

}  // namespace specula::server
