// A mixture-of-experts block for decode steps of few token rows (T <= kMoeDecodeMaxT) in
// three launches instead of seven (norm, router GEMM, route, group, gate_up, down, combine
// + the next norm's residual add), for the fused decode path (cuda_runner_fused.cpp):
//
//   launch_moe_decode_router:   normed = rmsnorm(residual) * norm_weight (bf16, as
//                               launch_add_rmsnorm rounds), logits = router . normed (f32),
//                               and, in the grid's last block to finish, softmax top-k per
//                               token (as launch_moe_route: ties to the lower expert, NaN
//                               never wins, norm_topk_prob) -> ids, weights [T, k]
//   launch_moe_decode_gate_up:  act[t k + j] = activation(gate_e . normed[t] + bias,
//                               up_e . normed[t] + bias) for each slot (t, j), e = ids[t, j]
//   launch_moe_decode_down:     residual[t, c] += f32(bf16(sum over j, ascending expert, of
//                               weights[t, j] * (bf16(down_e[c] . act[t k + j]) + bias)))
//
// No grouping: at a few tokens two slots rarely share an expert, so each slot reads its
// expert's rows itself. Same arithmetic as the unfused kernels (k_moe.h) up to the order
// of the dot products' sums. Every kernel may be launched as a programmatic dependent
// (Hopper PDL): it waits for the kernel before it before reading anything.
#pragma once

#include <cstdint>

#include "exec/cuda/k_moe.h"

namespace keel::cuda {

constexpr int kMoeDecodeMaxT = 4;

struct MoeDecodeParams {
  int T = 0, H = 0, E = 0, k = 0, I = 0;  // tokens, hidden, experts, top-k, expert width
  float *residual = nullptr;              // [T, H] f32: read by the router, added to by down
  const bf16 *norm_weight = nullptr;      // [H] post-attention norm
  float eps = 1e-6f;
  const bf16 *router = nullptr;        // [E, H]
  const float *router_bias = nullptr;  // [E] f32 added to the logits, nullable
  bool norm_topk_prob = true;
  const bf16 *gate_up = nullptr;  // [E, 2I, H]: each expert's gate rows, then its up rows
  const bf16 *down = nullptr;     // [E, H, I]
  MoeExpertAct act_fn;            // biases, clamped SwiGLU
  // Scratch (device): normed [T, H] bf16, logits [T, E] f32, ids [T, k] i32, weights
  // [T, k] f32, act [T k, I] bf16, counter: one u32, zero before the first launch (the
  // router's last block resets it, so graph replays need no reset).
  bf16 *normed = nullptr;
  float *logits = nullptr;
  std::int32_t *ids = nullptr;
  float *weights = nullptr;
  bf16 *act = nullptr;
  unsigned *counter = nullptr;
  bool pdl = false;
};

// True when the three kernels run this shape: 1 <= T <= kMoeDecodeMaxT, H and I multiples
// of 8, T H and k I bf16 staged in 48 KB of shared memory each, E <= kMoeMaxExperts, k <=
// kMoeMaxTopK.
bool moe_decode_supported(int T, int H, int E, int k, int I);
void launch_moe_decode_router(StreamRef s, const MoeDecodeParams &p);
void launch_moe_decode_gate_up(StreamRef s, const MoeDecodeParams &p);
void launch_moe_decode_down(StreamRef s, const MoeDecodeParams &p);

}  // namespace keel::cuda
