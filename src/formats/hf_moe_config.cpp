#include "formats/hf_moe_config.h"

#include "core/error.h"
#include "formats/config_fields.h"

namespace keel {

namespace {

using nlohmann::json;

using config_fields::fail;
using config_fields::opt_bool;
using config_fields::opt_int;
using config_fields::opt_num;
using config_fields::req_int;

// Options of related architectures that change routing; a config that sets them to
// anything but the softmax top-k keel computes is refused rather than run wrongly.
void refuse_other_routing(const json &j, const std::string &origin) {
  if (auto it = j.find("scoring_func"); it != j.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>() != "softmax")
      throw Error(ErrorCode::kUnsupported,
                  origin + ": scoring_func " + it->dump() + " is not supported (softmax only)");
  }
  if (auto it = j.find("topk_method"); it != j.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>() != "greedy")
      throw Error(ErrorCode::kUnsupported,
                  origin + ": topk_method " + it->dump() + " is not supported (greedy only)");
  }
  for (const char *key : {"shared_expert_intermediate_size", "n_shared_experts"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_number_integer()) fail(origin, std::string(key) + ": expected an integer");
    if (it->get<std::int64_t>() != 0)
      throw Error(ErrorCode::kUnsupported,
                  origin + ": " + key + ": shared experts are not supported for this model_type");
  }
}

// GLM-4.5 routes by sigmoid with a score-correction bias over groups ("noaux_tc"); a
// config naming another scoring or top-k method is refused, naming the field.
void refuse_other_glm_routing(const json &j, const std::string &origin) {
  if (auto it = j.find("scoring_func"); it != j.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>() != "sigmoid")
      throw Error(ErrorCode::kUnsupported,
                  origin + ": scoring_func " + it->dump() + " is not supported (sigmoid only)");
  }
  if (auto it = j.find("topk_method"); it != j.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>() != "noaux_tc")
      throw Error(ErrorCode::kUnsupported,
                  origin + ": topk_method " + it->dump() + " is not supported (noaux_tc only)");
  }
}

MoeConfig parse_glm4_moe(const json &j, const ModelConfig &c, const std::string &origin) {
  refuse_other_glm_routing(j, origin);
  MoeConfig m;
  m.naming = MoeConfig::Naming::kQwen;
  m.scoring = MoeConfig::Scoring::kSigmoid;
  m.num_experts = req_int(j, "n_routed_experts", origin);
  m.top_k = req_int(j, "num_experts_per_tok", origin);
  m.expert_intermediate = req_int(j, "moe_intermediate_size", origin);
  m.norm_topk_prob = opt_bool(j, "norm_topk_prob", origin).value_or(true);
  m.n_group = opt_int(j, "n_group", origin).value_or(1);
  m.topk_group = opt_int(j, "topk_group", origin).value_or(1);
  m.routed_scaling_factor = opt_num(j, "routed_scaling_factor", origin).value_or(1.0);
  const std::int64_t shared = opt_int(j, "n_shared_experts", origin).value_or(1);
  if (shared < 0 || shared > 64)
    fail(origin, "n_shared_experts: " + std::to_string(shared) + " is out of range");
  m.shared_intermediate = shared * m.expert_intermediate;
  m.nextn_predict_layers = opt_int(j, "num_nextn_predict_layers", origin).value_or(0);
  if (m.nextn_predict_layers < 0) fail(origin, "num_nextn_predict_layers: must not be negative");
  const std::int64_t dense = opt_int(j, "first_k_dense_replace", origin).value_or(1);
  if (dense < 0) fail(origin, "first_k_dense_replace: must not be negative");
  const std::int64_t L = std::max<std::int64_t>(c.num_layers, 0);
  m.sparse_layers.assign(static_cast<std::size_t>(L), false);
  for (std::int64_t l = dense; l < L; ++l) m.sparse_layers[static_cast<std::size_t>(l)] = true;
  return m;
}

// gpt-oss: every layer is sparse; experts of intermediate_size with biases, routed by a
// biased router whose top-k logits are softmaxed; the clamped SwiGLU with swiglu_limit.
// The released config says both experts_per_token and num_experts_per_tok.
MoeConfig parse_gpt_oss(const json &j, const ModelConfig &c, const std::string &origin) {
  refuse_other_routing(j, origin);
  MoeConfig m;
  m.naming = MoeConfig::Naming::kQwen;
  m.scoring = MoeConfig::Scoring::kTopkSoftmax;
  m.num_experts = req_int(j, "num_local_experts", origin);
  if (j.contains("num_experts_per_tok") || !j.contains("experts_per_token")) {
    m.top_k = req_int(j, "num_experts_per_tok", origin);
    if (j.contains("experts_per_token") && req_int(j, "experts_per_token", origin) != m.top_k)
      fail(origin, "experts_per_token: differs from num_experts_per_tok");
  } else {
    m.top_k = req_int(j, "experts_per_token", origin);
  }
  m.expert_intermediate = c.intermediate_size;
  m.norm_topk_prob = true;  // the softmax over the chosen k sums to one
  m.router_bias = true;
  m.expert_bias = true;
  auto limit = j.find("swiglu_limit");
  if (limit == j.end() || limit->is_null()) {
    m.swiglu_limit = 7.0;  // transformers' GptOssConfig default
  } else {
    if (!limit->is_number()) fail(origin, "swiglu_limit: expected a number");
    m.swiglu_limit = limit->get<double>();
  }
  m.swiglu_alpha = opt_num(j, "swiglu_alpha", origin).value_or(1.702);
  m.sparse_layers.assign(static_cast<std::size_t>(std::max<std::int64_t>(c.num_layers, 0)), true);
  return m;
}

const char *experts_field(const ModelConfig &c) {
  switch (c.arch) {
    case Arch::kGptOss:
    case Arch::kMixtral:
      return "num_local_experts";
    case Arch::kGlm4Moe:
    case Arch::kDeepseekV3:
    case Arch::kGlmMoeDsa:
      return "n_routed_experts";
    default:
      return "num_experts";
  }
}

}  // namespace

void parse_hf_moe(const json &j, ModelConfig &c, const std::string &origin) {
  if (c.arch == Arch::kGlm4Moe || c.arch == Arch::kDeepseekV3 || c.arch == Arch::kGlmMoeDsa) {
    // DeepSeek-V3 and GLM-5 route as GLM-4.5 does (sigmoid, correction bias, groups).
    c.moe = parse_glm4_moe(j, c, origin);
    return;
  }
  if (c.arch == Arch::kGptOss) {
    c.moe = parse_gpt_oss(j, c, origin);
    return;
  }
  MoeConfig m;
  refuse_other_routing(j, origin);
  if (c.arch == Arch::kMixtral) {
    m.naming = MoeConfig::Naming::kMixtral;
    m.num_experts = req_int(j, "num_local_experts", origin);
    m.top_k = req_int(j, "num_experts_per_tok", origin);
    m.expert_intermediate = c.intermediate_size;
    m.norm_topk_prob = true;
    m.sparse_layers.assign(static_cast<std::size_t>(std::max<std::int64_t>(c.num_layers, 0)), true);
  } else if (c.arch == Arch::kQwen3Moe) {
    m.naming = MoeConfig::Naming::kQwen;
    // The released configs say num_experts; transformers 5 saves num_local_experts.
    const bool v5_name = !j.contains("num_experts") && j.contains("num_local_experts");
    m.num_experts = req_int(j, v5_name ? "num_local_experts" : "num_experts", origin);
    m.top_k = req_int(j, "num_experts_per_tok", origin);
    m.expert_intermediate = req_int(j, "moe_intermediate_size", origin);
    m.norm_topk_prob = opt_bool(j, "norm_topk_prob", origin).value_or(false);
    const std::int64_t step = opt_int(j, "decoder_sparse_step", origin).value_or(1);
    if (step <= 0) fail(origin, "decoder_sparse_step: must be positive");
    const std::int64_t L = std::max<std::int64_t>(c.num_layers, 0);
    m.sparse_layers.assign(static_cast<std::size_t>(L), false);
    for (std::int64_t l = 0; l < L; ++l)
      m.sparse_layers[static_cast<std::size_t>(l)] = m.num_experts > 0 && (l + 1) % step == 0;
    if (auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null()) {
      if (!it->is_array()) fail(origin, "mlp_only_layers: expected a list of layer indices");
      for (const auto &v : *it) {
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= L)
          fail(origin, "mlp_only_layers: " + v.dump() + " is not a layer index");
        m.sparse_layers[static_cast<std::size_t>(v.get<std::int64_t>())] = false;
      }
    }
  } else {
    return;
  }
  c.moe = m;
}

void validate_moe(const ModelConfig &c, const std::string &origin) {
  if (!c.moe) return;
  const MoeConfig &m = *c.moe;
  const char *experts = experts_field(c);
  if (m.num_experts <= 0 || m.num_experts > 4096)
    fail(origin, std::string(experts) + ": " + std::to_string(m.num_experts) + " is out of range");
  if (m.top_k <= 0 || m.top_k > m.num_experts)
    fail(origin,
         "num_experts_per_tok: " + std::to_string(m.top_k) + " is not in [1, " + experts + "]");
  if (m.expert_intermediate <= 0 || m.expert_intermediate > (std::int64_t{1} << 24))
    fail(origin, std::string(m.naming == MoeConfig::Naming::kMixtral || c.arch == Arch::kGptOss
                                 ? "intermediate_size"
                                 : "moe_intermediate_size") +
                     ": " + std::to_string(m.expert_intermediate) + " is out of range");
  if (static_cast<std::int64_t>(m.sparse_layers.size()) != c.num_layers)
    fail(origin, "the MoE layer list does not cover num_hidden_layers");
  if (m.n_group <= 0 || m.num_experts % m.n_group != 0)
    fail(origin, "n_group: " + std::to_string(m.n_group) + " does not divide " + experts);
  if (m.n_group > 1 && m.num_experts / m.n_group < 2)
    fail(origin, "n_group: groups of fewer than two experts cannot be scored");
  if (m.topk_group <= 0 || m.topk_group > m.n_group)
    fail(origin, "topk_group: " + std::to_string(m.topk_group) + " is not in [1, n_group]");
  if (m.top_k > m.topk_group * (m.num_experts / m.n_group))
    fail(origin, "num_experts_per_tok: " + std::to_string(m.top_k) +
                     " is more than the experts of topk_group groups");
  if (!(m.routed_scaling_factor > 0 && m.routed_scaling_factor < 1e6))
    fail(origin, "routed_scaling_factor: must be positive");
  if (m.swiglu_limit && !(*m.swiglu_limit > 0 && *m.swiglu_limit < 1e6))
    fail(origin, "swiglu_limit: must be positive");
  if (!(m.swiglu_alpha > 0 && m.swiglu_alpha < 1e6)) fail(origin, "swiglu_alpha: must be positive");
}

}  // namespace keel
