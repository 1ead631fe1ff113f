// server/request.h — a generation request as the server's routes hand it to the generation
// driver (server/generation.h), whatever API family it came from: the prompt (text or
// ids) or chat messages, tools, sampling, limits, stop strings, output options and a
// structured-output constraint. Each family's parser (openai_api.h, anthropic_api.h) fills
// one; prompt.h turns it into token ids and a compiled constraint.
// Does not: parse JSON, tokenize or talk HTTP.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/constraint.h"
#include "sampling/params.h"

namespace specula::server {

enum class Endpoint { kCompletions, kChat };

struct CompletionParams {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;  // as sent (may be empty when omitted)
  // llama-server's per-request LoRA adapters "lora": [{"id", "scale"}] (ids of GET
  // /lora-adapters); when sent, it replaces the global scales (server/lora_adapters.h).
  std::optional<std::vector<std::pair<int64_t, float>>> lora;
  // completions: the prompts, each as text or as token ids (one, or a batch: then one
  // choice per prompt, in order)
  struct Prompt {
    bool is_ids = false;
    std::string text;
    std::vector<int32_t> ids;
    // llama-server's mixed prompt ["text", 12, 34, "more text"]: strings tokenized (the
    // first with the model's BOS rule), integers as token ids; null otherwise.
    nlohmann::ordered_json mixed;
  };
  std::vector<Prompt> prompts;
  // chat: messages with content flattened to strings ({role, content} + other fields kept;
  // an assistant turn's tool_calls[].function.arguments parsed from its JSON string into
  // an object, as chat templates expect)
  nlohmann::ordered_json messages;
  // chat: the tool definitions given to the template (null: none, or tool_choice "none")
  nlohmann::ordered_json tools;
  bool parallel_tool_calls = true;  // false: an answer carries at most its first call
  // absent: until the context is full; 0 (completions): no generation, the prompt is only
  // prefilled (with echo and logprobs: scored)
  std::optional<int32_t> max_tokens;
  std::string max_tokens_field = "max_tokens";  // the field it came from (n_predict, max_completion_tokens)
  // max_tokens is the server's --n-predict default, not the client's: a prompt that leaves
  // less room is refused as llama-server refuses it, the error naming --n-predict.
  bool max_tokens_default = false;
  SamplingParams sampling;            // seed filled by the caller when !seed_given
  bool seed_given = false;
  std::vector<std::string> stop;      // up to 4 non-empty strings (16 on /v1/messages)
  // logit_bias entries keyed by text (llama-server: every token of the text gets the bias)
  std::vector<std::pair<std::string, float>> text_bias;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  int32_t logprobs = -1;              // -1 none; else top alternatives per token (0..20)
  bool ignore_eos = false;            // llama-server extension
  // /v1/completions with a text prompt: whether control-token texts in it ("<|im_end|>")
  // become control tokens (true, llama-server's behaviour) or stay text (false). Chat
  // messages are always text (only the template makes control tokens).
  bool parse_special = true;
  bool speculative = true;            // specula extension: false opts this request out of speculation
  int32_t n = 1;                      // choices (1..16); choice i samples with seed + i
  bool echo = false;                  // completions: the answer starts with the prompt (with logprobs: its logprobs too)
  // Structured output (response_format json_object / json_schema, grammar, json_schema,
  // regex, choice, or vLLM's guided_* names), and the request field it came from.
  std::optional<ConstraintSpec> constraint;
  std::string constraint_field;
  // chat: tool_choice "required" ("*") or a named function: the answer must be a call.
  std::string forced_tool;
  // chat: more variables for the template (chat_template_kwargs, e.g. enable_thinking),
  // whether the prompt ends with the generation prompt (add_generation_prompt), and
  // continue_final_message: the prompt ends inside the last (assistant) message, which the
  // answer continues.
  nlohmann::ordered_json template_kwargs;  // an object, or null
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  // Reasoning models (chat/reasoning.h), chat routes: whether the answer's thinking is split
  // out (reasoning_content, thinking blocks, reasoning items) — "auto" (when the template
  // has it), "deepseek" (the same), or "none" (all of it is content, tags included, as the model wrote it) — and
  // the thinking budget in tokens (grammar/thinking_budget.h; absent: the server's
  // --reasoning-budget), with the field it came from.
  std::string reasoning_format;  // "" : the server's --reasoning-format
  std::optional<int64_t> thinking_budget;
  std::string thinking_budget_field;
  // llama-server's native answer (/completion, /completions, /infill): the generated
  // token ids in "tokens" (return_tokens), and only these fields of the answer
  // (response_fields: "a/b" paths into the object).
  bool return_tokens = false;
  std::vector<std::string> response_fields;
  // llama-server's "verbose": the OpenAI answers also carry the native object ("__verbose":
  // the prompt as text, generation settings, timings); also on for every request with
  // ServerOptions::verbose.
  bool verbose = false;
  // llama-server's prompt progress (streams): return_progress sends a prompt_progress event
  // at admission and after every prefill chunk; timings_per_token adds "timings" to them.
  bool return_progress = false;
  bool timings_per_token = false;
  // llama-server's post_sampling_probs: the logprobs (n_probs, logprobs) are those of the
  // distribution the sampler drew from (EngineRequest::post_sampling_probs); native answers
  // then name them "prob" / "top_probs" (probabilities, not logs).
  bool post_sampling_probs = false;
};

// One generated token's logprob entry as the APIs report it.
struct TokenLogprob {
  std::string token;  // the token's bytes (may be a partial UTF-8 sequence)
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;  // alternatives (bytes, logprob)
  int32_t id = -1;               // the token's id (llama-server's completion_probabilities)
  std::vector<int32_t> top_ids;  // the alternatives' ids, as `top`
};

}  // namespace specula::server
