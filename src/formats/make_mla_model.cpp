#include "formats/make_mla_model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace keel {

void apply_mla_shape(ModelConfig &c, MoeConfig &m, const std::string &shape) {
  const bool glm = c.arch == Arch::kGlmMoeDsa;
  MlaConfig a;
  m.scoring = MoeConfig::Scoring::kSigmoid;
  m.norm_topk_prob = true;
  m.routed_scaling_factor = 2.5;
  c.rms_norm_eps = glm ? 1e-5 : 1e-6;
  c.rope_theta = glm ? 1000000.0 : 10000.0;
  c.tie_word_embeddings = false;
  if (shape == "tiny") {
    c.hidden_size = 64, c.intermediate_size = 96, c.num_layers = 3, c.num_heads = 4;
    c.vocab_size = 512, c.max_position_embeddings = 4096;
    a.q_lora_rank = 48, a.kv_lora_rank = 32, a.qk_nope_head_dim = 16, a.qk_rope_head_dim = 8,
    a.v_head_dim = 24;
    m.num_experts = 8, m.top_k = 2, m.expert_intermediate = 32, m.n_group = 2, m.topk_group = 1;
    if (glm) a.index_topk = 16, a.index_n_heads = 4, a.index_head_dim = 16;
  } else if (shape == "small") {
    // The released proportions at about a tenth of their width and depth.
    c.hidden_size = 512, c.intermediate_size = 1408, c.num_layers = 8, c.num_heads = 8;
    c.vocab_size = 32000, c.max_position_embeddings = 131072;
    a.q_lora_rank = 192, a.kv_lora_rank = 128, a.qk_nope_head_dim = 32, a.qk_rope_head_dim = 16,
    a.v_head_dim = 32;
    m.num_experts = 64, m.top_k = 8, m.expert_intermediate = 176, m.n_group = 8, m.topk_group = 4;
    if (glm)
      a.index_topk = 256, a.index_n_heads = 8, a.index_head_dim = 32, m.n_group = 1,
      m.topk_group = 1;
  } else if (shape == "deepseek-v3" && !glm) {  // DeepSeek-V3 / R1 671B
    c.hidden_size = 7168, c.intermediate_size = 18432, c.num_layers = 61, c.num_heads = 128;
    c.vocab_size = 129280, c.max_position_embeddings = 163840;
    a.q_lora_rank = 1536, a.kv_lora_rank = 512, a.qk_nope_head_dim = 128, a.qk_rope_head_dim = 64,
    a.v_head_dim = 128;
    m.num_experts = 256, m.top_k = 8, m.expert_intermediate = 2048, m.n_group = 8, m.topk_group = 4;
    c.rope_scaling.type = RopeScaling::Type::kYarn;
    c.rope_scaling.factor = 40, c.rope_scaling.original_max_position = 4096;
    c.rope_scaling.mscale = 1.0, c.rope_scaling.mscale_all_dim = 1.0;
    c.rope_scaling.attention_factor = 1.0;  // mscale / mscale_all_dim
  } else if (shape == "glm-5" && glm) {     // GLM-5 744B
    c.hidden_size = 6144, c.intermediate_size = 12288, c.num_layers = 78, c.num_heads = 64;
    c.vocab_size = 154880, c.max_position_embeddings = 202752;
    a.q_lora_rank = 2048, a.kv_lora_rank = 512, a.qk_nope_head_dim = 192, a.qk_rope_head_dim = 64,
    a.v_head_dim = 256;
    m.num_experts = 256, m.top_k = 8, m.expert_intermediate = 2048, m.n_group = 1, m.topk_group = 1;
    a.index_topk = 2048, a.index_n_heads = 32, a.index_head_dim = 128;
  } else {
    throw Error(ErrorCode::kInvalidArgument, std::string("--shape: expected tiny, small or ") +
                                                 (glm ? "glm-5" : "deepseek-v3") + " for " +
                                                 arch_name(c.arch) + ", got " + shape);
  }
  m.shared_intermediate = m.expert_intermediate;  // n_shared_experts = 1
  c.mla = a;
  c.kv_layout = KvLayout::kLatent;
  c.rope_style = RopeStyle::kInterleaved;
}

void finish_mla_config(ModelConfig &c, const std::string &shape) {
  MlaConfig &a = *c.mla;
  c.head_dim = a.qk_head_dim();
  c.num_kv_heads = c.num_heads;
  c.partial_rotary_factor = 1.0;
  const double ms = c.rope_scaling.mscale_all_dim
                        ? yarn_mscale(c.rope_scaling.factor, *c.rope_scaling.mscale_all_dim)
                        : 1.0;
  a.softmax_scale = ms * ms / std::sqrt(static_cast<double>(c.head_dim));
  // Dense first layers (first_k_dense_replace: 1 in tiny, 3 as released), at least one
  // MoE layer.
  const std::int64_t dense =
      std::min<std::int64_t>(shape == "tiny" ? 1 : 3, std::max<std::int64_t>(c.num_layers - 1, 0));
  if (c.moe)
    for (std::int64_t l = 0; l < dense && l < c.num_layers; ++l)
      c.moe->sparse_layers[static_cast<std::size_t>(l)] = false;
  // GLM-5.2's cross-layer sharing in miniature: every second layer after the first reuses
  // the selection before it.
  a.index_shared.clear();
  if (a.dsa())
    for (std::int64_t l = 0; l < c.num_layers; ++l) a.index_shared.push_back(l % 2 == 1);
}

void mla_config_json(const ModelConfig &c, nlohmann::ordered_json &j) {
  const MlaConfig &a = *c.mla;
  const MoeConfig &m = *c.moe;
  std::int64_t dense = 0;
  while (dense < c.num_layers && !m.sparse(dense)) ++dense;
  j["q_lora_rank"] = a.q_lora_rank > 0 ? nlohmann::ordered_json(a.q_lora_rank) : nullptr;
  j["kv_lora_rank"] = a.kv_lora_rank;
  j["qk_nope_head_dim"] = a.qk_nope_head_dim;
  j["qk_rope_head_dim"] = a.qk_rope_head_dim;
  j["v_head_dim"] = a.v_head_dim;
  j["head_dim"] = a.qk_rope_head_dim;  // as transformers saves it
  if (c.arch == Arch::kDeepseekV3) j["rope_interleave"] = c.rope_style == RopeStyle::kInterleaved;
  j["n_routed_experts"] = m.num_experts;
  j["num_experts_per_tok"] = m.top_k;
  j["moe_intermediate_size"] = m.expert_intermediate;
  j["n_shared_experts"] = m.shared_intermediate / m.expert_intermediate;
  j["first_k_dense_replace"] = dense;
  j["n_group"] = m.n_group;
  j["topk_group"] = m.topk_group;
  j["routed_scaling_factor"] = m.routed_scaling_factor;
  j["norm_topk_prob"] = m.norm_topk_prob;
  j["scoring_func"] = "sigmoid";
  j["topk_method"] = "noaux_tc";
  j["num_nextn_predict_layers"] = m.nextn_predict_layers;  // written after the layers
  if (a.dsa()) {
    j["index_topk"] = a.index_topk;
    j["index_n_heads"] = a.index_n_heads;
    j["index_head_dim"] = a.index_head_dim;
    nlohmann::ordered_json types = nlohmann::ordered_json::array();
    for (std::int64_t l = 0; l < c.num_layers; ++l)
      types.push_back(a.shared_selection(l) ? "shared" : "full");
    j["indexer_types"] = types;
  }
  if (c.rope_scaling.type == RopeScaling::Type::kYarn) {
    auto &rs = j["rope_scaling"];
    if (c.rope_scaling.mscale) rs["mscale"] = *c.rope_scaling.mscale;
    if (c.rope_scaling.mscale_all_dim) rs["mscale_all_dim"] = *c.rope_scaling.mscale_all_dim;
  }
}

}  // namespace keel
