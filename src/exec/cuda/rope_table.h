// RoPE inverse frequencies for every scaling type the config can name (none, linear,
// llama3, yarn), as HF transformers computes them, plus yarn's attention factor.
// Plain host code (cpu::make_rope_table's numbers): the kernels read the table.
#pragma once

#include <vector>

#include "formats/model_config.h"

namespace keel::cuda {

struct RopeTable {
  std::vector<float> inv_freq;  // [head_dim / 2]
  float mscale = 1.0f;          // multiplies cos and sin (yarn), 1 otherwise
};

RopeTable make_rope_table(const ModelConfig &config);

}  // namespace keel::cuda
