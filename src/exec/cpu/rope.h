// Rotary position embeddings: the inverse frequencies of every scaling type HF
// transformers implements for the Llama family (default, linear, llama3, yarn), and
// their application in either pairing (neox: (i, i + d/2); interleaved: (2i, 2i + 1),
// for GGUF llama-type files whose q/k rows are permuted).
#pragma once

#include <cstdint>
#include <vector>

#include "formats/model_config.h"

namespace keel::cpu {

struct RopeTable {
  std::vector<float> inv_freq;     // [rot_dim / 2]
  float attention_scaling = 1.0f;  // multiplies cos and sin (yarn)
  std::int64_t rot_dim = 0;
  RopeStyle style = RopeStyle::kNeox;
};

// Computed as HF does (float32 arithmetic where HF uses it), from the config.
RopeTable make_rope_table(const ModelConfig &cfg);

// x: [tokens, heads, head_dim] rotated in place; positions: [tokens].
void apply_rope(const RopeTable &rope, float *x, std::int64_t tokens, std::int64_t heads,
                std::int64_t head_dim, const std::int32_t *positions);

}  // namespace keel::cpu
