// sampling/params.h — what a request asks of the sampler: SamplingParams, and the one
// description of its fields (sampling_fields()) that every front door reads.
//
// Owns: the parameters and their defaults (the struct's initialisers, llama.cpp's CLI
// defaults), their validation, the table that says for each field its name, kind, range,
// the names the HTTP APIs read it by (and their ranges and defaults where an API differs),
// its `specula generate` / `specula chat` flag, whether it is part of the generation key
// (engine/resume.cpp), and a one-line meaning; the rules a request layer applies after
// reading them (normalize_request_sampling); the bytes of the generation key
// (generation_key_bytes); the Markdown table docs/API.md holds (sampling_fields_markdown,
// checked by tests/sampling/params_test.cpp); and a model's own defaults
// (model_sampling_defaults, from generation_config.json).
// Adding a sampling field: a member of SamplingParams, its row in sampling_fields()
// (sampling/params.cpp), its check in validate(), and its algorithm in sampling/sampler.cpp
// (with its step in the chain list of sampler.h). The OpenAI parser (every row has an
// OpenAI spelling), the Anthropic parser (for a row with a kAnthropic spelling), the CLI
// flags (cli/common.cpp), the generation key and docs/API.md's table follow from the row
// (regenerate the table: SPECULA_UPDATE_DOCS=1 build/release/specula_tests
// --gtest_filter=SamplingFields.DocsTableIsCurrent). A draft model samples its drafts with
// a copy of the request's parameters (decoding/draft.cpp), so a new field reaches it too.
// Does not: sample (sampler.h), parse JSON or flags, or tokenize (DRY's breaker strings
// become token ids in the request layer, sampler.h dry_breaker_ids_from_strings).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "formats/gguf.h"
#include "specula/status.h"

namespace specula {

// Per-request sampling options. Defaults are llama.cpp's CLI defaults
// (common_params_sampling), except seed, which is fixed here (llama.cpp draws
// a random one); the request layer passes the user's seed or a random one.
struct SamplingParams {
  float temperature = 0.8f;      // <= 0 => greedy argmax; must be finite, >= 0
  int32_t top_k = 40;            // <= 0 => off
  float top_p = 0.95f;           // in (0, 1]; 1 => off
  float min_p = 0.05f;           // in [0, 1]; 0 => off
  float repeat_penalty = 1.0f;   // > 0; 1 => off
  int32_t repeat_last_n = 64;    // repeat_penalty window; 0 => off, -1 => all tokens
  float presence_penalty = 0.0f;   // OpenAI alpha_presence, over generated tokens; 0 => off
  float frequency_penalty = 0.0f;  // OpenAI alpha_frequency, over generated tokens; 0 => off
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, additive bias); bias may be -inf
  // Top-nσ (Tang et al. 2024, "Top-nσ: Not All Logits Are You Need", arXiv:2411.07641;
  // llama.cpp's top_n_sigma): keep the tokens whose logit is at least max - n·σ, σ the
  // standard deviation of the finite logits (chain step 4b). <= 0 => off.
  float top_n_sigma = -1.0f;
  uint64_t seed = 0;             // RNG stream seed

  // XTC, "exclude top choices" (chain step 8). Off unless xtc_probability > 0 and
  // xtc_threshold <= 0.5 (llama.cpp: a threshold above 0.5 can never hold for two
  // tokens at once, so it disables the sampler).
  float xtc_probability = 0.0f;  // chance that XTC acts on a token; in [0, 1]; 0 => off
  float xtc_threshold = 0.1f;    // in [0, 1]; > 0.5 => off

  // DRY, "don't repeat yourself" (chain step 3). Off unless dry_multiplier > 0,
  // dry_base >= 1 and dry_penalty_last_n != 0 (llama.cpp's condition; its server
  // replaces a dry_base < 1 by the default instead — a request layer's choice).
  float dry_multiplier = 0.0f;      // finite, >= 0; 0 => off
  float dry_base = 1.75f;           // finite; < 1 => off
  int32_t dry_allowed_length = 2;   // >= 0; extending a repeat of n >= this many tokens is penalised
  int32_t dry_penalty_last_n = 64;  // window over prompt + generated tokens; 0 => off, -1 => all tokens
  // Breaker strings, llama.cpp's name and default. The Sampler has no tokenizer and
  // does not read these: the caller turns them into dry_breaker_ids with
  // dry_breaker_ids_from_strings (below) and its tokenizer.
  std::vector<std::string> dry_sequence_breakers = {"\n", ":", "\"", "*"};
  // The breakers as token sequences, as llama.cpp's llama_sampler_init_dry derives
  // them from the strings: {head} for a single-token breaker (a token whose text
  // contains a breaker string: it resets the repeat and is never penalised), or
  // {head, tail...} for a token whose text ends with the start of a breaker string
  // followed by the tokenization of the rest (a multi-token breaker: it resets the
  // repeat only when the tail follows the head). Empty => no breakers. Ids must be
  // in [0, n_vocab).
  std::vector<std::vector<int32_t>> dry_breaker_ids;

  // Checks every field against n_vocab; messages look like
  // "[sampler] top_p must be in (0, 1], got 1.5".
  Status validate(int32_t n_vocab) const;
};

// A model's own sampling defaults (a Hugging Face folder's generation_config.json, stored as
// general.sampling.*; model_sampling_defaults below), applied to the fields a user
// or client left unset — as vLLM does with a model's generation config.
struct SamplingDefaults {
  std::optional<float> temperature, top_p, min_p;
  std::optional<int32_t> top_k;
  void apply(SamplingParams& s) const {
    if (temperature) s.temperature = *temperature;
    if (top_p) s.top_p = *top_p;
    if (min_p) s.min_p = *min_p;
    if (top_k) s.top_k = *top_k;
  }
  bool empty() const { return !temperature && !top_p && !min_p && !top_k; }
  // Whether a model's generation_config can set the field named `field`.
  static bool covers(const std::string& field) {
    return field == "temperature" || field == "top_p" || field == "min_p" || field == "top_k";
  }
};


// The model's sampling defaults: general.sampling.temp / top_p / min_p / top_k when present
// (llama.cpp's keys; a Hugging Face folder's generation_config.json, formats/hf_folder.h), values
// outside the sampler's ranges ignored.
SamplingDefaults model_sampling_defaults(const gguf::GgufFile& file);

// ---------------------------------------------------------------- the field table

// How a field is read and stored.
enum class SamplingKind {
  kFloat,      // float member; a JSON number / flag value in [lo, hi]
  kInt,        // int32_t member; an integer in [lo, hi]
  kSeed,       // uint64_t member; any 64-bit integer (negative values wrap), sets "seed given"
  kStrings,    // std::vector<std::string> member; an array of 1..64 non-empty strings
  kTokenBias,  // std::vector<std::pair<int32_t, float>> member; {"id": bias} or [[id, bias], ...]
};

// When a field is part of the generation key (the prompt cache's generation checkpoints:
// an identical request continues a stored generation only when every such field is equal).
enum class KeyRule {
  kAlways,        // always
  kWhenSampling,  // when temperature > 0 (greedy output does not depend on it: the seed)
  kWhenGate,      // when the field named by `gate` is not 0 (XTC's and DRY's fields: off changes nothing)
  kNever,         // never (it cannot change a token)
};

// The HTTP APIs that read sampling fields.
enum class SamplingApi { kOpenAi, kAnthropic };

// A field as one API spells it: its JSON key, and its range and default there when they
// differ from the field's own (NaN: the field's).
struct SamplingSpelling {
  SamplingApi api;
  const char* key;
  double lo, hi, default_value;
};

struct SamplingField {
  using Member = std::variant<float SamplingParams::*, int32_t SamplingParams::*, uint64_t SamplingParams::*,
                              std::vector<std::string> SamplingParams::*,
                              std::vector<std::pair<int32_t, float>> SamplingParams::*>;
  const char* name;      // the member's name
  SamplingKind kind;
  Member member;
  double lo = 0, hi = 0;  // accepted range (kFloat, kInt), inclusive
  bool lo_open = false;   // lo itself is refused
  // The APIs that read it. kOpenAi: /v1/completions, /v1/chat/completions and llama-server's
  // /completion (llama-server's and OpenAI's names; the same key).
  std::vector<SamplingSpelling> apis;
  const char* cli = nullptr;  // flag of `specula generate` and `specula chat` (nullptr: none)
  KeyRule key = KeyRule::kAlways;
  const char* gate = nullptr;  // kWhenGate: the field whose value 0 turns this one off
  const char* help = "";       // one line: meaning and special values

  // The spelling for `api`, or null when that API does not read the field.
  const SamplingSpelling* spelling(SamplingApi api) const;
  // The numeric value of a kFloat / kInt / kSeed field of `p` (others: 0).
  double number(const SamplingParams& p) const;
  // Sets a kFloat / kInt / kSeed field of `p` from a value already range-checked.
  void set_number(SamplingParams& p, double v) const;
  // Copies this field's value from `from` to `to`.
  void copy(const SamplingParams& from, SamplingParams& to) const;
  // The value as text, for the docs table and messages ("0.8", "[\"\\n\", ...]").
  std::string text(const SamplingParams& p) const;
};

// Every field, in the order docs/API.md lists them and the generation key hashes them
// (not the struct's). Built once; never changes.
const std::vector<SamplingField>& sampling_fields();
// The field named `name`, or null.
const SamplingField* find_sampling_field(const std::string& name);

// The parameters a request starts from on `api` before its fields are read: the struct's
// defaults with the API's own (Anthropic: temperature 1, top_k 0, top_p 1, min_p 0).
SamplingParams api_default_sampling(SamplingApi api);

// Rules a request layer applies after reading a request's fields (both APIs and the CLI):
// top_p 0 asks for the most likely token only (temperature 0, top_p 1), as OpenAI's API
// does; a dry_base below 1 means the default 1.75, as llama-server does.
void normalize_request_sampling(SamplingParams& p);

// The bytes of every field that is part of the generation key, in table order, each with
// its name (the engine hashes them with the rest of the request).
std::string generation_key_bytes(const SamplingParams& p);

// docs/API.md's table of sampling fields (GitHub Markdown, one row per field).
std::string sampling_fields_markdown();

}  // namespace specula
