// The mixture-of-experts part of a model's configuration (Qwen3-MoE, Mixtral), and
// the HF names of its tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

struct MoeConfig {
  // How a checkpoint names a layer's router and experts:
  //   kQwen:    mlp.gate.weight, mlp.experts.E.{gate,up,down}_proj.weight
  //   kMixtral: block_sparse_moe.gate.weight, block_sparse_moe.experts.E.{w1,w3,w2}.weight
  enum class Naming { kQwen, kMixtral };
  Naming naming = Naming::kQwen;
  std::int64_t num_experts = 0;          // E
  std::int64_t top_k = 0;                // experts per token
  std::int64_t expert_intermediate = 0;  // I of one expert's SwiGLU MLP
  // Softmax over all experts, then top-k; with norm_topk_prob the k weights are
  // renormalized to sum to one (Mixtral always does).
  bool norm_topk_prob = true;
  // Per layer: true for a MoE block, false for a dense MLP of intermediate_size
  // (Qwen3-MoE's mlp_only_layers and decoder_sparse_step).
  std::vector<bool> sparse_layers;

  bool sparse(std::int64_t layer) const {
    return layer >= 0 && layer < static_cast<std::int64_t>(sparse_layers.size()) &&
           sparse_layers[static_cast<std::size_t>(layer)];
  }
};

enum class ExpertMatrix { kGate, kUp, kDown };

// "model.layers.L.mlp.gate.weight" (or block_sparse_moe) : [E, hidden].
std::string moe_router_name(const MoeConfig &moe, std::int64_t layer);
// "model.layers.L.mlp.experts.X.gate_proj.weight" and the like.
std::string moe_expert_name(const MoeConfig &moe, std::int64_t layer, std::int64_t expert,
                            ExpertMatrix which);

}  // namespace keel
