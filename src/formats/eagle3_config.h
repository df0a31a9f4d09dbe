// The config.json of an EAGLE-3 draft head (`--speculative eagle3:PATH`), as its public
// checkpoints ship it (yuhuili/EAGLE3-*, SpecForge): architectures LlamaForCausalLMEagle3,
// one Llama decoder layer's shape (hidden_size, heads, head_dim, intermediate_size,
// rms_norm_eps, rope_theta / rope_scaling), vocab_size (the target's), draft_vocab_size
// (the head's own, smaller output vocabulary), and optionally target_hidden_size and
// eagle_config.eagle_aux_hidden_state_layer_ids (the target layers whose outputs feed fc);
// vLLM's speculators format too (the layer's fields in transformer_layer_config, the aux
// ids at the top level in vLLM's indexing).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/model_config.h"

namespace keel {

struct Eagle3Config {
  ModelConfig layer;  // the head's decoder layer (num_layers 1), vocab_size the target's
  std::int64_t draft_vocab_size = 0;    // lm_head rows; vocab_size when absent
  std::int64_t target_hidden_size = 0;  // fc takes aux_layers x this; hidden_size when absent
  // The target layers whose outputs (the residual stream after layer l) fc concatenates,
  // in order; empty: the default. From eagle_config.eagle_aux_hidden_state_layer_ids
  // (SGLang / SpecForge: ids are layer outputs) or a top-level
  // eagle_aux_hidden_state_layer_ids (vLLM's speculators format: id j is the input of layer
  // j, so the output of j - 1), which wins when both are present.
  std::vector<std::int32_t> aux_layer_ids;
  // SpecForge's norm_before_residual: the layer's residual is hidden_norm(fc(...)), not
  // fc(...) itself.
  bool norm_before_residual = false;
};

// Parses config.json's text; throws Error(kFormat) naming `origin` and the field.
Eagle3Config parse_eagle3_config(const std::string &text, const std::string &origin);
// Reads `dir`/config.json (Error(kNotFound) naming it when absent).
Eagle3Config load_eagle3_config(const std::filesystem::path &dir);

// The target layers whose outputs feed fc for a target of `target_layers` decoder layers:
// the config's ids, or the reference implementations' default, the inputs of layers 2,
// L / 2 and L - 3 (vLLM's and SGLang's capture points), i.e. the outputs of layers 1,
// L / 2 - 1 and L - 4. (SGLang reads eagle_aux_hidden_state_layer_ids as layer outputs,
// capturing the input of id + 1; so does keel.) Throws Error(kInvalidArgument) naming the
// field when an id is outside [0, target_layers).
std::vector<std::int32_t> eagle3_aux_layers(const Eagle3Config &config, std::int64_t target_layers);

}  // namespace keel
