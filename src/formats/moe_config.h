// The mixture-of-experts part of a model's configuration (Qwen3-MoE, Mixtral,
// GLM-4.5, gpt-oss), and the HF names of its tensors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace keel {

struct MoeConfig {
  // How a checkpoint names a layer's router and experts:
  //   kQwen:    mlp.gate.weight, mlp.experts.E.{gate,up,down}_proj.weight
  //   kMixtral: block_sparse_moe.gate.weight, block_sparse_moe.experts.E.{w1,w3,w2}.weight
  //   (GLM-4.5 names its routed experts as kQwen does, plus mlp.gate.e_score_correction_bias
  //   and mlp.shared_experts.{gate,up,down}_proj.weight.)
  enum class Naming { kQwen, kMixtral };
  Naming naming = Naming::kQwen;
  std::int64_t num_experts = 0;          // E
  std::int64_t top_k = 0;                // experts per token
  std::int64_t expert_intermediate = 0;  // I of one expert's SwiGLU MLP
  // Softmax over all experts, then top-k; with norm_topk_prob the k weights are
  // renormalized to sum to one (Mixtral always does).
  bool norm_topk_prob = true;
  // kSoftmax: Qwen3-MoE / Mixtral. kSigmoid (GLM-4.5, "noaux_tc"): scores are
  // sigmoid(logits); experts are *chosen* by score + e_score_correction_bias within the
  // topk_group best of n_group groups (a group's worth: its two best corrected scores),
  // but *weighted* by the uncorrected score (renormalized with norm_topk_prob), times
  // routed_scaling_factor.
  // kTopkSoftmax (gpt-oss): logits = h W_router^T + router_bias; the top-k logits are
  // chosen and weighted by a softmax over those k only.
  enum class Scoring { kSoftmax, kSigmoid, kTopkSoftmax };
  Scoring scoring = Scoring::kSoftmax;
  std::int64_t n_group = 1;
  std::int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;
  // A shared expert every token runs besides its routed ones (GLM-4.5's
  // n_shared_experts x moe_intermediate_size wide SwiGLU MLP); 0 when none.
  std::int64_t shared_intermediate = 0;
  // gpt-oss: a bias on the router logits (mlp.gate.bias [E]; not GLM's
  // e_score_correction_bias), and per-expert biases on gate/up ([I]) and down ([hidden]).
  bool router_bias = false;
  bool expert_bias = false;
  // gpt-oss's clamped SwiGLU: gate = min(gate, limit); up = clamp(up, -limit, limit);
  // out = (up + 1) * gate * sigmoid(alpha * gate). Plain SwiGLU when absent.
  std::optional<double> swiglu_limit;
  double swiglu_alpha = 1.702;
  // The multi-token-prediction layers (num_nextn_predict_layers) of GLM-4.5, DeepSeek-V3
  // and GLM-5, stored after the last decoder layer as model.layers.{num_hidden_layers + i}:
  // read only by `--speculative mtp` (exec/arch/mtp_head.h).
  std::int64_t nextn_predict_layers = 0;
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
// "model.layers.L.mlp.gate.e_score_correction_bias" : [E] (kSigmoid routing).
std::string moe_router_bias_name(const MoeConfig &moe, std::int64_t layer);
// "model.layers.L.mlp.shared_experts.gate_proj.weight" and the like.
std::string moe_shared_name(const MoeConfig &moe, std::int64_t layer, ExpertMatrix which);
// "model.layers.L.mlp.gate.bias" : [E] (gpt-oss's router logit bias).
std::string moe_router_logit_bias_name(const MoeConfig &moe, std::int64_t layer);
// "model.layers.L.mlp.experts.X.gate_proj.bias" : [I] (up: [I], down: [hidden]).
std::string moe_expert_bias_name(const MoeConfig &moe, std::int64_t layer, std::int64_t expert,
                                 ExpertMatrix which);
// "model.layers.L.self_attn.sinks" : [num_heads] (gpt-oss's attention sinks).
std::string attention_sinks_name(std::int64_t layer);

}  // namespace keel
