// An MTP layer (make_model --mtp-layers 1, f32) rewired to copy the target: eh_proj passes
// hnorm(h_t) through, the block adds nothing (o_proj and every down_proj zero) and the head
// is the target's lm_head (shared_head.head dropped, so the fallback is used): its guess for
// x_{t+2} is the target's own for x_{t+1}, i.e. drafts repeat the last token, and the
// target's repetitions accept them. For the MTP engine tests on the CPU and on CUDA.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "support/rewrite_safetensors.h"

namespace keel::test {

// Rewires the MTP layer `layer` (the model's num_hidden_layers) of `model_file` in place.
inline void make_mtp_layer_copying(const std::filesystem::path &model_file, std::int64_t layer) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  rewrite_safetensors(model_file, [&](const std::string &name, StoredTensor &t) {
    if (name == p + "shared_head.head.weight") return false;
    std::vector<float> v = f32_values(t);
    if (name == p + "eh_proj.weight") {
      const std::int64_t h = t.shape[0];
      std::fill(v.begin(), v.end(), 0.0f);
      for (std::int64_t i = 0; i < h; ++i) v[static_cast<std::size_t>(i * 2 * h + h + i)] = 1.0f;
    } else if (name == p + "self_attn.o_proj.weight" ||
               (name.starts_with(p + "mlp.") && name.ends_with("down_proj.weight"))) {
      std::fill(v.begin(), v.end(), 0.0f);
    } else {
      return true;
    }
    set_f32_values(t, v);
    return true;
  });
}

}  // namespace keel::test
