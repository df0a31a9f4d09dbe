// A deterministic random EAGLE-3 draft head for a given target (`keel make-model
// --eagle3-for TARGET`, and tests): config.json and model.safetensors in the layout of the
// public checkpoints (formats/eagle3_config.h; fc, midlayer.*, norm, lm_head, d2t, t2d,
// optionally embed_tokens), f32. Norm weights are drawn around one (not ones), so a head
// that skipped or swapped a norm computes something else; d2t maps the draft vocabulary to
// a spread of target ids with non-zero offsets.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "formats/model_config.h"

namespace keel {

struct MakeEagle3Options {
  ModelConfig target;                    // the target's shape (hidden, heads, vocab, layers)
  std::int64_t draft_vocab = 0;          // 0: half the target's vocabulary
  bool own_embed = false;                // write embed_tokens.weight (else the target's serves)
  std::vector<std::int32_t> aux_layers;  // empty: {0, L / 2, L - 1} of the target's L
  std::uint64_t seed = 0;
  std::filesystem::path out;  // the directory
  // Broken heads, for tests of the loader's errors: a tensor left out, another
  // hidden_size in config.json, d2t of another length, fc of another input width.
  std::string omit_tensor;
  std::optional<std::int64_t> hidden, d2t_length, fc_inputs;
  // Chosen weights (tests): called with each f32 tensor's name and values before writing.
  std::function<void(const std::string &name, std::vector<float> &values)> edit;
};

// Writes the head; returns the bytes of its tensors. Throws Error naming what is wrong.
std::int64_t make_eagle3_head(const MakeEagle3Options &options);

}  // namespace keel
