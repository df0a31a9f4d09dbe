// The multi-head latent attention part of a model's configuration (DeepSeek-V3 / R1,
// Kimi K2: model_type deepseek_v3; GLM-5: glm_moe_dsa, which adds DeepSeek Sparse
// Attention's indexer), and the HF names of its tensors.
//
// A layer's attention (HF names under model.layers.L.self_attn.):
//   q_a_proj [q_lora, hidden], q_a_layernorm [q_lora], q_b_proj [H (nope + rope), q_lora]
//     (or q_proj [H (nope + rope), hidden] when q_lora_rank is null)
//   kv_a_proj_with_mqa [kv_lora + rope, hidden], kv_a_layernorm [kv_lora],
//   kv_b_proj [H (nope + v), kv_lora], o_proj [hidden, H v]
// and for DSA, in each layer that runs its own selection, indexer.{wq_b [Hi Di, q_lora], wk [Di,
// hidden], k_norm.{weight,bias} [Di], weights_proj [Hi, hidden]}.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

struct MlaConfig {
  std::int64_t q_lora_rank = 0;  // 0: the query comes from q_proj directly
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_nope_head_dim = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t v_head_dim = 0;
  // Attention logits are q.k times this: (nope + rope)^-0.5, times yarn's
  // mscale(factor, mscale_all_dim)^2 when the rope is yarn-scaled (DeepSeek).
  double softmax_scale = 0;

  // DeepSeek Sparse Attention (glm_moe_dsa): each query attends only to the index_topk
  // earlier tokens its indexer scores highest. index_topk 0: dense attention.
  std::int64_t index_topk = 0;
  std::int64_t index_n_heads = 0;
  std::int64_t index_head_dim = 0;
  // Per layer: true where the layer reuses the selection of the last layer that ran its
  // indexer (indexer_types "shared"); empty or all false: every layer selects its own.
  std::vector<bool> index_shared;

  bool dsa() const { return index_topk > 0; }
  std::int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // One token's cache row for one layer: the normed latent, the roped key part, and with
  // DSA the indexer's key: [kv_lora | rope | index_head_dim].
  std::int64_t latent_values() const {
    return kv_lora_rank + qk_rope_head_dim + (dsa() ? index_head_dim : 0);
  }
  bool shared_selection(std::int64_t layer) const {
    return layer >= 0 && layer < static_cast<std::int64_t>(index_shared.size()) &&
           index_shared[static_cast<std::size_t>(layer)];
  }
};

// yarn's attention temperature: 1 for scale <= 1, else 0.1 mscale ln(scale) + 1.
double yarn_mscale(double scale, double mscale = 1.0);

// "model.layers.L.self_attn." + rest.
std::string mla_name(std::int64_t layer, const std::string &rest);

}  // namespace keel
