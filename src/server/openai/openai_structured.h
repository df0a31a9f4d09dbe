// Structured output in OpenAI-style requests: response_format (json_object,
// json_schema) and the vLLM / llama.cpp style structured_outputs field ({json | regex |
// choice | grammar}). The constraint is compiled here once to validate it, so a bad
// schema is a 400 naming the field and the path inside the schema.
#pragma once

#include <nlohmann/json.hpp>

#include "core/sampling_params.h"

namespace keel::server::openai {

// Sets s.constraint_kind / constraint_text from the body; throws ApiErrorException.
// `allow_response_format`: chat requests only.
void parse_structured_output(const nlohmann::ordered_json &body, SamplingParams &s,
                             bool allow_response_format);

}  // namespace keel::server::openai
