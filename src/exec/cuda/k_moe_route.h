// Mixture-of-experts routing rules beside k_moe.h's softmax top-k (formats/moe_config.h's
// Scoring), in k_moe_route.cu, each against its CPU definition in exec/arch/moe_ffn.h:
//   kGroupedSigmoid (GLM-4.5, "noaux_tc"; route_token_grouped_sigmoid), in double as the
//     CPU computes it: s = sigmoid(logit); choice = s + bias (the e_score_correction_bias:
//     it chooses, it does not weight); with topk_group < n_group only the topk_group
//     groups of the best worth (the sum of a group's two best choices, ties to the lower
//     group) keep their choices, the others' become 0; the k best choices win (ties to the
//     lower index); weights s, divided by their sum (+1e-20) with norm_topk_prob, times
//     scale (routed_scaling_factor).
//   kTopkSoftmax (gpt-oss): z = logit + bias (the router's logit bias, added in f32 as a
//     linear layer's bias); the k largest z win (ties to the lower index); weights = the
//     softmax over those k only.
#pragma once

#include <cstdint>

#include "exec/cuda/k_moe.h"

namespace keel::cuda {

enum class MoeRouteRule : int { kSoftmax, kGroupedSigmoid, kTopkSoftmax };
constexpr int kMoeMaxGroups = 32;

struct MoeRouteParams {
  MoeRouteRule rule = MoeRouteRule::kSoftmax;
  int E = 0, k = 0;
  bool norm_topk_prob = true;
  int n_group = 1, topk_group = 1;  // kGroupedSigmoid; n_group <= kMoeMaxGroups divides E
  double scale = 1.0;               // kGroupedSigmoid: routed_scaling_factor
  const float *bias = nullptr;      // [E] f32 (device), nullable: see the rules above
};

// logits [T, E] f32; ids [T, k] i32 best first; weights [T, k] f32. kSoftmax goes to
// k_moe.h's launcher; the other rules run one warp per token.
void launch_moe_route(StreamRef s, const float *logits, int T, const MoeRouteParams &p,
                      std::int32_t *ids, float *weights);

}  // namespace keel::cuda
