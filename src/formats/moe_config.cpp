#include "formats/moe_config.h"

namespace keel {

namespace {

std::string block_prefix(const MoeConfig &moe, std::int64_t layer) {
  return "model.layers." + std::to_string(layer) +
         (moe.naming == MoeConfig::Naming::kMixtral ? ".block_sparse_moe." : ".mlp.");
}

}  // namespace

std::string moe_router_name(const MoeConfig &moe, std::int64_t layer) {
  return block_prefix(moe, layer) + "gate.weight";
}

std::string moe_router_bias_name(const MoeConfig &moe, std::int64_t layer) {
  return block_prefix(moe, layer) + "gate.e_score_correction_bias";
}

std::string moe_shared_name(const MoeConfig &moe, std::int64_t layer, ExpertMatrix which) {
  const char *m = which == ExpertMatrix::kGate ? "gate_proj"
                  : which == ExpertMatrix::kUp ? "up_proj"
                                               : "down_proj";
  return block_prefix(moe, layer) + "shared_experts." + m + ".weight";
}

std::string moe_router_logit_bias_name(const MoeConfig &moe, std::int64_t layer) {
  return block_prefix(moe, layer) + "gate.bias";
}

std::string moe_expert_bias_name(const MoeConfig &moe, std::int64_t layer, std::int64_t expert,
                                 ExpertMatrix which) {
  std::string name = moe_expert_name(moe, layer, expert, which);
  return name.replace(name.size() - std::string("weight").size(), std::string::npos, "bias");
}

std::string attention_sinks_name(std::int64_t layer) {
  return "model.layers." + std::to_string(layer) + ".self_attn.sinks";
}

std::string moe_expert_name(const MoeConfig &moe, std::int64_t layer, std::int64_t expert,
                            ExpertMatrix which) {
  const bool mixtral = moe.naming == MoeConfig::Naming::kMixtral;
  const char *m = nullptr;
  switch (which) {
    case ExpertMatrix::kGate:
      m = mixtral ? "w1" : "gate_proj";
      break;
    case ExpertMatrix::kUp:
      m = mixtral ? "w3" : "up_proj";
      break;
    case ExpertMatrix::kDown:
      m = mixtral ? "w2" : "down_proj";
      break;
  }
  return block_prefix(moe, layer) + "experts." + std::to_string(expert) + "." + m + ".weight";
}

}  // namespace keel
