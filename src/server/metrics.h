// server/metrics.h — GET /metrics: the Prometheus text exposition format 0.0.4 of the
// engine's counters and histograms (requests by outcome, tokens, steps, speculation,
// grammar masks, KV budget), the HTTP layer's (responses by status, connections), the
// prompt cache's, the process's memory, llama-server's llamacpp:* series, and the gauges
// routers scrape under vLLM's and SGLang's names (vllm:num_requests_waiting, ...).
// Does not: keep counters itself (the engine, the HTTP layer and the server do).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "server/http.h"
#include "server/model_registry.h"
#include "server/served_model.h"

namespace specula::server {

// `served` null (several models, none loaded): the HTTP layer's and the process's only.
std::string metrics_text(const ServedModel* served, const http::Stats& http_stats,
                         const std::map<int, uint64_t>& responses_by_status);
// Several models: each one's state (specula_model_loaded{model=}, specula_model_bytes,
// specula_model_requests).
std::string models_metrics_text(const std::vector<ModelRegistry::Info>& models);

}  // namespace specula::server
