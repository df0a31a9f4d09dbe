// One token's softmax top-k routing by one warp (Qwen3-MoE, Mixtral): shared by the
// routing kernel (k_moe_route.cu) and the fused MoE decode's router (k_moe_decode.cu).
#pragma once

#include <climits>
#include <cstdint>

#include "exec/cuda/k_moe.h"

namespace keel::cuda {

constexpr int kMoeLogitsPerLane = kMoeMaxExperts / 32;  // logits each lane holds

// Softmax over the E logits `load(e)` gives, then the k largest, ties to the lower expert
// index; a NaN logit never wins, nor poisons the sum. With `norm` the k weights are
// renormalized to sum to one. Lane 0 writes ids[0..k) and weights[0..k).
template <class Load>
__device__ inline void warp_softmax_topk(Load load, int E, int k, bool norm, std::int32_t *ids,
                                         float *weights) {
  const int lane = threadIdx.x % 32;
  float v[kMoeLogitsPerLane];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kMoeLogitsPerLane; ++i) {
    const int e = lane + 32 * i;
    float x = e < E ? load(e) : -INFINITY;
    if (isnan(x)) x = -INFINITY;
    v[i] = x;
    mx = fmaxf(mx, x);
  }
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (mx == -INFINITY) mx = 0.0f;
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kMoeLogitsPerLane; ++i) sum += __expf(v[i] - mx);
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  unsigned taken = 0;  // bit i: expert lane + 32 i already chosen
  float p[kMoeMaxTopK];
  int chosen[kMoeMaxTopK];
  float chosen_sum = 0.0f;
  for (int j = 0; j < k; ++j) {
    // The largest remaining logit, ties to the lower expert index.
    float bv = -INFINITY;
    int bi = INT_MAX;
#pragma unroll
    for (int i = 0; i < kMoeLogitsPerLane; ++i) {
      const int e = lane + 32 * i;
      if (e >= E || (taken >> i & 1u)) continue;
      if (bi == INT_MAX || v[i] > bv) bv = v[i], bi = e;  // e ascends within a lane
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (oi != INT_MAX && (bi == INT_MAX || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
    }
    if (bi % 32 == lane) taken |= 1u << (bi / 32);
    chosen[j] = bi;
    p[j] = __expf(bv - mx) / sum;
    chosen_sum += p[j];
  }
  if (lane == 0)
    for (int j = 0; j < k; ++j) {
      ids[j] = chosen[j];
      weights[j] = norm ? p[j] / chosen_sum : p[j];
    }
}

}  // namespace keel::cuda
