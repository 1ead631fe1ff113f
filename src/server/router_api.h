// server/router_api.h — what the routers in front of replicas ask of a worker, so that
// specula runs behind them as SGLang or vLLM would:
//
//   GET  /server_info, /get_server_info   SGLang's server facts: sglang-router (its model
//                                         gateway) reads model_path, served_model_name,
//                                         tp_size/dp_size, max_running_requests, ...
//   GET  /model_info, /get_model_info     SGLang's model facts: model_path, tokenizer_path,
//                                         is_generation, model_type, architectures
//   GET  /get_load                        SGLang's load, one entry per data-parallel rank:
//                                         [{"dp_rank": 0, "num_reqs", "num_waiting_reqs",
//                                         "num_tokens"}] (sglang-router's power-of-two policy
//                                         sums num_tokens)
//   POST /generate                        SGLang's native generation: {"text" | "input_ids",
//                                         "sampling_params": {...}, "stream", "return_logprob",
//                                         "top_logprobs_num"} answered with {"text",
//                                         "output_ids", "meta_info"}; streamed as SSE chunks
//                                         whose text and output_ids are cumulative, then
//                                         "data: [DONE]"
//   POST /v1/completions/render           vLLM's render: the prompt's token ids without
//   POST /v1/chat/completions/render      generating (vllm-router's cache-aware policy
//                                         tokenizes every request through it)
//   GET  /health_generate                 SGLang's deeper health check: a one-token generation
//
// Shapes: SGLang's python/sglang/srt/entrypoints/http_server.py and managers/
// tokenizer_manager.py (meta_info, finish_reason {"type": "stop"|"length"|"abort", ...}),
// vLLM's entrypoints (render), and what sglang-router 0.3.2 / vllm-router 0.1.17 send
// (tests/fixtures/router_requests.json, tools/capture_router_requests.py).
// Differences: /get_load has SGLang's shape (a list); vllm-router's power-of-two reads
// {"load": n} from it, which vLLM itself does not serve either, so that policy sees equal
// loads there. /generate refuses fields it would ignore (lora_path, image_data,
// custom_logit_processor, ebnf, stop_token_ids, min_new_tokens > 0, ...) with a 400
// naming them. The Gateway API Inference Extension's gauges are in /metrics (metrics.h).
// Does not: route (server.cpp), or parse the OpenAI fields (openai_api.h).
#pragma once

#include "server/generation.h"
#include "server/http.h"
#include "server/served_model.h"

namespace specula::server {

void handle_server_info(const ServedModel& served, http::Exchange& ex);
void handle_model_info(const ServedModel& served, http::Exchange& ex);
void handle_get_load(const ServedModel& served, http::Exchange& ex);
void handle_generate(ServedModel& served, const http::Request& req, http::Exchange& ex, GenerationLog* log);
void handle_render(ServedModel& served, const http::Request& req, http::Exchange& ex, Endpoint endpoint);
void handle_health_generate(ServedModel& served, http::Exchange& ex);

}  // namespace specula::server
