// Sampling fields shared by the OpenAI and Anthropic request parsers, validated with
// the field named in every error.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/sampling_params.h"

namespace keel::server {

// temperature, top_p, top_k, min_p, presence/frequency/repetition penalties, seed,
// ignore_eos, min_tokens. max_tokens is read by each API (its name and rules differ).
void parse_sampling_fields(const nlohmann::ordered_json &body, SamplingParams &out);
// min_tokens (read by parse_sampling_fields) against the request's output limit, when it
// has one: at most `max_tokens`, else a 400 naming min_tokens.
void check_min_tokens(const SamplingParams &s, std::optional<std::int64_t> max_tokens,
                      const char *max_field);
// A string or an array of strings (at most `max_count`), under `field`.
std::vector<std::string> parse_stop_field(const nlohmann::ordered_json &body, const char *field,
                                          std::size_t max_count);

}  // namespace keel::server
