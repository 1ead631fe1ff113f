// server/engine_request.h — from a parsed request (server/request.h) to what the engine
// runs: the prompt's token ids (a completion's text or ids; a chat's messages rendered by
// the model's template, control tokens only from the template), the compiled
// structured-output constraint (or the forced tool call's grammar), the sampling
// parameters with the request's seed (a random one when none was sent) and DRY's breakers
// as token ids, max_tokens (until the context is full when not given), echo's prompt and
// prompt logprobs, and the generation-checkpoint key.
// Shared by every API family; all of it runs on the request's HTTP worker thread.
// Does not: submit or wait (generation.h), or parse JSON (the family files).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/reasoning.h"
#include "engine/engine.h"
#include "server/errors.h"
#include "server/request.h"
#include "server/served_model.h"

namespace specula::server {

// The chat template's variables for a chat request (messages, tools, BOS/EOS text).
// render_only: for a rendering that is not generated from (/apply-template): tools are
// given to any template, even one whose calls specula cannot read back.
std::variant<nlohmann::ordered_json, ApiError> chat_context(const ServedModel& served, const CompletionParams& c,
                                                            bool render_only = false);

// The text the model would see for a chat request, before tokenization (/apply-template).
std::variant<std::string, ApiError> render_chat_prompt(const ServedModel& served, const CompletionParams& c);

// Prompt ids of a parsed request (completions: of its prompt `index`), or why not (no
// template, the template failed, empty, an id outside the vocabulary).
// thinking (chat): set to where the rendered prompt leaves the model — inside a thinking
// block (kOpen), after one it closed (kClosed: the answer is all content), or neither
// (chat/reasoning.h).
enum class ThinkingStart { kMaybe, kOpen, kClosed };
std::optional<ApiError> build_prompt(const ServedModel& served, const CompletionParams& c, std::vector<int32_t>* ids,
                                     size_t index = 0, ThinkingStart* thinking = nullptr);

// The request's grammar compiled (its first mask included, so an empty language is
// refused here), or null when it has none; or the 400 that says why not.
std::optional<ApiError> compile_constraint(ServedModel& served, const CompletionParams& c,
                                           std::shared_ptr<TokenConstraint>* out);

struct PreparedRequest {
  EngineRequest request;             // its choice 0's (choice i samples with seed + i)
  int64_t n_prompt = 0;
  std::string echo_text;             // echo: the prompt as sent (token ids as their text)
  std::vector<TokenLogprob> echo_logprobs;  // echo with logprobs: the first prompt token's (null) entry
  ThinkingStart thinking = ThinkingStart::kMaybe;  // chat: where the prompt leaves the thinking
};

// Reasoning for a chat request on this model: whether its answer's thinking is split out
// (the template has a thinking format, neither the request nor --reasoning-format says
// "none", and the prompt did not close the block already: `start`), and the thinking budget
// in tokens (< 0: unlimited).
struct ReasoningPlan {
  chat::ReasoningFormat format = chat::ReasoningFormat::kNone;  // kNone: not split
  int64_t budget = -1;
  bool constrain = false;  // a ThinkingBudget runs in the engine (a budget, or a grammar for the answer)
};
ReasoningPlan reasoning_plan(const ServedModel& served, const CompletionParams& c, ThinkingStart start);

// `grammar` (may be null) wrapped in the request's thinking budget when `plan` asks for one.
std::optional<ApiError> wrap_thinking(const ServedModel& served, const ReasoningPlan& plan, bool opens_thinking,
                                      std::shared_ptr<TokenConstraint>* grammar);

// The engine request of the prompt `index` of a request (chat: 0) with `seed` (the
// request's: the client's, or one random seed for all its prompts); its constraint is left
// to the caller (one compiled grammar per request, a clone per choice).
std::variant<PreparedRequest, ApiError> prepare_request(ServedModel& served, const CompletionParams& c, size_t index,
                                                        uint64_t seed);

// The checks of a request as a whole before any prompt is prepared: the model it names
// (`unknown_model`: the family's code for a model this server does not serve), and that
// a batch of prompts fits the engine's rows and queue at once.
std::optional<ApiError> check_request(const ServedModel& served, const CompletionParams& c, StatusCode unknown_model);

}  // namespace specula::server
