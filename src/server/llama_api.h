// server/llama_api.h — llama-server's own API beside the OpenAI one, so that tools written
// for llama-server (editor plugins, front ends, scripts) work unchanged:
//
//   POST /completion, /completions   the native completion object (content, tokens, stop,
//                                    stop_type, timings, generation_settings, ...) and its
//                                    stream of {"content", "tokens", "stop": false, ...}
//                                    chunks ending with the whole object (stop: true)
//   POST /infill                     fill-in-the-middle with the model's FIM tokens
//                                    (Qwen2.5-Coder's <|fim_prefix|>, CodeLlama's <PRE>...),
//                                    repo-level layout with input_extra files; native answer
//   GET  /props                      the server's settings (slots, context, template, ...)
//   GET  /slots                      the state rows, one entry each
//   POST /rerank, /v1/rerank, ...    501: no reranking model is served
//   GET/POST /lora-adapters          the adapters and their global scales (side_routes.cpp)
//
// Shapes and field names follow llama-server (tools/server in llama.cpp: server-task.cpp's
// to_json_non_oaicompat, server-context.cpp's props/infill/slots handlers; its README's
// API section). Differences are listed in docs/API.md ("llama-server drop-in").
// Does not: parse the shared request fields (openai_api.h does), wait for tokens
// (generation.h), or route (server.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/answer_format.h"
#include "server/generation.h"
#include "server/http.h"
#include "server/openai_api.h"
#include "server/served_model.h"

namespace specula::server {

// The answer format of /completion and /infill: llama-server's native objects.
class LlamaFormat : public AnswerFormat {
 public:
  std::unique_ptr<AnswerFormat> another() const override { return std::make_unique<LlamaFormat>(); }
  nlohmann::ordered_json error_body(const ApiError& e) const override { return openai_error_body(e); }
  std::string id_prefix() const override { return "cmpl-"; }
  bool wants_prompt_text(const CompletionParams&) const override { return true; }
  nlohmann::ordered_json whole(const std::string& text, const std::vector<TokenLogprob>& lps,
                               const CompletionStream::Update& u) override;
  // One prompt: its object; several (a batch, or n > 1): an array of them, as llama-server.
  nlohmann::ordered_json combine(std::vector<nlohmann::ordered_json> choices, const Usage& total) const override;
  std::string stream_piece(const CompletionStream::Update& u) override;
  std::string stream_end(const CompletionStream::Update& u) override;

 private:
  std::vector<int32_t> pending_ids_;  // streamed: ids not yet sent (their text held back)
  int64_t n_streamed_ = 0;            // tokens sent so far
  bool has_new_line_ = false;
};

// llama-server's native completion object of a finished choice (`text`: its content;
// `ids`: its token ids, listed with return_tokens; `lps`: completion_probabilities when
// n_probs > 0, null: none). Also the "__verbose" of OpenAI answers (verbose).
nlohmann::ordered_json native_object(const Generation& g, const std::string& text, const std::vector<int32_t>& ids,
                                     const std::vector<TokenLogprob>* lps, const CompletionStream::Update& u,
                                     bool has_new_line);

// llama-server's completion_probabilities array: per token {id, token, bytes, logprob,
// top_logprobs: [{id, token, bytes, logprob}]}.
nlohmann::ordered_json completion_probabilities(const std::vector<TokenLogprob>& lps, bool post_sampling = false);

// llama-server's "timings" object of a finished request: cache_n, prompt_n (prefilled,
// i.e. not from the prompt cache), prompt_ms, prompt_per_token_ms, prompt_per_second,
// predicted_n, predicted_ms, predicted_per_token_ms, predicted_per_second. The first token
// comes with the prefill: the decode rates are over the tokens after it.
nlohmann::ordered_json timings_json(const RequestSummary& summary);
// The same fields for a prompt_progress event: prompt_n/prompt_ms so far, nothing predicted.
nlohmann::ordered_json progress_timings_json(const CompletionStream::Update::Progress& p);
// llama-server's prompt_progress object {total, cache, processed, time_ms}.
nlohmann::ordered_json progress_json(const CompletionStream::Update::Progress& p);

// The request's settings as llama-server's generation_settings object reports them.
nlohmann::ordered_json generation_settings(const CompletionParams& c, uint64_t seed);

// The fill-in-the-middle tokens of a vocabulary (tokenizer.ggml.fim_*_token_id, else the
// token texts llama.cpp recognises); -1 where absent. /infill needs pre, suf and mid.
struct FimTokens {
  int32_t pre = -1, suf = -1, mid = -1, rep = -1, sep = -1;
};
FimTokens fim_tokens(const ServedModel& served);

// The /infill prompt, as llama-server lays it out (the repo-level pattern of Qwen2.5-Coder,
// arXiv:2409.12186): [REP]myproject\n ([SEP]filename\n text)* [SEP]filename\n, then
// [PRE] prefix prompt [SUF] suffix [MID] — BOS first where the model adds one; the prefix
// keeps its last 1536 tokens and the suffix its first 512 - 2 - len(prompt) (llama-server's
// 3:1 split of a 2048-token batch); extra files fill what the context leaves. Without
// REP/SEP tokens each extra text follows a "\n\n--- snippet ---\n\n" line.
struct InfillInput {
  std::string prefix, suffix, prompt;
  std::vector<std::pair<std::string, std::string>> extra;  // (filename, text)
};
std::vector<int32_t> infill_prompt(const ServedModel& served, const FimTokens& fim, const InfillInput& in,
                                   int64_t n_ctx, int64_t n_predict);

// The route handlers (see the table above).
void handle_native_completion(ServedModel& served, const http::Request& req, http::Exchange& ex, GenerationLog* log);
void handle_infill(ServedModel& served, const http::Request& req, http::Exchange& ex, GenerationLog* log);
void handle_props(const ServedModel& served, http::Exchange& ex);
// POST /chat/completions/input_tokens: a chat request's prompt length, {"input_tokens": N}.
void handle_chat_input_tokens(const ServedModel& served, const http::Request& req, http::Exchange& ex);
void handle_slots(const ServedModel& served, http::Exchange& ex);
// An answer for a route specula knows but cannot serve here: 501 naming what is missing.
void handle_not_supported(http::Exchange& ex, const std::string& what);

}  // namespace specula::server
