// The quantization_config of FP8 checkpoints (config.json), as two families write it:
//   the FP8 releases of Qwen3, DeepSeek and GLM:
//     {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
//      "weight_block_size": [128, 128]}     -> <weight>_scale_inv [ceil(out/128), ceil(in/128)]
//   llm-compressor (compressed-tensors):
//     {"quant_method": "compressed-tensors", "format": "float-quantized",
//      "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float",
//        "strategy": "tensor" | "channel" | "block", "block_structure": [128, 128]}, ...}}}
//                                           -> <weight>_scale [] / [1], [out, 1] or blocks
// Activations stay bf16 in keel whatever activation_scheme says.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

namespace keel {

struct Fp8Config {
  std::string method;    // "fp8" | "compressed-tensors"
  std::string strategy;  // "block" | "tensor" | "channel"
  // The scale block of the block strategy (128 x 128 in every release so far).
  std::int64_t block_rows = 128, block_cols = 128;
};

// Reads j["quantization_config"] when it describes FP8 e4m3 weights; nullopt when absent
// or another method (a method keel cannot run is refused where its tensors are read).
// Throws Error(kFormat) naming the field when an FP8 config is malformed, and
// Error(kUnsupported) for FP8 variants keel does not read (e5m2, bits other than 8).
std::optional<Fp8Config> parse_fp8_config(const nlohmann::json &config, const std::string &origin);

}  // namespace keel
