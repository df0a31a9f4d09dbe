// Mixture-of-experts expert kernels (k_moe.h): the gather-GEMVs for few tokens, which read
// only the nonempty experts' weights (each once per group of up to kTokens tokens), the
// row gather for the grouped GEMMs, and the weighted combine back to token order.
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_bf16x8.cuh"
#include "exec/cuda/k_moe.h"
#include "exec/cuda/k_moe_act.cuh"
#include "exec/cuda/k_reduce.cuh"

namespace keel::cuda {

namespace {

using reduce::warp_sum;

constexpr int kWarps = 8;   // output rows per block, one per warp
constexpr int kTokens = 8;  // grouped rows a warp keeps partial sums for

// Block (row chunk, g): the g-th nonempty expert e. Gate variant: rows i of gate_e and
// up_e (two weight rows, K = H), act = silu(g) * u. Down variant: row c of down_e (K = I).
template <bool GateUp>
__global__ void __launch_bounds__(kWarps * 32)
    moe_gemv_kernel(const bf16 *__restrict__ x, const bf16 *__restrict__ w, int N, int K,
                    const std::int32_t *__restrict__ group, MoeGroupLayout L, bf16 *__restrict__ y,
                    MoeExpertAct ea) {
  const int g = blockIdx.y;
  if (g >= group[L.n_active()]) return;
  const int e = group[L.active() + g];
  const int start = group[L.starts() + e], n = group[L.counts() + e];
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarps + threadIdx.x / 32;
  if (row >= N) return;
  const int kv = K / 8;  // 16-byte vectors per row
  // GateUp: w is [E, 2N, K] (gate rows, then up rows); down: [E, N, K].
  const uint4 *w0 =
      reinterpret_cast<const uint4 *>(w + (std::int64_t(e) * (GateUp ? 2 : 1) * N + row) * K);
  const uint4 *w1 = GateUp ? w0 + std::int64_t(N) * kv : w0;
  // Gate/up biases of this expert's row (zero when absent).
  float gb = 0.0f, ub = 0.0f;
  if (GateUp && ea.gate_up_bias) {
    gb = ea.gate_up_bias[std::int64_t(e) * 2 * N + row];
    ub = ea.gate_up_bias[std::int64_t(e) * 2 * N + N + row];
  }
  for (int t0 = 0; t0 < n; t0 += kTokens) {
    const int nt = min(kTokens, n - t0);
    const uint4 *xr[kTokens];
#pragma unroll
    for (int m = 0; m < kTokens; ++m) {
      const int r = start + t0 + min(m, nt - 1);
      // Gate/up read the token's input row; down reads the grouped row's activation.
      const std::int64_t src = GateUp ? group[L.row_token() + r] : r;
      xr[m] = reinterpret_cast<const uint4 *>(x + src * K);
    }
    float a0[kTokens], a1[kTokens];
#pragma unroll
    for (int m = 0; m < kTokens; ++m) a0[m] = a1[m] = 0.0f;
#pragma unroll 4
    for (int v = lane; v < kv; v += 32) {
      float f0[8], f1[8];
      bf16x8_to_float(__ldg(w0 + v), f0);
      if (GateUp) bf16x8_to_float(__ldg(w1 + v), f1);
#pragma unroll
      for (int m = 0; m < kTokens; ++m) {
        if (m >= nt) break;
        float xf[8];
        bf16x8_to_float(__ldg(xr[m] + v), xf);
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          a0[m] += f0[q] * xf[q];
          if (GateUp) a1[m] += f1[q] * xf[q];
        }
      }
    }
#pragma unroll
    for (int m = 0; m < kTokens; ++m) {
      if (m >= nt) break;
      const float gsum = warp_sum(a0[m]);
      const float usum = GateUp ? warp_sum(a1[m]) : 0.0f;
      if (lane == 0) {
        const float out = GateUp ? moe_expert_act(gsum + gb, usum + ub, ea) : gsum;
        y[std::int64_t(start + t0 + m) * N + row] = __float2bfloat16(out);
      }
    }
  }
}

__global__ void moe_gather_kernel(const bf16 *__restrict__ x, int H,
                                  const std::int32_t *__restrict__ group, MoeGroupLayout L,
                                  bf16 *__restrict__ xg) {
  const std::int64_t r = blockIdx.x;
  const int total = group[L.starts() + L.E];
  const int token = r < total ? group[L.row_token() + r] : -1;
  uint4 *dst = reinterpret_cast<uint4 *>(xg + r * H);
  const uint4 *src = reinterpret_cast<const uint4 *>(x + std::int64_t(token) * H);
  for (int v = threadIdx.x; v < H / 8; v += blockDim.x)
    dst[v] = token >= 0 ? __ldg(src + v) : make_uint4(0, 0, 0, 0);
}

// Grouped row r of the GEMM path -> act (one block per row; the row's expert is the last
// whose group starts at or before r).
__global__ void moe_act_kernel(const bf16 *__restrict__ gu, int I,
                               const std::int32_t *__restrict__ group, MoeGroupLayout L,
                               MoeExpertAct ea, bf16 *__restrict__ act) {
  const int r = blockIdx.x;
  if (r >= group[L.starts() + L.E]) return;
  int lo = 0, hi = static_cast<int>(L.E) - 1;  // starts[lo] <= r always (starts[0] = 0)
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (group[L.starts() + mid] <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  const std::int64_t e = lo;
  const bf16 *row = gu + std::int64_t(r) * 2 * I;
  for (int i = threadIdx.x; i < I; i += blockDim.x) {
    float g = __bfloat162float(row[i]), u = __bfloat162float(row[I + i]);
    if (ea.gate_up_bias) {
      g += ea.gate_up_bias[e * 2 * I + i];
      u += ea.gate_up_bias[e * 2 * I + I + i];
    }
    act[std::int64_t(r) * I + i] = __float2bfloat16(moe_expert_act(g, u, ea));
  }
}

// Slot s (token s / k, its expert ids[s]) of the slot-ordered path -> act (one block per
// slot); gu holds f32 gate|up sums, no bias yet.
__global__ void moe_slot_act_kernel(const float *__restrict__ gu, int I,
                                    const std::int32_t *__restrict__ ids, MoeExpertAct ea,
                                    bf16 *__restrict__ act) {
  const std::int64_t slot = blockIdx.x;
  const std::int64_t e = ids[slot];
  const float *row = gu + slot * 2 * I;
  for (int i = threadIdx.x; i < I; i += blockDim.x) {
    float g = row[i], u = row[I + i];
    if (ea.gate_up_bias) {
      g += ea.gate_up_bias[e * 2 * I + i];
      u += ea.gate_up_bias[e * 2 * I + I + i];
    }
    act[slot * I + i] = __float2bfloat16(moe_expert_act(g, u, ea));
  }
}

__global__ void moe_combine_kernel(const bf16 *__restrict__ out,
                                   const std::int32_t *__restrict__ ids,
                                   const float *__restrict__ weights, int k, int H,
                                   const std::int32_t *__restrict__ group, MoeGroupLayout L,
                                   bf16 *__restrict__ y, const float *__restrict__ down_bias) {
  __shared__ int rows[kMoeMaxTopK];
  __shared__ int experts[kMoeMaxTopK];
  __shared__ float wts[kMoeMaxTopK];
  const int t = blockIdx.x;
  if (threadIdx.x == 0) {
    // The token's k slots in ascending expert order (insertion sort; k is small).
    int ex[kMoeMaxTopK];
    for (int j = 0; j < k; ++j) {
      const std::int64_t slot = std::int64_t(t) * k + j;
      int at = j;
      const int e = ids[slot];
      while (at > 0 && ex[at - 1] > e) {
        ex[at] = ex[at - 1];
        rows[at] = rows[at - 1];
        wts[at] = wts[at - 1];
        --at;
      }
      ex[at] = e;
      rows[at] = group ? group[L.slot_row() + slot] : static_cast<int>(slot);
      wts[at] = weights[slot];
    }
    for (int j = 0; j < k; ++j) experts[j] = ex[j];
  }
  __syncthreads();
  for (int c = threadIdx.x; c < H; c += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < k; ++j) {
      float o = __bfloat162float(out[std::int64_t(rows[j]) * H + c]);
      if (down_bias) o += down_bias[std::int64_t(experts[j]) * H + c];
      acc += wts[j] * o;
    }
    y[std::int64_t(t) * H + c] = __float2bfloat16(acc);
  }
}

void check_layout(const MoeGroupLayout &L, const char *what) {
  if (L.E <= 0 || L.E > kMoeMaxExperts || L.S < 0 || L.rows_cap < L.S)
    throw Error(ErrorCode::kInvalidArgument, std::string(what) + ": bad group layout");
}

}  // namespace

void launch_moe_gate_up_gemv(StreamRef s_ref, const bf16 *x, const bf16 *gate_up, int H, int I,
                             const std::int32_t *group, const MoeGroupLayout &layout,
                             int max_active, bf16 *act, const MoeExpertAct &ea) {
  const cudaStream_t s = s_ref.get("launch_moe_gate_up_gemv");
  check_layout(layout, "launch_moe_gate_up_gemv");
  if (H % 8 != 0 || I <= 0) throw Error(ErrorCode::kInvalidArgument, "moe gate_up: H % 8 != 0");
  if (max_active <= 0) return;
  const dim3 grid((I + kWarps - 1) / kWarps, max_active);
  moe_gemv_kernel<true><<<grid, kWarps * 32, 0, s>>>(x, gate_up, I, H, group, layout, act, ea);
  KEEL_CUDA_CHECK_LAUNCH("moe_gate_up_gemv");
}

void launch_moe_down_gemv(StreamRef s_ref, const bf16 *act, const bf16 *down, int H, int I,
                          const std::int32_t *group, const MoeGroupLayout &layout, int max_active,
                          bf16 *out) {
  const cudaStream_t s = s_ref.get("launch_moe_down_gemv");
  check_layout(layout, "launch_moe_down_gemv");
  if (I % 8 != 0 || H <= 0) throw Error(ErrorCode::kInvalidArgument, "moe down: I % 8 != 0");
  if (max_active <= 0) return;
  const dim3 grid((H + kWarps - 1) / kWarps, max_active);
  moe_gemv_kernel<false>
      <<<grid, kWarps * 32, 0, s>>>(act, down, H, I, group, layout, out, MoeExpertAct{});
  KEEL_CUDA_CHECK_LAUNCH("moe_down_gemv");
}

void launch_moe_gather(StreamRef s_ref, const bf16 *x, int H, const std::int32_t *group,
                       const MoeGroupLayout &layout, bf16 *xg) {
  const cudaStream_t s = s_ref.get("launch_moe_gather");
  check_layout(layout, "launch_moe_gather");
  if (H % 8 != 0) throw Error(ErrorCode::kInvalidArgument, "moe gather: H % 8 != 0");
  if (layout.rows_cap <= 0) return;
  moe_gather_kernel<<<static_cast<unsigned>(layout.rows_cap), 128, 0, s>>>(x, H, group, layout, xg);
  KEEL_CUDA_CHECK_LAUNCH("moe_gather");
}

void launch_moe_combine(StreamRef s_ref, const bf16 *out, const std::int32_t *ids,
                        const float *weights, int T, int k, int H, const std::int32_t *group,
                        const MoeGroupLayout &layout, bf16 *y, const float *down_bias) {
  const cudaStream_t s = s_ref.get("launch_moe_combine");
  check_layout(layout, "launch_moe_combine");
  if (k <= 0 || k > kMoeMaxTopK) throw Error(ErrorCode::kInvalidArgument, "moe combine: bad k");
  if (T <= 0) return;
  moe_combine_kernel<<<T, 256, 0, s>>>(out, ids, weights, k, H, group, layout, y, down_bias);
  KEEL_CUDA_CHECK_LAUNCH("moe_combine");
}

void launch_moe_slot_act(StreamRef s_ref, const float *gu, int I, const std::int32_t *ids, int S,
                         const MoeExpertAct &ea, bf16 *act) {
  const cudaStream_t s = s_ref.get("launch_moe_slot_act");
  if (I <= 0) throw Error(ErrorCode::kInvalidArgument, "moe slot act: I <= 0");
  if (S <= 0) return;
  moe_slot_act_kernel<<<static_cast<unsigned>(S), 256, 0, s>>>(gu, I, ids, ea, act);
  KEEL_CUDA_CHECK_LAUNCH("moe_slot_act");
}

void launch_moe_act(StreamRef s_ref, const bf16 *gu, int I, const std::int32_t *group,
                    const MoeGroupLayout &layout, const MoeExpertAct &ea, bf16 *act) {
  const cudaStream_t s = s_ref.get("launch_moe_act");
  check_layout(layout, "launch_moe_act");
  if (I <= 0) throw Error(ErrorCode::kInvalidArgument, "moe act: I <= 0");
  if (layout.rows_cap <= 0) return;
  moe_act_kernel<<<static_cast<unsigned>(layout.rows_cap), 256, 0, s>>>(gu, I, group, layout, ea,
                                                                        act);
  KEEL_CUDA_CHECK_LAUNCH("moe_act");
}

}  // namespace keel::cuda
