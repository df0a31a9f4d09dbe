// Reads the multi-head latent attention fields of an HF config.json (internal to formats/).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "formats/model_config.h"

namespace keel {

// Fills c.mla, c.kv_layout, c.head_dim (q/k head: nope + rope), c.num_kv_heads (= heads)
// and c.rope_style for deepseek_v3 and glm_moe_dsa (c.arch, c.num_layers, c.num_heads,
// c.rope_scaling and c.moe already set; glm_moe_dsa's mlp_layer_types rewrite
// c.moe->sparse_layers). Throws Error(kFormat) naming `origin` and the field on missing or
// inconsistent values (an unknown indexer_types entry, a rank that is not positive, ...).
void parse_hf_mla(const nlohmann::json &j, ModelConfig &c, const std::string &origin);

// Checks c.mla (when present) against the rest of the config.
void validate_mla(const ModelConfig &c, const std::string &origin);

}  // namespace keel
