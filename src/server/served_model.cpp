// server/served_model.cpp — see served_model.h.
#include "server/served_model.h"

#include <algorithm>
#include <ctime>

#include "chat/prompt.h"
#include "tokenizer/hf_tokenizer.h"
#include "sampling/sampler.h"

namespace specula::server {

Result<std::unique_ptr<ServedModel>> ServedModel::create(std::unique_ptr<Model> model, ServerOptions options) {
  if (model == nullptr) return Status::invalid_argument("[server] no model");
  std::unique_ptr<ServedModel> s(new ServedModel());
  auto tok = tokenizer::load_tokenizer(model->file());
  if (!tok) return tok.status();
  s->tok_ = std::move(tok).value();
  if (options.chat_template) {
    auto t = chat::ChatTemplate::parse(*options.chat_template);
    if (!t) return Status::error(t.status().code(), "[server] --chat-template-file: " + t.message());
    s->chat_template_ = std::move(t).value();
    s->chat_template_origin_ = "file";
    s->tool_format_ = chat::tool_format_of(*options.chat_template);
    s->reasoning_format_ = chat::reasoning_format_of(*options.chat_template);
  } else if (auto src = chat::chat_template_from_gguf(model->file())) {
    auto t = chat::ChatTemplate::parse(*src);
    if (!t) return Status::error(t.status().code(), "[server] the model's chat template: " + t.message());
    s->chat_template_ = std::move(t).value();
    s->chat_template_origin_ = "model metadata";
    s->tool_format_ = chat::tool_format_of(*src);
    s->reasoning_format_ = chat::reasoning_format_of(*src);
  }
  if (!options.responses) options.responses = std::make_shared<ResponseStore>();
  if (options.model_id.empty()) options.model_id = model->info().name.empty() ? "model" : model->info().name;
  if (options.engine.eog_ids.empty()) options.engine.eog_ids = chat::end_of_generation_ids(s->tok_->vocab(), model->file());
  s->sampling_defaults_ = model_sampling_defaults(model->file());
  if (options.default_temperature) s->sampling_defaults_.temperature = *options.default_temperature;  // --temp
  auto engine = Engine::create(*model, options.engine);
  if (!engine) return engine.status();
  s->engine_ = std::move(engine).value();
  // Embedding pooling: --pooling, else the model's {arch}.pooling_type when it is mean (1)
  // or last (3), else mean.
  if (!options.pooling.empty()) {
    s->default_pooling_ = options.pooling;
  } else if (const gguf::Value* pt = model->file().find(model->info().architecture + ".pooling_type")) {
    const uint64_t v = pt->u != 0 ? pt->u : static_cast<uint64_t>(pt->i);
    if (v == 3) s->default_pooling_ = "last";
  }
  for (const LoraSpec& spec : options.lora) {
    const auto& aliases = options.model_aliases;  // (options_ is set below: is_own_name cannot answer yet)
    if (spec.named && (spec.name == options.model_id || std::find(aliases.begin(), aliases.end(), spec.name) != aliases.end()))
      return Status::invalid_argument("[server] --lora " + spec.name + "=" + spec.path + ": '" + spec.name +
                                      "' is the model's own name");
    auto adapter = model->load_lora(spec.path);
    if (!adapter) return Status::error(adapter.status().code(), "[server] --lora " + spec.path + ": " + adapter.message());
    auto added = s->lora_.add(spec.name, spec.path, std::move(adapter).value(), spec.scale, spec.named);
    if (!added) return Status::error(added.status().code(), "[server] --lora " + spec.path + ": " + added.message());
  }
  s->model_ = std::move(model);
  s->options_ = std::move(options);
  s->start_time_unix_ = static_cast<int64_t>(std::time(nullptr));
  return s;
}

bool ServedModel::is_own_name(const std::string& name) const {
  const auto& aliases = options_.model_aliases;
  return name == options_.model_id || std::find(aliases.begin(), aliases.end(), name) != aliases.end();
}

ServedModel::~ServedModel() {
  engine_.reset();  // finishes what still runs before the model goes
}

Result<std::shared_ptr<const GrammarVocab>> ServedModel::grammar_vocab() {
  std::lock_guard<std::mutex> lock(grammar_mu_);
  if (!grammar_vocab_) {
    auto v = GrammarVocab::create(*tok_, static_cast<int32_t>(model_->info().n_vocab), options_.engine.eog_ids);
    if (!v) return v.status();
    grammar_vocab_ = std::move(v).value();
  }
  return grammar_vocab_;
}

std::vector<std::vector<int32_t>> ServedModel::dry_breaker_ids(const std::vector<std::string>& breakers) {
  std::lock_guard<std::mutex> lock(dry_mu_);
  auto it = dry_breakers_.find(breakers);
  if (it == dry_breakers_.end()) {
    if (dry_breakers_.size() >= 64) dry_breakers_.clear();  // bounded: clients choose the lists
    it = dry_breakers_.emplace(breakers, dry_breaker_ids_from_strings(breakers, *tok_)).first;
  }
  return it->second;
}

uint64_t ServedModel::random_seed() {
  std::lock_guard<std::mutex> lock(seed_mu_);
  return seed_rng_() >> 1;
}

void ServedModel::add_finished(const RequestSummary& s) {
  std::lock_guard<std::mutex> lock(totals_mu_);
  totals_.prompt_tokens += static_cast<uint64_t>(std::max<int64_t>(0, s.n_prompt - s.cached_tokens));
  totals_.cached_tokens += static_cast<uint64_t>(s.cached_tokens);
  totals_.generated_tokens += static_cast<uint64_t>(s.n_generated);
  totals_.prefill_seconds += s.prefill_seconds;
  totals_.decode_seconds += s.decode_seconds;
  totals_.max_tokens_seen = std::max(totals_.max_tokens_seen, s.n_prompt + s.n_generated);
  ++totals_.finished;
}

ServedModel::GenerationTotals ServedModel::generation_totals() const {
  std::lock_guard<std::mutex> lock(totals_mu_);
  return totals_;
}

}  // namespace specula::server
