// server/engine_request.cpp — see engine_request.h.
#include "server/engine_request.h"

#include <algorithm>
#include <ctime>
#include <limits>

#include "chat/prompt.h"
#include "grammar/thinking_budget.h"

namespace specula::server {

using json = nlohmann::ordered_json;

namespace {
// Today's date as llama.cpp gives templates their date_string ("02 Dec 2026") and
// datetime ("Dec 02 2026 14:05:09 GMT"), UTC.
std::string today_string(const char* format = "%d %b %Y") {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}
}  // namespace

std::variant<json, ApiError> chat_context(const ServedModel& served, const CompletionParams& c, bool render_only) {
  const tokenizer::Vocab& vocab = served.tokenizer().vocab();
  const std::string bos = vocab.valid_id(vocab.bos_id()) ? vocab.text(vocab.bos_id()) : "";
  const std::string eos = vocab.valid_id(vocab.eos_id()) ? vocab.text(vocab.eos_id()) : "";
  const json messages = served.chat_template() ? chat::template_messages(*served.chat_template(), c.messages) : c.messages;
  json ctx = {{"messages", messages},
              {"add_generation_prompt", c.add_generation_prompt},
              {"bos_token", bos},
              {"eos_token", eos},
              {"date_string", today_string()},  // Llama 3.x templates print it
              {"datetime", today_string("%b %d %Y %H:%M:%S GMT")}};  // firefunction-v2's, as llama-server
  const std::string& reasoning = served.options().reasoning;
  // Qwen3's and others' switch; true unless --reasoning off (llama-server's default too:
  // templates that test `not enable_thinking` close the thinking block when it is undefined).
  ctx["enable_thinking"] = reasoning != "off";
  if (c.template_kwargs.is_object())
    for (auto it = c.template_kwargs.begin(); it != c.template_kwargs.end(); ++it) ctx[it.key()] = it.value();
  if (!c.tools.is_null()) {
    // Generation needs to read the model's calls back; a rendering only shows the prompt.
    if (served.tool_format() == chat::ToolFormat::kNone && !render_only)
      return bad_request("tools",
                         "this model's chat template has no tool-call format specula can read (supported: Hermes "
                         "<tool_call> as Qwen2.5 writes, Llama 3.x JSON, Mistral [TOOL_CALLS])");
    if (c.logprobs >= 0) return bad_request("logprobs", "logprobs together with tools are not supported yet");
    ctx["tools"] = c.tools;
  }
  // Fireworks' firefunction-v2 template (its calls start with " functools[") prints the
  // tools from a variable of its own: their JSON, indented by 2 ("" without tools), as
  // llama-server supplies it.
  if (served.chat_template() != nullptr && served.chat_template()->source().find(" functools[") != std::string::npos &&
      !ctx.contains("functions"))
    ctx["functions"] = c.tools.is_array() && !c.tools.empty() ? c.tools.dump(2) : std::string();
  return ctx;
}

namespace {
// With thinking off, a generation prompt that opens a thinking block gets it closed (as
// llama-server does): "<think>\n" -> "<think>\n</think>" (DeepSeek-R1, QwQ), and Command-R7B's
// chatbot turn gets "<|START_THINKING|><|END_THINKING|>". Templates with a switch of their
// own (Qwen3's enable_thinking) print their empty block themselves.
void close_thinking(const ServedModel& served, std::string* text) {
  auto ends_with = [&](const std::string& s) {
    return text->size() >= s.size() && text->compare(text->size() - s.size(), s.size(), s) == 0;
  };
  if (ends_with("<think>\n") || ends_with("<think>")) {
    *text += "</think>";
  } else if (ends_with("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>") && served.chat_template() != nullptr &&
             served.chat_template()->source().find("<|START_THINKING|>") != std::string::npos) {
    *text += "<|START_THINKING|><|END_THINKING|>";
  }
}

Result<chat::RenderedPrompt> render(const ServedModel& served, const CompletionParams& c, std::optional<ApiError>* error,
                                    bool render_only = false) {
  auto ctx = chat_context(served, c, render_only);
  if (auto* e = std::get_if<ApiError>(&ctx)) {
    *error = *e;
    return Status::invalid_argument(e->message);
  }
  // Thinking is off when the template's enable_thinking (chat_context: --reasoning, then
  // the request's chat_template_kwargs) is false.
  const json& vars = std::get<json>(ctx);
  const auto thinking = vars.find("enable_thinking");
  const bool thinking_off = thinking != vars.end() && thinking->is_boolean() ? !thinking->get<bool>()
                                                                             : served.options().reasoning == "off";
  auto rendered = served.chat_template()->render_marked(vars);
  if (!rendered) {
    *error = bad_request("messages", "the chat template failed on these messages: " + rendered.status().user_message());
    return rendered;
  }
  if (c.continue_final_message) {
    // The prompt ends where the last message's text ends (the template's closing of that
    // turn is cut), so the answer continues it.
    const std::string last = c.messages.back().value("content", "");
    const size_t at = last.empty() ? std::string::npos : rendered->text.rfind(last);
    if (at == std::string::npos && !last.empty()) {
      // The template changed the text (e.g. `| trim`): as llama-server, the conversation
      // without the last message, a generation prompt, then the message's text as sent.
      CompletionParams head = c;
      head.messages.erase(head.messages.size() - 1);
      head.continue_final_message = false;
      head.add_generation_prompt = true;
      auto prefix = render(served, head, error, render_only);
      if (!prefix) return prefix;
      const size_t start = prefix->text.size();
      prefix->text += last;
      prefix->untrusted.push_back({start, prefix->text.size()});
      return prefix;
    }
    if (at == std::string::npos) {
      *error = bad_request("continue_final_message", "the chat template did not print the last message's text");
      return Status::invalid_argument("continue_final_message");
    }
    const size_t end = at + last.size();
    rendered->text.resize(end);
    auto& spans = rendered->untrusted;
    for (auto& sp : spans) sp.second = std::min(sp.second, end);
    spans.erase(std::remove_if(spans.begin(), spans.end(), [](const auto& sp) { return sp.first >= sp.second; }),
                spans.end());
  }
  if (c.add_generation_prompt && thinking_off) close_thinking(served, &rendered->text);
  return rendered;
}
}  // namespace

std::variant<std::string, ApiError> render_chat_prompt(const ServedModel& served, const CompletionParams& c) {
  if (served.chat_template() == nullptr) return bad_request("messages", "this model has no chat template");
  std::optional<ApiError> error;
  auto rendered = render(served, c, &error, /*render_only=*/true);
  if (error) return *error;
  return rendered->text;
}

std::optional<ApiError> build_prompt(const ServedModel& served, const CompletionParams& c, std::vector<int32_t>* ids,
                                     size_t index, ThinkingStart* thinking) {
  const tokenizer::Tokenizer& tok = served.tokenizer();
  const tokenizer::Vocab& vocab = tok.vocab();
  if (c.endpoint == Endpoint::kCompletions) {
    const CompletionParams::Prompt& prompt = c.prompts.at(index);
    if (prompt.mixed.is_array()) {
      bool first = true;
      for (const json& piece : prompt.mixed) {
        if (piece.is_string()) {
          const std::string text = piece.get<std::string>();
          const std::vector<int32_t> part = first ? tok.encode_prompt(text, c.parse_special)
                                                  : tok.encode(text, false, c.parse_special);
          ids->insert(ids->end(), part.begin(), part.end());
        } else {
          ids->push_back(static_cast<int32_t>(piece.get<int64_t>()));
        }
        first = false;
      }
      for (int32_t id : *ids)
        if (!vocab.valid_id(id))
          return bad_request("prompt", "token id " + std::to_string(id) + " in 'prompt' is outside the vocabulary [0, " +
                                           std::to_string(vocab.size()) + ")");
    } else if (prompt.is_ids) {
      *ids = prompt.ids;
      for (int32_t id : *ids)
        if (!vocab.valid_id(id))
          return bad_request("prompt", "token id " + std::to_string(id) + " in 'prompt' is outside the vocabulary [0, " +
                                           std::to_string(vocab.size()) + ")");
    } else {
      *ids = tok.encode_prompt(prompt.text, c.parse_special);
    }
  } else {
    if (served.chat_template() == nullptr)
      return api_error(StatusCode::kInvalidArgument,
                       "this model has no chat template (its GGUF metadata holds none); start the server with "
                       "--chat-template-file FILE, or use /v1/completions",
                       "messages", "no_chat_template");
    std::optional<ApiError> error;
    auto rendered = render(served, c, &error);
    if (error) return error;
    if (thinking != nullptr) {
      // Only the template's own text after the last client text can open or close the block.
      const size_t trusted = rendered->untrusted.empty() ? 0 : rendered->untrusted.back().second;
      *thinking = chat::prompt_opens_thinking(rendered->text, trusted)    ? ThinkingStart::kOpen
                  : chat::prompt_closes_thinking(rendered->text, trusted) ? ThinkingStart::kClosed
                                                                          : ThinkingStart::kMaybe;
    }
    // Only the template's own text may yield control tokens; BOS as the template has it.
    *ids = chat::prompt_ids(tok, *rendered);
  }
  if (ids->empty())
    return bad_request(c.endpoint == Endpoint::kChat ? "messages" : "prompt",
                       "the prompt is empty (it tokenizes to no tokens)");
  return std::nullopt;
}

std::optional<ApiError> compile_constraint(ServedModel& served, const CompletionParams& c,
                                           std::shared_ptr<TokenConstraint>* out) {
  ConstraintSpec spec;
  std::string field = c.constraint_field;
  if (c.constraint) {
    spec = *c.constraint;
  } else if (!c.forced_tool.empty()) {
    field = "tool_choice";
    std::string marker = "\"[TOOL_CALLS]\"";
    const tokenizer::Vocab& vocab = served.tokenizer().vocab();
    if (const int32_t id = vocab.find("[TOOL_CALLS]"); id >= 0 && vocab.is_control(id))
      marker = "<[" + std::to_string(id) + "]>";  // llguidance's Lark names a special token by id
    auto lark = chat::forced_tool_grammar(served.tool_format(), c.tools, c.forced_tool, c.parallel_tool_calls, marker);
    if (!lark) return bad_request(field, "'tool_choice': " + lark.status().user_message());
    spec.kind = ConstraintKind::kLark;
    spec.text = std::move(lark).value();
  } else {
    return std::nullopt;
  }
  auto vocab = served.grammar_vocab();
  if (!vocab) return api_error(StatusCode::kInternal, vocab.status().user_message(), field);
  auto m = TokenConstraint::create(std::move(vocab).value(), spec);
  if (!m) return bad_request(field, "'" + field + "': " + m.status().user_message());
  *out = std::move(m).value();
  return std::nullopt;
}

ReasoningPlan reasoning_plan(const ServedModel& served, const CompletionParams& c, ThinkingStart start) {
  ReasoningPlan plan;
  if (c.endpoint != Endpoint::kChat || served.reasoning_format() == chat::ReasoningFormat::kNone ||
      start == ThinkingStart::kClosed)
    return plan;
  const std::string& fmt = c.reasoning_format.empty() ? served.options().reasoning_format : c.reasoning_format;
  if (fmt != "none") plan.format = served.reasoning_format();
  plan.budget = c.thinking_budget ? *c.thinking_budget : served.options().reasoning_budget;
  // A ThinkingBudget runs in the engine for a budget, or to keep a grammar off the thinking;
  // otherwise the generation driver counts the thinking from the token ids (no constraint:
  // generation checkpoints and mask-free rounds stay as for any request).
  plan.constrain = plan.budget >= 0 ||
                   (plan.format != chat::ReasoningFormat::kNone && (c.constraint || !c.forced_tool.empty()));
  return plan;
}

std::optional<ApiError> wrap_thinking(const ServedModel& served, const ReasoningPlan& plan, bool opens_thinking,
                                      std::shared_ptr<TokenConstraint>* grammar) {
  if (!plan.constrain) return std::nullopt;
  auto t = ThinkingBudget::create(served.tokenizer(), static_cast<int32_t>(served.model().info().n_vocab), plan.budget,
                                  opens_thinking, *grammar, served.options().engine.eog_ids);
  if (!t) return api_error(StatusCode::kInternal, t.status().user_message());
  *grammar = std::move(t).value();
  return std::nullopt;
}

std::optional<ApiError> check_request(const ServedModel& served, const CompletionParams& c, StatusCode unknown_model) {
  // A server of one model answers whatever name the request gives (as llama-server: many
  // clients hard-code one) and reports its own id in the answer; but once adapters are
  // served by name (vLLM's --lora NAME=PATH), a name that is neither the model's nor an
  // adapter's is a mistake to report, not the base model to run.
  if (!c.model.empty() && served.lora().has_named()) {
    if (!served.is_own_name(c.model) && !served.lora().by_name(c.model))
      return api_error(unknown_model,
                       "The model '" + c.model + "' does not exist: this server serves '" + served.id() +
                           "' and its LoRA adapters " + served.lora().describe(),
                       "model", "model_not_found");
  }
  const EngineOptions& eo = served.options().engine;
  const size_t most = static_cast<size_t>(eo.n_rows) + static_cast<size_t>(std::max(eo.max_queue, 0));
  if (c.prompts.size() > most)
    return bad_request("prompt", "'prompt' holds " + std::to_string(c.prompts.size()) + " prompts; this server runs " +
                                     std::to_string(eo.n_rows) + " at once and queues " + std::to_string(eo.max_queue) +
                                     " (--parallel, --queue): send at most " + std::to_string(most) + " per request");
  return std::nullopt;
}

std::variant<PreparedRequest, ApiError> prepare_request(ServedModel& served, const CompletionParams& c, size_t index,
                                                        uint64_t seed) {
  PreparedRequest out;
  EngineRequest& er = out.request;
  std::vector<int32_t> ids;
  if (auto e = build_prompt(served, c, &ids, index, &out.thinking)) return *e;
  // echo: the answer starts with the prompt (as sent; token ids as their text), and with
  // logprobs the prompt's tokens lead the entries (the first has no logprob: null).
  const tokenizer::Tokenizer& tok = served.tokenizer();
  if (c.echo) {
    const CompletionParams::Prompt& prompt = c.prompts.at(index);
    if (prompt.is_ids || prompt.mixed.is_array()) {
      auto t = tok.decode(ids, /*remove_special=*/true, /*render_special=*/false);
      if (t) out.echo_text = std::move(t).value();
    } else {
      out.echo_text = prompt.text;
    }
    if (c.logprobs >= 0) {
      er.prompt_logprobs = c.logprobs;
      TokenLogprob first;
      first.token = tok.token_to_piece(ids[0], false);
      first.logprob = std::numeric_limits<float>::quiet_NaN();  // JSON null
      out.echo_logprobs.push_back(std::move(first));
    }
  }
  er.prompt = std::move(ids);
  out.n_prompt = static_cast<int64_t>(er.prompt.size());
  auto lora = served.lora().resolve(c.model, served.is_own_name(c.model), c.lora);
  if (!lora) {
    if (lora.status().code() == StatusCode::kNotFound) {
      ApiError e = from_status(lora.status(), "model");
      e.api_code = "model_not_found";
      e.code = StatusCode::kInvalidArgument;  // as check_request's unknown model on OpenAI's routes
      return e;
    }
    return from_status(lora.status(), "lora");
  }
  er.lora = std::move(lora).value();
  const int64_t n_ctx = served.options().engine.n_ctx;
  if (c.max_tokens) {
    er.max_tokens = *c.max_tokens;
    // (the engine checks it too; here the error names the field the client sent, or the
    // server's default)
    if (out.n_prompt + er.max_tokens > n_ctx) {
      const std::string field =
          c.max_tokens_default ? c.max_tokens_field + " (the server's --n-predict default)" : c.max_tokens_field;
      ApiError e = api_error(StatusCode::kContextOverflow,
                             "the prompt (" + std::to_string(out.n_prompt) + " tokens) + " + field + " (" +
                                 std::to_string(er.max_tokens) + ") = " + std::to_string(out.n_prompt + er.max_tokens) +
                                 " exceeds the context of " + std::to_string(n_ctx) + " tokens",
                             c.max_tokens_field);
      e.details = {{"n_prompt_tokens", out.n_prompt}, {"n_ctx", n_ctx}};
      return e;
    }
  } else {
    const int64_t room = n_ctx - out.n_prompt;
    if (room <= 0) {
      ApiError e = api_error(StatusCode::kContextOverflow,
                             "the prompt has " + std::to_string(out.n_prompt) + " tokens; the context holds " +
                                 std::to_string(n_ctx),
                             c.endpoint == Endpoint::kChat ? "messages" : "prompt");
      e.details = {{"n_prompt_tokens", out.n_prompt}, {"n_ctx", n_ctx}};
      return e;
    }
    er.max_tokens = static_cast<int32_t>(room);
  }
  er.sampling = c.sampling;
  for (const auto& [text, bias] : c.text_bias)  // llama-server: every token of the text
    for (int32_t id : tok.encode(text, false, false)) er.sampling.logit_bias.push_back({id, bias});
  if (er.sampling.dry_multiplier > 0.0f) er.sampling.dry_breaker_ids = served.dry_breaker_ids(er.sampling.dry_sequence_breakers);
  er.sampling.seed = seed;
  er.top_logprobs = c.logprobs;
  er.post_sampling_probs = c.post_sampling_probs;
  er.ignore_eos = c.ignore_eos;
  er.speculative = c.speculative;
  if (served.options().engine.generation_checkpoint > 0) {
    // What shapes the text besides the engine request: the route and the stop strings.
    er.resume_key = c.endpoint == Endpoint::kChat ? "chat" : "completion";
    for (const std::string& st : c.stop) er.resume_key += "\x1f" + st;
  }
  return out;
}

}  // namespace specula::server
