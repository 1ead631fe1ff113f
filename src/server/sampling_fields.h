// server/sampling_fields.h — reading a request's sampling fields as sampling/params.h's
// table describes them: for each field the API spells, its JSON key, kind and range (the
// API's own where it differs), into SamplingParams. The parsers of both API families call
// it; a new sampling field needs no change here.
// Does not: apply the request-level rules (normalize_request_sampling runs after the
// whole body is read) or tokenize DRY's breakers (ServedModel::dry_breaker_ids does, per
// model, in engine_request.cpp).
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "sampling/params.h"
#include "server/errors.h"

namespace specula::server {

// Reads every field `api` spells from `body` into `out` (fields absent or null keep their
// value). `seed_given` is set when a seed is read. The first wrong field is the 400.
// `text_bias`: where logit_bias keys that are text, not token ids, go (llama-server biases
// every token of the text; the caller tokenizes); null: such keys are refused.
std::optional<ApiError> read_sampling_fields(const nlohmann::ordered_json& body, SamplingApi api, SamplingParams* out,
                                             bool* seed_given,
                                             std::vector<std::pair<std::string, float>>* text_bias = nullptr);

// Whether `key` is a sampling field that `api` reads.
bool is_sampling_key(const std::string& key, SamplingApi api);

}  // namespace specula::server
