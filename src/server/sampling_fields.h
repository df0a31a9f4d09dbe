// Sampling fields shared by the OpenAI and Anthropic request parsers, validated with
// the field named in every error.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/sampling_params.h"

namespace keel::server {

// temperature, top_p, top_k, min_p, presence/frequency/repetition penalties, seed,
// ignore_eos. max_tokens is read by each API (its name and rules differ).
void parse_sampling_fields(const nlohmann::ordered_json &body, SamplingParams &out);
// A string or an array of strings (at most `max_count`), under `field`.
std::vector<std::string> parse_stop_field(const nlohmann::ordered_json &body, const char *field,
                                          std::size_t max_count);

}  // namespace keel::server
