// Structured output in OpenAI-style requests: response_format (json_object,
// json_schema) and the vLLM / llama.cpp style structured_outputs field ({json | regex |
// choice | grammar}). The constraint is compiled here once to validate it, so a bad
// schema is a 400 naming the field and the path inside the schema.
#pragma once

#include <nlohmann/json.hpp>

#include "core/sampling_params.h"
#include "grammar/constraint.h"

namespace keel::server::openai {

// Sets s.constraint_kind / constraint_text from the body; throws ApiErrorException.
// `allow_response_format`: chat requests only.
void parse_structured_output(const nlohmann::ordered_json &body, SamplingParams &s,
                             bool allow_response_format);

// Compiles `c` to validate it; a refusal is a 400 naming `field` and the path inside it
// ("tools[0].function.parameters.properties.n.multipleOf").
void check_constraint(const grammar::Constraint &c, const std::string &field);

// A json_schema format's schema (null: any JSON object) set on s, checked under `field`.
void set_json_schema_constraint(SamplingParams &s, const nlohmann::ordered_json &schema,
                                const std::string &field);

}  // namespace keel::server::openai
