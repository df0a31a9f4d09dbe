// gpt-oss checkpoints keep a layer's experts fused, and not in the order keel's runners
// read: this turns them into the per-expert tensors of MoeConfig::Naming::kQwen, so the
// runners see one layout whatever the file holds.
//
//   file (transformers, bf16 / f32)              -> keel (per expert X, [out, in])
//   mlp.router.weight [E, hidden], .bias [E]     -> mlp.gate.weight, mlp.gate.bias
//   mlp.experts.gate_up_proj [E, hidden, 2I]     -> experts.X.gate_proj.weight [I, hidden]
//     (x @ W; gate = even columns, up = odd)        experts.X.up_proj.weight   [I, hidden]
//   mlp.experts.gate_up_proj_bias [E, 2I]        -> experts.X.{gate,up}_proj.bias [I]
//   mlp.experts.down_proj [E, I, hidden]         -> experts.X.down_proj.weight [hidden, I]
//   mlp.experts.down_proj_bias [E, hidden]       -> experts.X.down_proj.bias [hidden]
//
// The released MXFP4 pairs (gate_up_proj_blocks / _scales, repacked by ModelWeights into
// one kMXFP4 tensor) are already [E, out, in]: gate_up [E, 2I, hidden] with gate = even
// rows, down [E, hidden, I]; they are split by whole rows, so blocks stay intact.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor_view.h"
#include "formats/model_config.h"

namespace keel {

struct GptOssTensors {
  std::vector<TensorView> views;                    // under keel's names
  std::vector<std::unique_ptr<std::byte[]>> owned;  // the storage of the copied ones
};

// Null when `t` is not one of gpt-oss's fused router / expert tensors (it keeps its name).
// Throws Error(kFormat) naming `file` and the tensor when its shape does not fit the
// config (too few experts, a router of another width, ...), Error(kUnsupported) for a
// dtype keel cannot rearrange.
std::optional<GptOssTensors> split_gpt_oss_tensor(const TensorView &t, const ModelConfig &c,
                                                  const std::string &file);

// Where a gpt-oss file keeps the tensor keel names `keel_name` ("model.layers.3.mlp.gate.bias"
// -> "model.layers.3.mlp.router.bias", "...experts.5.up_proj.weight" ->
// "...mlp.experts.gate_up_proj"), for error messages; empty for a name it keeps as is.
std::string gpt_oss_stored_name(const std::string &keel_name);

}  // namespace keel
