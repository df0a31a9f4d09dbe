// Mixture-of-experts kernels (Qwen3-MoE, Mixtral): routing, grouping tokens by expert,
// the experts' SwiGLU MLPs for few tokens, and the weighted sum back in token order.
// exec/arch/moe_ffn.h is the CPU definition every kernel here is tested against.
//
// One layer's MoE block on the device (cuda_runner_moe.cpp):
//   logits = router(h)                       (run_linear, f32 out)           [T, E]
//   launch_moe_route:  ids, weights           top-k by softmax               [T, k]
//   launch_moe_group:  a counting sort of the T*k slots by expert: each expert's group
//                      of rows (start padded to `align`), the token of every grouped row,
//                      the grouped row of every slot, the nonempty experts
//   experts:  few tokens -- launch_moe_gate_up_gemv + launch_moe_down_gemv read only the
//             chosen experts' weights, the expert ids read from device memory (a fixed
//             launch shape, so CUDA graphs capture it);
//             many -- launch_moe_gather, launch_moe_grouped_gemm (gate|up), launch_moe_act,
//             launch_moe_grouped_gemm (down): sized from device memory (or, with
//             CudaKernelChoices::moe_grouped_gemm off, per-expert cuBLASLt GEMMs after the
//             host reads the group starts)
//   (decode steps of <= 2 rows on the fused path: k_moe_decode.h instead of all of this)
//   launch_moe_combine: y[t] = sum_j weight[t, j] * out[row of (t, j)]  (expert order)
#pragma once

#include <cstdint>

#include "exec/cuda/kernels.h"

namespace keel::cuda {

constexpr int kMoeMaxExperts = 256;
constexpr int kMoeMaxTopK = 16;

// The experts' activation beyond plain SwiGLU (gpt-oss): per-expert biases added to the
// gate/up projections before the activation and to the down projection before the routing
// weight, and the clamped SwiGLU. The defaults are Qwen3-MoE / Mixtral's plain SwiGLU.
struct MoeExpertAct {
  const float *gate_up_bias = nullptr;  // [E, 2 I] f32: expert e's gate bias, then its up bias
  const float *down_bias = nullptr;     // [E, H] f32
  // > 0: gate = min(gate, limit); up = clamp(up, -limit, limit);
  // act = (up + 1) * gate * sigmoid(alpha * gate). Else act = silu(gate) * up.
  float limit = 0.0f;
  float alpha = 1.702f;
};

// Where launch_moe_group writes its results inside one i32 buffer of
// moe_group_ints(E, S, rows_cap) entries. S = T * k slots; rows_cap = moe_rows_cap(S, E, align).
struct MoeGroupLayout {
  std::int64_t E = 0, S = 0, rows_cap = 0;
  // [E + 1] start row of each expert's group (padded to align); [E] = total rows
  __host__ __device__ std::int64_t starts() const { return 0; }
  __host__ __device__ std::int64_t counts() const {
    return E + 1;
  }  // [E] slots routed to each expert
  __host__ __device__ std::int64_t active() const {
    return 2 * E + 1;
  }  // [E] nonempty experts, ascending
  __host__ __device__ std::int64_t n_active() const { return 3 * E + 1; }  // [1]
  __host__ __device__ std::int64_t row_token() const {
    return 3 * E + 2;
  }  // [rows_cap] token or -1 (padding)
  __host__ __device__ std::int64_t slot_row() const {
    return 3 * E + 2 + rows_cap;
  }  // [S] grouped row of slot
  __host__ __device__ std::int64_t ints() const { return 3 * E + 2 + rows_cap + S; }
};
inline std::int64_t moe_rows_cap(std::int64_t S, std::int64_t E, int align) {
  return S + E * (align - 1);
}

// Per token t: softmax over logits[t, :E], the k largest (ties to the lower index, as
// exec/arch/moe_ffn.h's route_token), their probabilities renormalized to sum to one when
// norm_topk_prob. logits [T, E] f32; ids [T, k] i32 best first; weights [T, k] f32.
// E <= kMoeMaxExperts, k <= min(E, kMoeMaxTopK).
void launch_moe_route(StreamRef s, const float *logits, int T, int E, int k, bool norm_topk_prob,
                      std::int32_t *ids, float *weights);

// A stable counting sort of the S slots (ids [S], slot = t * k + j) by expert, in one
// block: groups in expert order, each group's rows in slot order, each group's start
// padded to a multiple of `align` (its padding rows get token -1). out: the layout above
// (k tells slot -> token).
void launch_moe_group(StreamRef s, const std::int32_t *ids, int S, int E, int k, int align,
                      std::int64_t rows_cap, std::int32_t *out);

// Few tokens: act[r, i] = silu(gate_e[i] . x[token(r)]) * (up_e[i] . x[token(r)]) for every
// grouped row r of every nonempty expert e (with ea's gate/up biases and clamp). x [T, H]
// bf16; gate_up [E, 2I, H] bf16 (gate rows then up rows per expert); act [rows_cap, I]
// bf16. max_active: an upper bound of the nonempty experts (min(E, S)): the grid's size,
// fixed for a graph.
void launch_moe_gate_up_gemv(StreamRef s, const bf16 *x, const bf16 *gate_up, int H, int I,
                             const std::int32_t *group, const MoeGroupLayout &layout,
                             int max_active, bf16 *act, const MoeExpertAct &ea = {});
// Many tokens: act[r, i] = activation(gu[r, i] + gate bias, gu[r, I + i] + up bias) of
// expert(r), for the grouped rows below the total (gu [rows_cap, 2I] bf16, the GEMMs'
// output; act [rows_cap, I] bf16). launch_swiglu does the plain case without biases.
void launch_moe_act(StreamRef s, const bf16 *gu, int I, const std::int32_t *group,
                    const MoeGroupLayout &layout, const MoeExpertAct &ea, bf16 *act);
// Slot-ordered experts (low-bit weights, whose GEMV takes one row per (token, expert)
// slot: k_mxfp4.h's launch_gemv_mxfp4_experts): act[s, i] = activation(gu[s, i] + gate
// bias, gu[s, I + i] + up bias) of expert ids[s], for the S slots. gu [S, 2I] f32 (the
// GEMV's f32 sums, as the bf16 gather-GEMV activates them); act [S, I] bf16.
void launch_moe_slot_act(StreamRef s, const float *gu, int I, const std::int32_t *ids, int S,
                         const MoeExpertAct &ea, bf16 *act);
// out[r, c] = down_e[c] . act[r] for the same rows (no bias: launch_moe_combine adds it).
// down [E, H, I] bf16; out [rows_cap, H] bf16.
void launch_moe_down_gemv(StreamRef s, const bf16 *act, const bf16 *down, int H, int I,
                          const std::int32_t *group, const MoeGroupLayout &layout, int max_active,
                          bf16 *out);

// Many tokens: xg[r] = x[token(r)] for every grouped row (zeros for padding rows and rows
// past the total). x [T, H] bf16; xg [rows_cap, H] bf16.
void launch_moe_gather(StreamRef s, const bf16 *x, int H, const std::int32_t *group,
                       const MoeGroupLayout &layout, bf16 *xg);

// Many tokens, one launch per matrix: C[r] = A[r] . W_e^T for every grouped row r below the
// total, e the expert whose group holds r. The groups must be padded to tile_rows (16, 32
// or 64: launch_moe_group's align; small tiles for decode-size steps, where each expert
// has a few rows) and rows_cap be a multiple of it; rows past a group's count are computed
// from their (zero) inputs. A [rows_cap, K] bf16 (launch_moe_gather's xg, or the
// activations); W [E, N, K] bf16; C [rows_cap, N] bf16. Needs N % 8 == 0, K % 32 == 0
// (moe_grouped_gemm_supported). The sizes come from device memory: no host wait.
// Low-bit experts: k_moe_grouped_lowbit.h.
constexpr int kMoeGemmRows = 64;     // the largest row tile
constexpr int kMoeGemmMinRows = 16;  // the smallest
bool moe_gemm_rows_valid(int tile_rows);
bool moe_grouped_gemm_supported(int N, int K);
void launch_moe_grouped_gemm(StreamRef s, const bf16 *A, const bf16 *W, int N, int K,
                             const std::int32_t *group, const MoeGroupLayout &layout, bf16 *C,
                             int tile_rows = kMoeGemmRows);
// The row tile for a step of S slots over E experts: the smallest of 16 / 32 / 64 that
// holds the mean group (S / E rows), 64 from there on.
inline int moe_gemm_tile_rows(std::int64_t S, std::int64_t E) {
  const std::int64_t mean = (S + E - 1) / (E > 0 ? E : 1);
  return mean <= 16 ? 16 : mean <= 32 ? 32 : 64;
}
// rows_cap for groups padded to tile_rows, in whole tiles.
inline std::int64_t moe_gemm_rows_cap(std::int64_t S, std::int64_t E, int tile_rows) {
  const std::int64_t rows = moe_rows_cap(S, E, tile_rows);
  return (rows + tile_rows - 1) / tile_rows * tile_rows;
}

// y[t, c] = bf16(sum over j of weights[t, j] * (out[row(t, j), c] + down_bias[e_j, c])),
// the k terms added in ascending expert order (as the CPU block adds them). ids, weights
// [T, k]; out [rows_cap, H] bf16; down_bias [E, H] f32 or null; y [T, H] bf16. A null
// group: out is slot-ordered (row of slot t k + j is that slot), as the low-bit path writes.
void launch_moe_combine(StreamRef s, const bf16 *out, const std::int32_t *ids, const float *weights,
                        int T, int k, int H, const std::int32_t *group,
                        const MoeGroupLayout &layout, bf16 *y, const float *down_bias = nullptr);

}  // namespace keel::cuda
