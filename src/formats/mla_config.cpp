#include "formats/mla_config.h"

#include <cmath>

#include "formats/model_config.h"

namespace keel {

double yarn_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

std::string mla_name(std::int64_t layer, const std::string &rest) {
  return "model.layers." + std::to_string(layer) + ".self_attn." + rest;
}

std::int64_t kv_values_per_token_layer(const ModelConfig &c) {
  if (c.kv_layout == KvLayout::kLatent && c.mla) return c.mla->latent_values();
  return 2 * c.num_kv_heads * c.head_dim;
}

}  // namespace keel
