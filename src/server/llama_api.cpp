// server/llama_api.cpp — see llama_api.h.
#include "server/llama_api.h"

#include <algorithm>
#include <cmath>

#include "server/engine_request.h"
#include "server/generation.h"
#include "server/json_util.h"
#include "server/routes.h"

namespace specula::server {

using json = nlohmann::ordered_json;

namespace {

json bytes_json(const std::string& s) {
  json b = json::array();
  for (unsigned char ch : s) b.push_back(static_cast<int>(ch));
  return b;
}

// A token's text as llama-server sends it: cut at the first incomplete UTF-8 sequence.
std::string valid_prefix(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) break;
    bool ok = true;
    for (size_t k = 1; k < n; ++k) ok = ok && (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (!ok) break;
    i += n;
  }
  return s.substr(0, i);
}

std::string stop_type(const CompletionStream::Update& u) {
  switch (u.summary.outcome) {
    case Outcome::kStop:
      return u.stop_sequence.empty() ? "eos" : "word";
    case Outcome::kLength:
      return "limit";
    default:
      return "none";
  }
}

}  // namespace

json timings_json(const RequestSummary& s) {
  const int64_t prompt_n = std::max<int64_t>(0, s.n_prompt - s.cached_tokens);
  const double prompt_ms = s.prefill_seconds * 1e3;
  const int64_t predicted_n = s.n_generated;
  const double predicted_ms = s.decode_seconds * 1e3;
  // The first token comes with the prefill; the decode time covers the rest.
  const int64_t n_dec = std::max<int64_t>(0, predicted_n - 1);
  return json{{"cache_n", s.cached_tokens},
              {"prompt_n", prompt_n},
              {"prompt_ms", prompt_ms},
              {"prompt_per_token_ms", prompt_n > 0 ? prompt_ms / static_cast<double>(prompt_n) : 0.0},
              {"prompt_per_second", prompt_ms > 0 ? 1e3 * static_cast<double>(prompt_n) / prompt_ms : 0.0},
              {"predicted_n", predicted_n},
              {"predicted_ms", predicted_ms},
              {"predicted_per_token_ms", n_dec > 0 ? predicted_ms / static_cast<double>(n_dec) : 0.0},
              {"predicted_per_second", predicted_ms > 0 ? 1e3 * static_cast<double>(n_dec) / predicted_ms : 0.0}};
}

json progress_timings_json(const CompletionStream::Update::Progress& p) {
  const int64_t prompt_n = std::max<int64_t>(0, p.processed - p.cache);
  return json{{"cache_n", p.cache},
              {"prompt_n", prompt_n},
              {"prompt_ms", prompt_n > 0 ? p.time_ms : 0.0},
              {"prompt_per_token_ms", prompt_n > 0 ? p.time_ms / static_cast<double>(prompt_n) : 0.0},
              {"prompt_per_second", prompt_n > 0 && p.time_ms > 0 ? 1e3 * static_cast<double>(prompt_n) / p.time_ms : 0.0},
              {"predicted_n", 0},
              {"predicted_ms", 0.0},
              {"predicted_per_token_ms", 0.0},
              {"predicted_per_second", 0.0}};
}

json progress_json(const CompletionStream::Update::Progress& p) {
  return json{{"total", p.total}, {"cache", p.cache}, {"processed", p.processed}, {"time_ms", p.time_ms}};
}

namespace {

// llama-server's response_fields: only the named fields, each under its "a/b" path.
json select_fields(const std::vector<std::string>& paths, const json& obj) {
  json out = json::object();
  for (const std::string& path : paths) {
    const json* at = &obj;
    size_t pos = 0;
    bool found = true;
    while (found && pos <= path.size()) {
      size_t end = path.find('/', pos);
      if (end == std::string::npos) end = path.size();
      const std::string key = path.substr(pos, end - pos);
      found = at->is_object() && at->contains(key);
      if (found) at = &(*at)[key];
      pos = end + 1;
    }
    if (found) out[path] = *at;
  }
  return out;
}

}  // namespace

json completion_probabilities(const std::vector<TokenLogprob>& lps, bool post_sampling) {
  // post_sampling: the sampler's probabilities as "prob" / "top_probs" (llama-server's
  // names), else logprobs of the raw logits.
  const char* value_key = post_sampling ? "prob" : "logprob";
  auto value = [&](float lp) { return post_sampling ? static_cast<double>(std::exp(lp)) : static_cast<double>(lp); };
  json out = json::array();
  for (const TokenLogprob& t : lps) {
    json top = json::array();
    for (size_t k = 0; k < t.top.size(); ++k)
      top.push_back(json{{"id", k < t.top_ids.size() ? t.top_ids[k] : -1},
                         {"token", valid_prefix(t.top[k].first)},
                         {"bytes", bytes_json(t.top[k].first)},
                         {value_key, value(t.top[k].second)}});
    out.push_back(json{{"id", t.id},
                       {"token", valid_prefix(t.token)},
                       {"bytes", bytes_json(t.token)},
                       {value_key, value(t.logprob)},
                       {post_sampling ? "top_probs" : "top_logprobs", top}});
  }
  return out;
}

json generation_settings(const CompletionParams& c, uint64_t seed) {
  const SamplingParams& s = c.sampling;
  json bias = json::array();
  for (const auto& [id, b] : s.logit_bias) bias.push_back(json{{"bias", b}, {"token", id}});
  const int32_t n_predict = c.max_tokens ? *c.max_tokens : -1;
  return json{{"seed", seed},
              {"temperature", s.temperature},
              {"dynatemp_range", 0.0},
              {"dynatemp_exponent", 1.0},
              {"top_k", s.top_k},
              {"top_p", s.top_p},
              {"min_p", s.min_p},
              {"top_n_sigma", s.top_n_sigma},
              {"xtc_probability", s.xtc_probability},
              {"xtc_threshold", s.xtc_threshold},
              {"typical_p", 1.0},
              {"repeat_last_n", s.repeat_last_n},
              {"repeat_penalty", s.repeat_penalty},
              {"presence_penalty", s.presence_penalty},
              {"frequency_penalty", s.frequency_penalty},
              {"dry_multiplier", s.dry_multiplier},
              {"dry_base", s.dry_base},
              {"dry_allowed_length", s.dry_allowed_length},
              {"dry_penalty_last_n", s.dry_penalty_last_n},
              {"dry_sequence_breakers", s.dry_sequence_breakers},
              {"mirostat", 0},
              {"mirostat_tau", 5.0},
              {"mirostat_eta", 0.1},
              {"adaptive_target", -1.0},
              {"adaptive_decay", 0.9},
              {"stop", c.stop},
              {"max_tokens", n_predict},
              {"n_predict", n_predict},
              {"n_keep", 0},
              {"n_discard", 0},
              {"ignore_eos", c.ignore_eos},
              {"stream", c.stream},
              {"logit_bias", bias},
              {"n_probs", std::max(0, c.logprobs)},
              {"min_keep", 0},
              {"grammar", c.constraint ? c.constraint->text : ""},
              {"samplers", json::array({"penalties", "dry", "top_n_sigma", "top_k", "top_p", "min_p", "xtc",
                                        "temperature"})},
              {"speculative", c.speculative},
              {"timings_per_token", false},
              {"post_sampling_probs", c.post_sampling_probs},
              {"lora", [&] {
                 json l = json::array();
                 if (c.lora)
                   for (const auto& [id, scale] : *c.lora) l.push_back(json{{"id", id}, {"scale", scale}});
                 return l;
               }()}};
}

// ---------------------------------------------------------------- LlamaFormat

json native_object(const Generation& g, const std::string& text, const std::vector<int32_t>& ids,
                   const std::vector<TokenLogprob>* lps, const CompletionStream::Update& u, bool has_new_line) {
  const CompletionParams& c = *g.params;
  const RequestSummary& sm = u.summary;
  json tokens = json::array();
  if (c.return_tokens)
    for (int32_t id : ids) tokens.push_back(id);
  json o = {{"index", g.index},
            {"content", text},
            {"tokens", tokens},
            {"id_slot", -1},
            {"stop", true},
            {"model", g.model},
            {"tokens_predicted", sm.n_generated},
            {"tokens_evaluated", sm.n_prompt},
            {"generation_settings", generation_settings(c, g.seed)},
            {"prompt", g.prompt_text},
            {"has_new_line", has_new_line || text.find('\n') != std::string::npos},
            {"truncated", false},
            {"stop_type", stop_type(u)},
            {"stopping_word", u.stop_sequence},
            {"tokens_cached", sm.n_prompt + sm.n_generated},
            {"timings", timings_json(sm)}};
  if (lps != nullptr && c.logprobs > 0)
    o["completion_probabilities"] = completion_probabilities(*lps, c.post_sampling_probs);
  return o;
}

json LlamaFormat::whole(const std::string& text, const std::vector<TokenLogprob>& lps, const CompletionStream::Update& u) {
  json o = native_object(g_, text, u.token_ids, &lps, u, has_new_line_);
  return g_.params->response_fields.empty() ? o : select_fields(g_.params->response_fields, o);
}

json LlamaFormat::combine(std::vector<json> choices, const Usage& total) const {
  (void)total;
  if (choices.size() == 1) return std::move(choices.front());
  json arr = json::array();
  for (json& c : choices) arr.push_back(std::move(c));
  return arr;
}

std::string LlamaFormat::stream_piece(const CompletionStream::Update& u) {
  const CompletionParams& c = *g_.params;
  std::string out;
  if (c.return_progress)
    for (const CompletionStream::Update::Progress& p : u.progress) {
      json o = {{"index", g_.index}, {"content", ""},     {"tokens", json::array()},   {"stop", false},
                {"id_slot", -1},     {"tokens_predicted", 0}, {"tokens_evaluated", g_.n_prompt},
                {"prompt_progress", progress_json(p)}};
      if (c.timings_per_token) o["timings"] = progress_timings_json(p);
      out += sse(o);
    }
  pending_ids_.insert(pending_ids_.end(), u.token_ids.begin(), u.token_ids.end());
  if (u.text.empty() && u.logprobs.empty()) return out;
  n_streamed_ += static_cast<int64_t>(pending_ids_.size());
  has_new_line_ = has_new_line_ || u.text.find('\n') != std::string::npos;
  json tokens = json::array();
  if (c.return_tokens)
    for (int32_t id : pending_ids_) tokens.push_back(id);
  pending_ids_.clear();
  json o = {{"index", g_.index},
            {"content", u.text},
            {"tokens", tokens},
            {"stop", false},
            {"id_slot", -1},
            {"tokens_predicted", n_streamed_},
            {"tokens_evaluated", g_.n_prompt}};
  if (c.logprobs > 0 && !u.logprobs.empty())
    o["completion_probabilities"] = completion_probabilities(u.logprobs, c.post_sampling_probs);
  return out + sse(o);
}

std::string LlamaFormat::stream_end(const CompletionStream::Update& u) {
  if (u.summary.outcome == Outcome::kFailed || u.summary.outcome == Outcome::kCancelled)
    return sse(openai_error_body(generation_error(u, g_.params)));
  // The last event is the whole object with no more content (it all went out).
  json o = native_object(g_, "", pending_ids_, nullptr, u, has_new_line_);
  pending_ids_.clear();
  return sse(g_.params->response_fields.empty() ? o : select_fields(g_.params->response_fields, o));
}

// ---------------------------------------------------------------- /infill

FimTokens fim_tokens(const ServedModel& served) {
  const tokenizer::Vocab& vocab = served.tokenizer().vocab();
  const gguf::GgufFile& file = served.model().file();
  auto pick = [&](const char* key, std::initializer_list<const char*> texts) -> int32_t {
    if (const gguf::Value* v = file.find(key)) {
      const int64_t id = v->u != 0 ? static_cast<int64_t>(v->u) : v->i;
      if (vocab.valid_id(static_cast<int32_t>(id))) return static_cast<int32_t>(id);
    }
    for (const char* t : texts)
      if (const int32_t id = vocab.find(t); id >= 0) return id;
    return -1;
  };
  // The texts llama.cpp recognises (llama-vocab.cpp), per model family.
  FimTokens f;
  f.pre = pick("tokenizer.ggml.fim_pre_token_id",
               {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
                "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"});
  f.suf = pick("tokenizer.ggml.fim_suf_token_id",
               {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>",
                "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"});
  f.mid = pick("tokenizer.ggml.fim_mid_token_id",
               {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
                "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"});
  f.rep = pick("tokenizer.ggml.fim_rep_token_id", {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
  f.sep = pick("tokenizer.ggml.fim_sep_token_id", {"<|file_sep|>"});
  return f;
}

std::vector<int32_t> infill_prompt(const ServedModel& served, const FimTokens& fim, const InfillInput& in, int64_t n_ctx,
                                   int64_t n_predict) {
  const tokenizer::Tokenizer& tok = served.tokenizer();
  constexpr int64_t kBatch = 2048;  // llama-server's default batch, which sets its FIM window
  auto encode = [&](const std::string& s) { return tok.encode(s, /*add_special=*/false, /*parse_special=*/false); };
  std::vector<int32_t> extra;
  if (fim.rep >= 0) {
    extra.push_back(fim.rep);
    for (int32_t id : encode("myproject\n")) extra.push_back(id);
  }
  for (const auto& [filename, text] : in.extra) {
    if (fim.sep >= 0) {
      extra.push_back(fim.sep);
      for (int32_t id : encode(filename + "\n")) extra.push_back(id);
    } else {
      for (int32_t id : encode("\n\n--- snippet ---\n\n")) extra.push_back(id);
    }
    for (int32_t id : encode(text)) extra.push_back(id);
  }
  if (fim.sep >= 0) {
    extra.push_back(fim.sep);
    for (int32_t id : encode("filename\n")) extra.push_back(id);
  }
  std::vector<int32_t> prefix = encode(in.prefix), suffix = encode(in.suffix);
  const std::vector<int32_t> prompt = encode(in.prompt);
  const int64_t n_prefix = std::min<int64_t>(static_cast<int64_t>(prefix.size()), 3 * (kBatch / 4));
  const int64_t n_suffix = std::min<int64_t>(static_cast<int64_t>(suffix.size()),
                                             std::max<int64_t>(0, kBatch / 4 - (2 + static_cast<int64_t>(prompt.size()))));
  const int64_t n_extra = std::min<int64_t>(std::max<int64_t>(0, n_ctx - kBatch - 2 * n_predict),
                                            static_cast<int64_t>(extra.size()));
  prefix.erase(prefix.begin(), prefix.end() - n_prefix);
  suffix.resize(static_cast<size_t>(n_suffix));
  std::vector<int32_t> out(extra.end() - n_extra, extra.end());
  const tokenizer::Vocab& vocab = tok.vocab();
  if (vocab.add_bos() && vocab.valid_id(vocab.bos_id())) out.push_back(vocab.bos_id());
  out.push_back(fim.pre);
  out.insert(out.end(), prefix.begin(), prefix.end());
  out.insert(out.end(), prompt.begin(), prompt.end());
  out.push_back(fim.suf);
  out.insert(out.end(), suffix.begin(), suffix.end());
  out.push_back(fim.mid);
  return out;
}

void handle_native_completion(ServedModel& served, const http::Request& req, http::Exchange& ex, GenerationLog* log) {
  auto parsed = parse_native_completion_request(req.body, served.sampling_defaults());
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  LlamaFormat fmt;
  run_generation(served, std::get<CompletionParams>(parsed), ex, fmt, log);
}

void handle_infill(ServedModel& served, const http::Request& req, http::Exchange& ex, GenerationLog* log) {
  const FimTokens fim = fim_tokens(served);
  std::string missing;
  if (fim.pre < 0) missing += " prefix";
  if (fim.suf < 0) missing += " suffix";
  if (fim.mid < 0) missing += " middle";
  if (!missing.empty())
    return send_error(ex, api_error(StatusCode::kUnimplemented,
                                    "infill is not supported by this model: it has no fill-in-the-middle token for" +
                                        missing));
  auto parsed = parse_body_object(req.body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  json j = std::get<json>(parsed);
  InfillInput in;
  for (const char* key : {"input_prefix", "input_suffix"}) {
    if (!j.contains(key) || !j[key].is_string())
      return send_error(ex, bad_request(key, std::string("'") + key + "' is required (a string)"));
  }
  in.prefix = j["input_prefix"].get<std::string>();
  in.suffix = j["input_suffix"].get<std::string>();
  if (j.contains("prompt") && !j["prompt"].is_null()) {
    if (!j["prompt"].is_string()) return send_error(ex, bad_request("prompt", "'prompt' must be a string"));
    in.prompt = j["prompt"].get<std::string>();
  }
  if (j.contains("input_extra") && !j["input_extra"].is_null()) {
    const json& x = j["input_extra"];
    if (!x.is_array())
      return send_error(ex, bad_request("input_extra", "'input_extra' must be an array of {\"filename\", \"text\"}"));
    for (const json& chunk : x) {
      if (!chunk.is_object() || !chunk.contains("text") || !chunk["text"].is_string())
        return send_error(ex, bad_request("input_extra", "'input_extra' entries need a string 'text'"));
      if (chunk.contains("filename") && !chunk["filename"].is_string())
        return send_error(ex, bad_request("input_extra", "'input_extra' entries' 'filename' must be a string"));
      for (auto it = chunk.begin(); it != chunk.end(); ++it)
        if (it.key() != "text" && it.key() != "filename")
          return send_error(ex, bad_request("input_extra", "unknown field '" + it.key() + "' in an 'input_extra' entry"));
      in.extra.push_back({chunk.value("filename", std::string("tmp")), chunk["text"].get<std::string>()});
    }
  }
  for (const char* key : {"input_prefix", "input_suffix", "input_extra", "prompt"}) j.erase(key);
  int64_t n_predict = served.options().default_n_predict.value_or(-1);
  for (const char* key : {"n_predict", "max_tokens"})
    if (j.contains(key) && j[key].is_number_integer()) n_predict = j[key].get<int64_t>();
  const std::vector<int32_t> ids =
      infill_prompt(served, fim, in, served.options().engine.n_ctx,
                    std::clamp<int64_t>(n_predict, 0, served.options().engine.n_ctx));  // (no overflow below)
  j["prompt"] = ids;
  auto params = parse_native_completion_request(dump_json(j), served.sampling_defaults());
  if (auto* e = std::get_if<ApiError>(&params)) return send_error(ex, *e);
  LlamaFormat fmt;
  run_generation(served, std::get<CompletionParams>(params), ex, fmt, log);
}

void handle_chat_input_tokens(const ServedModel& served, const http::Request& req, http::Exchange& ex) {
  auto parsed = parse_completion_request(req.body, Endpoint::kChat, served.sampling_defaults());
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  std::vector<int32_t> ids;
  if (auto e = build_prompt(served, std::get<CompletionParams>(parsed), &ids, 0)) return send_error(ex, *e);
  send_json(ex, json{{"input_tokens", ids.size()}});
}

// ---------------------------------------------------------------- /props, /slots

namespace {
// llama-server's chat_template_caps, found by rendering probes through the template:
// whether it shows a system message and a tools list; supports_tool_calls says whether
// specula reads the template's calls back (a tool-call format, chat/tool_calls.h).
json template_caps(const ServedModel& served) {
  auto shows = [&](const json& messages, const json& tools, const std::string& needle) {
    if (served.chat_template() == nullptr) return false;
    CompletionParams c;
    c.messages = messages;
    c.tools = tools;
    auto r = render_chat_prompt(served, c);
    const std::string* text = std::get_if<std::string>(&r);
    return text != nullptr && text->find(needle) != std::string::npos;
  };
  const json user = json::array({{{"role", "user"}, {"content", "hello"}}});
  const json tool = json::array(
      {{{"type", "function"},
        {"function", {{"name", "specula_probe_tool"}, {"description", "probe"}, {"parameters", {{"type", "object"}}}}}}});
  const bool tool_calls = served.tool_format() != chat::ToolFormat::kNone;
  return {{"supports_string_content", true},
          {"supports_typed_content", false},
          {"supports_tools", shows(user, tool, "specula_probe_tool")},
          {"supports_tool_calls", tool_calls},
          {"supports_parallel_tool_calls", tool_calls},
          {"supports_system_role",
           shows(json::array({{{"role", "system"}, {"content", "specula_probe_system"}}, user[0]}), json(),
                 "specula_probe_system")},
          {"supports_preserve_reasoning", false},
          {"supports_reasoning_effort", false},
          {"supports_object_arguments", false}};
}
}  // namespace

void handle_props(const ServedModel& served, http::Exchange& ex) {
  const ServerOptions& so = served.options();
  const EngineOptions& eo = so.engine;
  CompletionParams defaults;
  defaults.sampling = api_default_sampling(SamplingApi::kOpenAi);
  served.sampling_defaults().apply(defaults.sampling);
  if (so.default_n_predict) defaults.max_tokens = *so.default_n_predict;
  const tokenizer::Vocab& vocab = served.tokenizer().vocab();
  json props = {
      {"default_generation_settings",
       {{"params", generation_settings(defaults, so.default_seed.value_or(0xFFFFFFFFu))}, {"n_ctx", eo.n_ctx}}},
      {"total_slots", eo.n_rows},
      {"model_alias", served.id()},
      {"model_path", so.model_path},
      {"modalities", {{"vision", false}, {"video", false}, {"audio", false}}},
      {"endpoint_slots", so.slots},
      {"endpoint_props", false},
      {"endpoint_metrics", true},
      {"ui", so.webui},
      {"webui", so.webui},
      {"chat_template", served.chat_template() ? served.chat_template()->source() : ""},
      {"chat_template_caps", template_caps(served)},
      {"bos_token", vocab.valid_id(vocab.bos_id()) ? vocab.text(vocab.bos_id()) : ""},
      {"eos_token", vocab.valid_id(vocab.eos_id()) ? vocab.text(vocab.eos_id()) : ""},
      {"build_info", "specula"},
      {"is_sleeping", false},
  };
  send_json(ex, props);
}

void handle_slots(const ServedModel& served, http::Exchange& ex) {
  if (!served.options().slots)
    return handle_not_supported(ex, "the slots endpoint is off (start the server without --no-slots)");
  const EngineOptions& eo = served.options().engine;
  const EngineStats st = served.engine().stats();
  // Rows are not named per request: the first running_rows entries are the busy ones.
  json slots = json::array();
  for (int32_t i = 0; i < eo.n_rows; ++i)
    slots.push_back(json{{"id", i},
                         {"n_ctx", eo.n_ctx},
                         {"speculative", eo.draft != nullptr},
                         {"is_processing", i < st.running_rows}});
  send_json(ex, slots);
}

void handle_not_supported(http::Exchange& ex, const std::string& what) {
  ApiError e = api_error(StatusCode::kUnimplemented, what, "", "not_supported_error");
  e.http_override = 501;
  send_error(ex, e);
}

}  // namespace specula::server
