// Reads the mixture-of-experts fields of an HF config.json (internal to formats/).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "formats/model_config.h"

namespace keel {

// Fills c.moe for qwen3_moe, mixtral, glm4_moe and gpt_oss (c.arch, c.num_layers and
// c.intermediate_size already set); throws Error(kFormat) naming `origin` and the field on missing
// or inconsistent values, Error(kUnsupported) on a routing option keel does not implement.
void parse_hf_moe(const nlohmann::json &j, ModelConfig &c, const std::string &origin);

// Checks c.moe (when present) against the rest of the config.
void validate_moe(const ModelConfig &c, const std::string &origin);

}  // namespace keel
