// server/answer_format.cpp — see answer_format.h.
#include "server/answer_format.h"

#include "server/json_util.h"

namespace specula::server {

void AnswerFormat::begin(Generation g, chat::ToolFormat tools) {
  g_ = std::move(g);
  std::vector<std::string> names;
  if (g_.params->tools.is_array())
    for (const auto& t : g_.params->tools) names.push_back(t["function"]["name"].get<std::string>());
  calls_ = chat::ToolCallStream(tools, std::move(names), g_.params->parallel_tool_calls);
  reasoning_ = chat::ReasoningStream(g_.reasoning, g_.in_thinking);
}

chat::SplitAnswer AnswerFormat::split_whole(const std::string& text) const {
  return g_.reasoning != chat::ReasoningFormat::kNone ? chat::split_reasoning(text, g_.in_thinking)
                                                      : chat::SplitAnswer{"", text, false};
}

int64_t AnswerFormat::reasoning_tokens() const {
  if (g_.reasoning == chat::ReasoningFormat::kNone) return -1;
  return g_.thinking ? g_.thinking->thinking_tokens() : 0;
}

ApiError generation_error(const CompletionStream::Update& u, const CompletionParams* c) {
  if (u.summary.outcome == Outcome::kFailed && u.summary.request_fault && c != nullptr) {
    const std::string field = c->constraint ? c->constraint_field : "tool_choice";
    return bad_request(field, "'" + field + "': the grammar could not continue: " + without_component_tags(u.summary.error));
  }
  if (u.summary.outcome == Outcome::kCancelled)
    return api_error(StatusCode::kCancelled, "generation cancelled: the server is shutting down");
  return api_error(StatusCode::kInternal, "generation failed: " + without_component_tags(u.summary.error));
}

Usage usage_of(const RequestSummary& s) {
  return Usage{s.n_prompt, s.n_generated, s.cached_tokens, s.spec_rounds, s.drafted, s.accepted};
}

std::string sse(const nlohmann::ordered_json& j) { return "data: " + dump_json(j) + "\n\n"; }

}  // namespace specula::server
