// make-model's multi-head latent attention shapes and config fields (deepseek_v3,
// glm_moe_dsa); internal to formats/make_model.cpp.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "formats/model_config.h"

namespace keel {

// Fills c (dimensions, c.mla, kv layout, rope) and m (grouped sigmoid routing, one shared
// expert) for "tiny", "small", "deepseek-v3" (671B) or "glm-5" (744B); throws
// Error(kInvalidArgument) for another shape.
void apply_mla_shape(ModelConfig &c, MoeConfig &m, const std::string &shape);
// After the command line's overrides: head_dim, kv heads, the dense first layers and the
// DSA schedule follow the (possibly changed) heads and layer count.
void finish_mla_config(ModelConfig &c, const std::string &shape);
// The config.json fields of MLA and its MoE, as the releases write them.
void mla_config_json(const ModelConfig &c, nlohmann::ordered_json &j);

}  // namespace keel
