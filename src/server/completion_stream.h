// server/completion_stream.h — the consumer of one request (the server's, or the library's
// typed request): turns the engine's tokens into text (streaming detokenizer: always valid
// UTF-8), applies stop strings and hands text + logprob entries (and, asked, token ids) to
// the waiting thread through a small mailbox.
//
// Stop strings are matched across token boundaries: text that could still be the start of
// a stop string is held back, so a stop string is never emitted, not even partly; when one
// completes, the text before it is released and the request ends (finish "stop").
// Logprob entries go out with the text that contains their token: an entry is released
// once its token's text is fully released (at the end: once any of it is).
// on_tokens/on_finish run on the engine thread and never block on the client; the HTTP
// thread calls wait(). Does not format JSON or SSE (server.cpp).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/request.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace specula::server {

class CompletionStream : public RequestSink {
 public:
  // `tokenizer` must outlive the stream. stop: non-empty strings. want_logprobs: collect
  // TokenLogprob entries. want_ids: also hand out every token id as it comes (and its
  // logprob), waking wait() for them even while their text is held back (the library's
  // typed requests; the HTTP answers carry text only). want_progress: keep the engine's
  // prompt progress reports (Update::progress) and wake wait() for them; off, they are
  // dropped (a stream that would only wake to send nothing).
  CompletionStream(const tokenizer::Tokenizer& tokenizer, std::vector<std::string> stop, bool want_logprobs,
                   bool want_ids = false, bool want_progress = false);

  bool on_tokens(std::span<const TokenEvent> events) override;
  void on_prompt_logprobs(std::span<const TokenEvent> events) override;
  void on_prompt_progress(int64_t processed, int64_t total, int64_t cached) override;
  void on_finish(const RequestSummary& summary) override;

  struct Update {
    std::string text;                     // newly released text (valid UTF-8)
    std::vector<TokenLogprob> logprobs;   // newly released entries
    std::vector<TokenLogprob> prompt_logprobs;  // prompt tokens' entries (EngineRequest::prompt_logprobs)
    std::vector<int32_t> token_ids;       // want_ids: the tokens generated since the last update
    std::vector<float> token_logprobs;    // ... and their logprobs (when want_logprobs)
    // Prompt progress since the last update (llama-server's prompt_progress): prompt
    // tokens in all (total), served by the prompt cache (cache), in the state so far
    // (processed, cache included), milliseconds since admission (time_ms).
    struct Progress {
      int64_t total = 0, cache = 0, processed = 0;
      double time_ms = 0;
    };
    std::vector<Progress> progress;
    bool finished = false;
    RequestSummary summary;               // when finished
    std::string finish_reason;            // "stop" | "length" | "cancelled" | "failed" when finished
    std::string stop_sequence;            // when finished by a stop string: which one
  };
  // HTTP thread: waits up to `timeout` for news; returns what was released since the last
  // call (possibly nothing).
  Update wait(std::chrono::milliseconds timeout);

 private:
  void release(size_t n_bytes);  // moves n bytes of held_ (and covered entries) to the mailbox; mu_ held

  const tokenizer::Tokenizer* tokenizer_;
  tokenizer::StreamingDetokenizer detok_;
  std::vector<std::string> stop_;
  bool want_logprobs_;
  bool want_ids_;
  bool want_progress_;
  bool stopped_by_string_ = false;
  std::string stopped_by_;  // the stop string that ended the output

  std::mutex mu_;
  std::condition_variable cv_;
  // Engine-thread state (also read under mu_).
  std::string held_;           // text not yet released (could start a stop string)
  int64_t released_bytes_ = 0; // total text bytes released so far
  int64_t produced_bytes_ = 0; // total text bytes produced so far (released + held_)
  struct PendingEntry {
    TokenLogprob entry;
    int64_t start = 0, end = 0;  // byte range of the token's text in the whole output
  };
  std::deque<PendingEntry> entries_;
  // Mailbox.
  Update out_;
  std::chrono::steady_clock::time_point admitted_;  // the first progress report
  bool progress_started_ = false;
};

}  // namespace specula::server
