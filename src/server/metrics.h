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
#include "server/served_model.h"

namespace specula::server {

std::string metrics_text(const ServedModel& served, const http::Stats& http_stats,
                         const std::map<int, uint64_t>& responses_by_status);

}  // namespace specula::server
