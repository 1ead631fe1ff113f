// server/answer_format.h — how one API family writes a generation's answer, whole or as a
// stream of events: the interface the generation driver (server/generation.h) writes
// through, implemented by the OpenAI (openai_api.h) and Anthropic (anthropic_api.h) files.
// One AnswerFormat object per choice of an answer (n > 1: one each, with its index); each
// keeps its own streaming state (tool calls held for parsing, the text offset, whether the
// role or a content block went out).
// Does not: wait for tokens, talk HTTP or decide when a request ends (the driver does).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/reasoning.h"
#include "chat/tool_calls.h"
#include "grammar/thinking_budget.h"
#include "server/completion_stream.h"
#include "server/errors.h"
#include "server/request.h"

namespace specula::server {

// What an answer format knows of the generation it writes.
struct Generation {
  std::string id;       // the answer's id (shared by its choices)
  std::string model;    // the served model id
  int64_t created = 0;  // unix seconds
  int64_t n_prompt = 0;
  uint64_t seed = 0;    // the seed this choice sampled with
  int index = 0;        // the choice's index (n > 1)
  const CompletionParams* params = nullptr;
  std::string prompt_text;  // the prompt's tokens as text (only for formats that want it)
  // Reasoning (chat/reasoning.h): the answer's thinking format (kNone: not split), whether
  // the prompt opened the block, and the budget constraint that counts its tokens (null:
  // none runs).
  chat::ReasoningFormat reasoning = chat::ReasoningFormat::kNone;
  bool in_thinking = false;
  std::shared_ptr<const ThinkingBudget> thinking;
};

// Token counts of a whole answer (all its choices).
struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served by the prompt cache (usage.prompt_tokens_details)
  int64_t reasoning_tokens = -1;  // thinking tokens (-1: not a reasoning answer)
  // Speculative decoding telemetry (specula extension, reported as usage.speculative
  // when spec_rounds > 0): verify rounds with drafts, drafted and accepted tokens.
  int64_t spec_rounds = 0, drafted = 0, accepted = 0;
};

class AnswerFormat {
 public:
  virtual ~AnswerFormat() = default;
  // A fresh format of the same kind, for another choice of the same answer.
  virtual std::unique_ptr<AnswerFormat> another() const = 0;
  // An error answer's body in this family's shape.
  virtual nlohmann::ordered_json error_body(const ApiError& e) const = 0;
  // The error code of a request naming a model this server does not serve (OpenAI: 400
  // with code model_not_found; Anthropic: 404).
  virtual StatusCode unknown_model_code() const { return StatusCode::kInvalidArgument; }
  virtual std::string id_prefix() const = 0;
  // Whether the driver fills Generation::prompt_text, and hands out every token id
  // (Update::token_ids; the final update of a whole answer carries all of them).
  virtual bool wants_prompt_text(const CompletionParams& c) const {
    (void)c;
    return false;
  }
  // tools: the format the model writes tool calls in; kNone when the request has no tools.
  void begin(Generation g, chat::ToolFormat tools);

  // Non-streamed: one choice's whole answer; `u` is its final update, `text`/`lps` all of it.
  virtual nlohmann::ordered_json whole(const std::string& text, const std::vector<TokenLogprob>& lps,
                                       const CompletionStream::Update& u) = 0;
  // The body of an answer with several choices (each one's whole()), usage summed.
  virtual nlohmann::ordered_json combine(std::vector<nlohmann::ordered_json> choices, const Usage& total) const {
    (void)total;
    return std::move(choices.front());
  }
  // Streamed: events before any text; for one update's text; after this choice's finish
  // (including the error event of a failed or cancelled generation); and once after every
  // choice has finished (`usage`: the answer's, or null when it is not to be reported).
  virtual std::string stream_start() { return ""; }
  virtual std::string stream_piece(const CompletionStream::Update& u) = 0;
  virtual std::string stream_end(const CompletionStream::Update& u) = 0;
  virtual std::string stream_close(const Usage* usage) {
    (void)usage;
    return "";
  }

 protected:
  // The thinking tokens of this choice (-1: not a reasoning answer).
  int64_t reasoning_tokens() const;
  // A whole answer split into its thinking and the rest (all content when not split).
  chat::SplitAnswer split_whole(const std::string& text) const;
  Generation g_;
  chat::ToolCallStream calls_;
  chat::ReasoningStream reasoning_;  // streamed answers' split
};

// The error of a generation that did not finish: the request's own grammar giving out
// (llguidance's limits, a dead end) is the request's fault (400, naming its field);
// anything else is the server's (500), or the shutdown's (503).
ApiError generation_error(const CompletionStream::Update& u, const CompletionParams* c);

// Usage of one finished choice.
Usage usage_of(const RequestSummary& s);

// "data: <json>\n\n".
std::string sse(const nlohmann::ordered_json& j);

}  // namespace specula::server
