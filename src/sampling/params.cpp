// sampling/params.cpp — see params.h.
#include "sampling/params.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

namespace specula {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInt32Max = std::numeric_limits<int32_t>::max();

std::string fmt_float(float v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(v));
  return buf;
}

std::string fmt_number(double v) {
  if (v == kInt32Max) return "2^31-1";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

SamplingSpelling openai(const char* key) { return {SamplingApi::kOpenAi, key, kNaN, kNaN, kNaN}; }

std::vector<SamplingField> build_fields() {
  using P = SamplingParams;
  using K = SamplingKind;
  const SamplingSpelling anthropic_default_only = {SamplingApi::kAnthropic, nullptr, kNaN, kNaN, 0.0};
  std::vector<SamplingField> f = {
      {"temperature", K::kFloat, &P::temperature, 0, 2, false,
       {openai("temperature"), {SamplingApi::kAnthropic, "temperature", 0, 1, 1.0}}, "--temp", KeyRule::kAlways,
       nullptr, "Divides the logits after truncation; 0 = greedy (the most likely token)"},
      {"top_k", K::kInt, &P::top_k, -1, kInt32Max, false,
       {openai("top_k"), {SamplingApi::kAnthropic, "top_k", 0, kNaN, 0.0}}, "--top-k", KeyRule::kAlways, nullptr,
       "Keeps the k most likely tokens; <= 0 = off"},
      {"top_p", K::kFloat, &P::top_p, 0, 1, false,
       {openai("top_p"), {SamplingApi::kAnthropic, "top_p", kNaN, kNaN, 1.0}}, "--top-p", KeyRule::kAlways, nullptr,
       "Keeps the most likely tokens up to this cumulative probability; 1 = off, 0 = greedy"},
      {"top_n_sigma", K::kFloat, &P::top_n_sigma, -1, 100, false, {openai("top_n_sigma")}, "--top-n-sigma",
       KeyRule::kAlways, nullptr, "Keeps tokens whose logit is within n standard deviations of the largest; <= 0 = off"},
      {"min_p", K::kFloat, &P::min_p, 0, 1, false, {openai("min_p"), anthropic_default_only}, "--min-p",
       KeyRule::kAlways, nullptr, "Keeps tokens with probability >= min_p x the most likely one's; 0 = off"},
      {"repeat_penalty", K::kFloat, &P::repeat_penalty, 0, 10, true, {openai("repeat_penalty")}, "--repeat-penalty",
       KeyRule::kAlways, nullptr, "Divides positive logits (multiplies negative ones) of tokens in the last repeat_last_n, prompt included; 1 = off"},
      {"repeat_last_n", K::kInt, &P::repeat_last_n, -1, kInt32Max, false, {openai("repeat_last_n")},
       "--repeat-last-n", KeyRule::kAlways, nullptr, "Window of repeat_penalty in tokens; 0 = off, -1 = all"},
      {"presence_penalty", K::kFloat, &P::presence_penalty, -2, 2, false, {openai("presence_penalty")},
       "--presence-penalty", KeyRule::kAlways, nullptr, "Subtracted once from the logit of every token generated so far (OpenAI's)"},
      {"frequency_penalty", K::kFloat, &P::frequency_penalty, -2, 2, false, {openai("frequency_penalty")},
       "--frequency-penalty", KeyRule::kAlways, nullptr, "Subtracted from a generated token's logit per time it was generated (OpenAI's)"},
      {"logit_bias", K::kTokenBias, &P::logit_bias, -100, 100, false, {openai("logit_bias")}, "--logit-bias",
       KeyRule::kAlways, nullptr, "Added to token logits; -inf bans a token. Flag: ID+BIAS or ID-BIAS (ID-inf), repeatable; request: {\"id\": bias} or llama-server's [[id, bias]], false bans"},
      {"seed", K::kSeed, &P::seed, 0, 0, false, {openai("seed")}, "--seed", KeyRule::kWhenSampling, nullptr,
       "Seeds the request's random stream; without it a random seed (the HTTP answers report the seed used)"},
      {"xtc_probability", K::kFloat, &P::xtc_probability, 0, 1, false, {openai("xtc_probability")},
       "--xtc-probability", KeyRule::kWhenGate, "xtc_probability", "XTC: chance of removing the most likely tokens above xtc_threshold but the least of them; 0 = off"},
      {"xtc_threshold", K::kFloat, &P::xtc_threshold, 0, 1, false, {openai("xtc_threshold")}, "--xtc-threshold",
       KeyRule::kWhenGate, "xtc_probability", "XTC: probability a token needs to be removable; > 0.5 = off"},
      {"dry_multiplier", K::kFloat, &P::dry_multiplier, 0, 1000, false, {openai("dry_multiplier")},
       "--dry-multiplier", KeyRule::kWhenGate, "dry_multiplier", "DRY: scale of the penalty on tokens that extend a repeat; 0 = off"},
      {"dry_base", K::kFloat, &P::dry_base, 0, 1000, false, {openai("dry_base")}, "--dry-base", KeyRule::kWhenGate,
       "dry_multiplier", "DRY: the penalty grows as dry_base^(repeat length - dry_allowed_length); < 1 = the default"},
      {"dry_allowed_length", K::kInt, &P::dry_allowed_length, 0, 1 << 20, false, {openai("dry_allowed_length")},
       "--dry-allowed-length", KeyRule::kWhenGate, "dry_multiplier", "DRY: repeats up to this many tokens are free"},
      {"dry_penalty_last_n", K::kInt, &P::dry_penalty_last_n, -1, kInt32Max, false, {openai("dry_penalty_last_n")},
       "--dry-penalty-last-n", KeyRule::kWhenGate, "dry_multiplier", "DRY: window in tokens, prompt included; 0 = off, -1 = all"},
      {"dry_sequence_breakers", K::kStrings, &P::dry_sequence_breakers, 0, 0, false,
       {openai("dry_sequence_breakers")}, "--dry-sequence-breaker", KeyRule::kWhenGate, "dry_multiplier",
       "DRY: strings that end a repeat (at most 64; flag: repeatable, replaces the default list)"},
  };
  return f;
}

void put_bytes(std::string& out, const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }

}  // namespace

Status SamplingParams::validate(int32_t n_vocab) const {
  const std::string p = "[sampler] ";
  if (n_vocab <= 0) return Status::error(p + "n_vocab must be positive, got " + std::to_string(n_vocab));
  if (!std::isfinite(temperature) || temperature < 0.0f)
    return Status::error(p + "temperature must be finite and >= 0, got " + fmt_float(temperature));
  if (!(top_p > 0.0f && top_p <= 1.0f))
    return Status::error(p + "top_p must be in (0, 1], got " + fmt_float(top_p));
  if (!std::isfinite(top_n_sigma))
    return Status::error(p + "top_n_sigma must be finite (<= 0 = off), got " + fmt_float(top_n_sigma));
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    return Status::error(p + "min_p must be in [0, 1], got " + fmt_float(min_p));
  if (!std::isfinite(repeat_penalty) || repeat_penalty <= 0.0f)
    return Status::error(p + "repeat_penalty must be finite and > 0, got " + fmt_float(repeat_penalty));
  if (repeat_last_n < -1)
    return Status::error(p + "repeat_last_n must be >= -1 (-1 = all tokens), got " +
                         std::to_string(repeat_last_n));
  if (!std::isfinite(presence_penalty))
    return Status::error(p + "presence_penalty must be finite, got " + fmt_float(presence_penalty));
  if (!std::isfinite(frequency_penalty))
    return Status::error(p + "frequency_penalty must be finite, got " + fmt_float(frequency_penalty));
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= n_vocab)
      return Status::error(p + "logit_bias token " + std::to_string(id) + " out of range [0, " +
                           std::to_string(n_vocab) + ")");
    if (std::isnan(bias) || bias == std::numeric_limits<float>::infinity())
      return Status::error(p + "logit_bias for token " + std::to_string(id) +
                           " must be finite or -inf, got " + fmt_float(bias));
  }
  if (!(xtc_probability >= 0.0f && xtc_probability <= 1.0f))
    return Status::error(p + "xtc_probability must be in [0, 1], got " + fmt_float(xtc_probability));
  if (!(xtc_threshold >= 0.0f && xtc_threshold <= 1.0f))
    return Status::error(p + "xtc_threshold must be in [0, 1] (> 0.5 = off), got " + fmt_float(xtc_threshold));
  if (!std::isfinite(dry_multiplier) || dry_multiplier < 0.0f)
    return Status::error(p + "dry_multiplier must be finite and >= 0, got " + fmt_float(dry_multiplier));
  if (!std::isfinite(dry_base))
    return Status::error(p + "dry_base must be finite (< 1 = off), got " + fmt_float(dry_base));
  if (dry_allowed_length < 0)
    return Status::error(p + "dry_allowed_length must be >= 0, got " + std::to_string(dry_allowed_length));
  if (dry_penalty_last_n < -1)
    return Status::error(p + "dry_penalty_last_n must be >= -1 (-1 = all tokens), got " +
                         std::to_string(dry_penalty_last_n));
  for (size_t i = 0; i < dry_breaker_ids.size(); ++i) {
    if (dry_breaker_ids[i].empty())
      return Status::error(p + "dry_breaker_ids[" + std::to_string(i) + "] is empty");
    for (int32_t id : dry_breaker_ids[i]) {
      if (id < 0 || id >= n_vocab)
        return Status::error(p + "dry_breaker_ids[" + std::to_string(i) + "] token " + std::to_string(id) +
                             " out of range [0, " + std::to_string(n_vocab) + ")");
    }
  }
  return Status::ok();
}


SamplingDefaults model_sampling_defaults(const gguf::GgufFile& file) {
  SamplingDefaults d;
  const auto num = [&](const char* key, double lo, double hi) -> std::optional<double> {
    auto v = file.get_float(key);
    if (!v || !std::isfinite(*v) || *v < lo || *v > hi) return std::nullopt;
    return *v;
  };
  if (auto v = num("general.sampling.temp", 0.0, 100.0)) d.temperature = static_cast<float>(*v);
  if (auto v = num("general.sampling.top_p", 1e-6, 1.0)) d.top_p = static_cast<float>(*v);
  if (auto v = num("general.sampling.min_p", 0.0, 1.0)) d.min_p = static_cast<float>(*v);
  if (auto v = file.get_int("general.sampling.top_k"); v && *v >= 0 && *v <= (int64_t{1} << 24))
    d.top_k = static_cast<int32_t>(*v);
  return d;
}

// ---------------------------------------------------------------- the field table

const SamplingSpelling* SamplingField::spelling(SamplingApi api) const {
  for (const SamplingSpelling& s : apis)
    if (s.api == api) return &s;
  return nullptr;
}

double SamplingField::number(const SamplingParams& p) const {
  if (auto* m = std::get_if<float SamplingParams::*>(&member)) return p.**m;
  if (auto* m = std::get_if<int32_t SamplingParams::*>(&member)) return p.**m;
  if (auto* m = std::get_if<uint64_t SamplingParams::*>(&member)) return static_cast<double>(p.**m);
  return 0;
}

void SamplingField::set_number(SamplingParams& p, double v) const {
  if (auto* m = std::get_if<float SamplingParams::*>(&member)) p.**m = static_cast<float>(v);
  if (auto* m = std::get_if<int32_t SamplingParams::*>(&member)) p.**m = static_cast<int32_t>(v);
  if (auto* m = std::get_if<uint64_t SamplingParams::*>(&member)) p.**m = static_cast<uint64_t>(v);
}

void SamplingField::copy(const SamplingParams& from, SamplingParams& to) const {
  std::visit([&](auto m) { to.*m = from.*m; }, member);
}

std::string SamplingField::text(const SamplingParams& p) const {
  switch (kind) {
    case SamplingKind::kFloat:
    case SamplingKind::kInt:
      return fmt_number(number(p));
    case SamplingKind::kSeed:
      return std::to_string(p.*std::get<uint64_t SamplingParams::*>(member));
    case SamplingKind::kStrings:
      return nlohmann::json(p.*std::get<std::vector<std::string> SamplingParams::*>(member)).dump();
    case SamplingKind::kTokenBias: {
      const auto& v = p.*std::get<std::vector<std::pair<int32_t, float>> SamplingParams::*>(member);
      return v.empty() ? "none" : std::to_string(v.size()) + " tokens";
    }
  }
  return "";
}

const std::vector<SamplingField>& sampling_fields() {
  static const std::vector<SamplingField> kFields = build_fields();
  return kFields;
}

const SamplingField* find_sampling_field(const std::string& name) {
  for (const SamplingField& f : sampling_fields())
    if (name == f.name) return &f;
  return nullptr;
}

SamplingParams api_default_sampling(SamplingApi api) {
  SamplingParams p;
  for (const SamplingField& f : sampling_fields())
    if (const SamplingSpelling* s = f.spelling(api); s != nullptr && !std::isnan(s->default_value))
      f.set_number(p, s->default_value);
  return p;
}

void normalize_request_sampling(SamplingParams& p) {
  if (p.top_p <= 0.0f) {  // OpenAI: top_p 0 keeps only the most likely token
    p.temperature = 0.0f;
    p.top_p = 1.0f;
  }
  if (p.dry_base < 1.0f) p.dry_base = SamplingParams{}.dry_base;  // llama-server: a base below 1 means the default
}

std::string generation_key_bytes(const SamplingParams& p) {
  std::string out;
  for (const SamplingField& f : sampling_fields()) {
    bool in = true;
    switch (f.key) {
      case KeyRule::kAlways: break;
      case KeyRule::kNever: in = false; break;
      case KeyRule::kWhenSampling: in = p.temperature > 0.0f; break;
      case KeyRule::kWhenGate: in = find_sampling_field(f.gate)->number(p) != 0.0; break;
    }
    if (!in) continue;
    out += f.name;
    out += '=';
    if (auto* m = std::get_if<float SamplingParams::*>(&f.member)) put_bytes(out, &(p.**m), sizeof(float));
    if (auto* m = std::get_if<int32_t SamplingParams::*>(&f.member)) put_bytes(out, &(p.**m), sizeof(int32_t));
    if (auto* m = std::get_if<uint64_t SamplingParams::*>(&f.member)) put_bytes(out, &(p.**m), sizeof(uint64_t));
    if (auto* m = std::get_if<std::vector<std::string> SamplingParams::*>(&f.member)) {
      for (const std::string& s : p.**m) {
        const uint64_t n = s.size();
        put_bytes(out, &n, sizeof(n));
        out += s;
      }
    }
    if (auto* m = std::get_if<std::vector<std::pair<int32_t, float>> SamplingParams::*>(&f.member)) {
      for (const auto& [id, bias] : p.**m) {
        put_bytes(out, &id, sizeof(id));
        put_bytes(out, &bias, sizeof(bias));
      }
    }
    out += ';';
  }
  return out;
}

std::string sampling_fields_markdown() {
  const SamplingParams d;
  std::string out =
      "| field | type | range | default | /v1/messages | CLI flag | in the generation key | meaning |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const SamplingField& f : sampling_fields()) {
    const char* type = f.kind == SamplingKind::kFloat     ? "number"
                       : f.kind == SamplingKind::kInt     ? "integer"
                       : f.kind == SamplingKind::kSeed    ? "integer (64-bit)"
                       : f.kind == SamplingKind::kStrings ? "array of strings"
                                                          : "object / array";
    std::string range;
    if (f.kind == SamplingKind::kFloat || f.kind == SamplingKind::kInt)
      range = std::string(f.lo_open ? "(" : "[") + fmt_number(f.lo) + ", " + fmt_number(f.hi) + "]";
    else if (f.kind == SamplingKind::kTokenBias)
      range = "bias in [" + fmt_number(f.lo) + ", " + fmt_number(f.hi) + "]";
    else
      range = "-";
    std::string anthropic = "-";
    if (const SamplingSpelling* s = f.spelling(SamplingApi::kAnthropic)) {
      SamplingParams a = api_default_sampling(SamplingApi::kAnthropic);
      if (s->key != nullptr) {
        anthropic = std::string("`") + s->key + "`";
        if (!std::isnan(s->lo) || !std::isnan(s->hi))
          anthropic += " in [" + fmt_number(std::isnan(s->lo) ? f.lo : s->lo) + ", " +
                       fmt_number(std::isnan(s->hi) ? f.hi : s->hi) + "]";
        anthropic += ", default " + f.text(a);
      } else {
        anthropic = "not read; " + f.text(a);
      }
    }
    std::string key = f.key == KeyRule::kAlways         ? "yes"
                      : f.key == KeyRule::kWhenSampling ? "when temperature > 0"
                      : f.key == KeyRule::kWhenGate     ? std::string("when ") + f.gate + " != 0"
                                                        : "no";
    std::string dflt = f.kind == SamplingKind::kSeed ? "random" : f.text(d);
    if (f.kind == SamplingKind::kStrings) {
      dflt.clear();
      for (const std::string& s : d.*std::get<std::vector<std::string> SamplingParams::*>(f.member)) {
        if (!dflt.empty()) dflt += ' ';
        dflt += nlohmann::json(s).dump();
      }
    }
    out += std::string("| `") + f.name + "` | " + type + " | " + range + " | " + dflt + " | " + anthropic + " | " +
           (f.cli != nullptr ? std::string("`") + f.cli + "`" : "-") + " | " + key + " | " + f.help + " |\n";
  }
  return out;
}

}  // namespace specula
