// The fused mixture-of-experts decode kernels (k_moe_decode.h): router with its norm and
// top-k, the slots' gate/up GEMVs with the activation, and the down GEMVs with the
// routing weights, the combine and the residual add.

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_bf16x8.cuh"
#include "exec/cuda/k_moe_act.cuh"
#include "exec/cuda/k_moe_decode.h"
#include "exec/cuda/k_moe_softmax_topk.cuh"
#include "exec/cuda/k_pdl.cuh"
#include "exec/cuda/k_reduce.cuh"

namespace keel::cuda {

namespace {

using reduce::warp_sum;

constexpr int kWarps = 8;  // one output row (expert logit, act column, hidden column) per warp
constexpr int kThreads = kWarps * 32;
constexpr std::size_t kStageBytes = 48 * 1024;  // the router's staged input: T x H bf16

__device__ inline float dot8(const uint4 &a, const uint4 &b) {
  float fa[8], fb[8];
  bf16x8_to_float(a, fa);
  bf16x8_to_float(b, fb);
  float s = 0.0f;
#pragma unroll
  for (int q = 0; q < 8; ++q) s += fa[q] * fb[q];
  return s;
}

// Softmax top-k of one token's logits by one warp: launch_moe_route's rule (ties to the
// lower expert, NaN never wins, norm_topk_prob).
__device__ void route_token_warp(const float *row, int E, int k, bool norm, std::int32_t *ids,
                                 float *weights) {
  warp_softmax_topk([row](int e) { return __ldcg(row + e); }, E, k, norm, ids, weights);
}

constexpr int kRouterPre = 8;  // router vectors a lane loads before waiting (all of H <= 2048)

__global__ void __launch_bounds__(kThreads) moe_decode_router_kernel(MoeDecodeParams p) {
  extern __shared__ uint4 xs4[];  // [T][H / 8]
  __shared__ float red[kWarps][kMoeDecodeMaxT];
  __shared__ bool last;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kv = p.H / 8, T = p.T;
  const int e = blockIdx.x * kWarps + warp;
  const uint4 *wrow =
      e < p.E ? reinterpret_cast<const uint4 *>(p.router + std::int64_t(e) * p.H) : nullptr;
  uint4 pre[kRouterPre];
#pragma unroll
  for (int i = 0; i < kRouterPre; ++i)
    if (wrow && lane + 32 * i < kv) pre[i] = __ldg(wrow + lane + 32 * i);
  wait_for_previous_kernel();
  allow_next_kernel();
  // RMSNorm of the T residual rows, rounded as launch_add_rmsnorm rounds.
  float ss[kMoeDecodeMaxT];
#pragma unroll
  for (int t = 0; t < kMoeDecodeMaxT; ++t) ss[t] = 0.0f;
  for (int j = threadIdx.x; j < p.H / 4; j += kThreads)
#pragma unroll
    for (int t = 0; t < kMoeDecodeMaxT; ++t) {
      if (t >= T) break;
      const float4 v = reinterpret_cast<const float4 *>(p.residual + std::int64_t(t) * p.H)[j];
      ss[t] += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
#pragma unroll
  for (int t = 0; t < kMoeDecodeMaxT; ++t) {
    const float w = warp_sum(ss[t]);
    if (lane == 0) red[warp][t] = w;
  }
  __syncthreads();
  float inv[kMoeDecodeMaxT];
#pragma unroll
  for (int t = 0; t < kMoeDecodeMaxT; ++t) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += red[w][t];
    inv[t] = rsqrtf(s / static_cast<float>(p.H) + p.eps);
  }
  const uint4 *nw = reinterpret_cast<const uint4 *>(p.norm_weight);
  uint4 *normed = reinterpret_cast<uint4 *>(p.normed);
  for (int j = threadIdx.x; j < kv; j += kThreads) {
    float wf[8];
    bf16x8_to_float(nw[j], wf);
    for (int t = 0; t < T; ++t) {
      const float4 a = reinterpret_cast<const float4 *>(p.residual + std::int64_t(t) * p.H)[2 * j];
      const float4 b =
          reinterpret_cast<const float4 *>(p.residual + std::int64_t(t) * p.H)[2 * j + 1];
      const float r[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      float o[8];
#pragma unroll
      for (int q = 0; q < 8; ++q) o[q] = r[q] * inv[t] * wf[q];
      const uint4 packed = float8_to_bf16x8(o);
      xs4[t * kv + j] = packed;
      if (blockIdx.x == 0) normed[std::int64_t(t) * kv + j] = packed;  // the experts' input
    }
  }
  __syncthreads();
  if (wrow) {
    float acc[kMoeDecodeMaxT];
#pragma unroll
    for (int t = 0; t < kMoeDecodeMaxT; ++t) acc[t] = 0.0f;
    auto add = [&](const uint4 &w, int v) {
#pragma unroll
      for (int t = 0; t < kMoeDecodeMaxT; ++t)
        if (t < T) acc[t] += dot8(w, xs4[t * kv + v]);
    };
#pragma unroll
    for (int i = 0; i < kRouterPre; ++i)
      if (lane + 32 * i < kv) add(pre[i], lane + 32 * i);
#pragma unroll 4
    for (int v = lane + 32 * kRouterPre; v < kv; v += 32) add(__ldg(wrow + v), v);
    const float bias = p.router_bias ? p.router_bias[e] : 0.0f;
#pragma unroll
    for (int t = 0; t < kMoeDecodeMaxT; ++t) {
      if (t >= T) break;
      const float s = warp_sum(acc[t]);
      if (lane == 0) p.logits[std::int64_t(t) * p.E + e] = s + bias;
    }
  }
  // The last block to finish routes every token (its logits are all written then).
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(p.counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (warp < T)
    route_token_warp(p.logits + std::int64_t(warp) * p.E, p.E, p.k, p.norm_topk_prob,
                     p.ids + warp * p.k, p.weights + warp * p.k);
  if (threadIdx.x == 0) *p.counter = 0u;  // ready for the next launch (graph replays)
}

// Block (column chunk, slot s = t k + j): warp i computes act[s, i] from expert ids[s]'s
// gate row i and up row i over normed[t], staged in shared memory once per block.
__global__ void __launch_bounds__(kThreads) moe_decode_gate_up_kernel(MoeDecodeParams p) {
  extern __shared__ uint4 xs4[];  // [H / 8]
  wait_for_previous_kernel();
  allow_next_kernel();
  const int s = blockIdx.y, lane = threadIdx.x % 32;
  const int i = blockIdx.x * kWarps + threadIdx.x / 32;
  const int kv = p.H / 8;
  const uint4 *x = reinterpret_cast<const uint4 *>(p.normed + std::int64_t(s / p.k) * p.H);
  for (int v = threadIdx.x; v < kv; v += kThreads) xs4[v] = __ldcg(x + v);
  __syncthreads();
  if (i >= p.I) return;
  const std::int64_t e = __ldcg(p.ids + s);
  const uint4 *w0 = reinterpret_cast<const uint4 *>(p.gate_up + (e * 2 * p.I + i) * p.H);
  const uint4 *w1 = w0 + std::int64_t(p.I) * kv;
  float g = 0.0f, u = 0.0f;
#pragma unroll 4
  for (int v = lane; v < kv; v += 32) {
    const uint4 xv = xs4[v];
    g += dot8(__ldg(w0 + v), xv);
    u += dot8(__ldg(w1 + v), xv);
  }
  g = warp_sum(g);
  u = warp_sum(u);
  if (lane == 0) {
    if (p.act_fn.gate_up_bias) {
      g += p.act_fn.gate_up_bias[e * 2 * p.I + i];
      u += p.act_fn.gate_up_bias[e * 2 * p.I + p.I + i];
    }
    p.act[std::int64_t(s) * p.I + i] = __float2bfloat16(moe_expert_act(g, u, p.act_fn));
  }
}

// Block: kWarps hidden columns c; warp c sums, for each token, its k slots' down rows in
// ascending expert order and adds the result to the residual. MaxK >= k is a compile-time
// bound, so a lane issues the loads of all k rows before the first sum needs one (with a
// runtime bound and a break, each row's load waited for the previous row's sum: 20 us a
// layer at batch 1 on the Qwen3-30B-A3B shape; a [16] array of loads spilled: 37 us).
template <int MaxK>
__global__ void __launch_bounds__(kThreads) moe_decode_down_kernel(MoeDecodeParams p) {
  extern __shared__ uint4 acts4[];  // [k][I / 8]: token t's k activation rows, sorted order
  __shared__ int s_slot[kMoeDecodeMaxT][MaxK];
  __shared__ int s_exp[kMoeDecodeMaxT][MaxK];
  const int lane = threadIdx.x % 32, k = p.k, kv = p.I / 8;
  // The ids come from the router, two kernels back: it has finished once the gate_up
  // kernel, which waited for it, let this one start; so they may be read before the wait.
  if (threadIdx.x < p.T) {
    const int t = threadIdx.x;
    for (int j = 0; j < k; ++j) {
      const int e = __ldcg(p.ids + t * k + j);
      int at = j;
      while (at > 0 && s_exp[t][at - 1] > e) {
        s_exp[t][at] = s_exp[t][at - 1];
        s_slot[t][at] = s_slot[t][at - 1];
        --at;
      }
      s_exp[t][at] = e;
      s_slot[t][at] = t * k + j;
    }
  }
  __syncthreads();
  const int c = blockIdx.x * kWarps + threadIdx.x / 32;
  const bool live = c < p.H;
  auto wrow = [&](int t, int j) {
    return reinterpret_cast<const uint4 *>(p.down + (std::int64_t(s_exp[t][j]) * p.H + c) * p.I);
  };
  // Token 0's first vector of each row, before waiting on the gate_up kernel.
  uint4 pre[MaxK];
#pragma unroll
  for (int j = 0; j < MaxK; ++j)
    if (live && j < k && lane < kv) pre[j] = __ldg(wrow(0, j) + lane);
  wait_for_previous_kernel();
  allow_next_kernel();
  for (int t = 0; t < p.T; ++t) {
    if (t > 0) __syncthreads();  // every warp is done with token t - 1's rows
    for (int q = threadIdx.x; q < k * kv; q += kThreads)
      acts4[q] = __ldcg(
          reinterpret_cast<const uint4 *>(p.act + std::int64_t(s_slot[t][q / kv]) * p.I) + q % kv);
    __syncthreads();
    if (!live) continue;
    float part[MaxK];
#pragma unroll
    for (int j = 0; j < MaxK; ++j) part[j] = 0.0f;
    for (int v = lane; v < kv; v += 32) {
      uint4 w[MaxK];
#pragma unroll
      for (int j = 0; j < MaxK; ++j)
        if (j < k) w[j] = (t == 0 && v == lane) ? pre[j] : __ldg(wrow(t, j) + v);
#pragma unroll
      for (int j = 0; j < MaxK; ++j)
        if (j < k) part[j] += dot8(w[j], acts4[j * kv + v]);
    }
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < MaxK; ++j) {
      if (j >= k) break;
      // As the gather-GEMV (bf16 out) + launch_moe_combine + the residual add round.
      float o = __bfloat162float(__float2bfloat16(warp_sum(part[j])));
      if (p.act_fn.down_bias) o += p.act_fn.down_bias[std::int64_t(s_exp[t][j]) * p.H + c];
      acc += __ldcg(p.weights + s_slot[t][j]) * o;
    }
    if (lane == 0) p.residual[std::int64_t(t) * p.H + c] += __bfloat162float(__float2bfloat16(acc));
  }
}

void check(const MoeDecodeParams &p, const char *what) {
  if (!moe_decode_supported(p.T, p.H, p.E, p.k, p.I))
    throw Error(ErrorCode::kInvalidArgument, std::string(what) + ": shape not supported");
}

}  // namespace

bool moe_decode_supported(int T, int H, int E, int k, int I) {
  return T >= 1 && T <= kMoeDecodeMaxT && H > 0 && H % 8 == 0 && I > 0 && I % 8 == 0 && E > 0 &&
         E <= kMoeMaxExperts && k > 0 && k <= E && k <= kMoeMaxTopK &&
         std::size_t(T) * H * sizeof(bf16) <= kStageBytes &&
         std::size_t(k) * I * sizeof(bf16) <= kStageBytes;
}

void launch_moe_decode_router(StreamRef s_ref, const MoeDecodeParams &p) {
  const cudaStream_t s = s_ref.get("launch_moe_decode_router");
  check(p, "launch_moe_decode_router");
  const dim3 grid((p.E + kWarps - 1) / kWarps);
  launch_maybe_pdl(moe_decode_router_kernel, grid, dim3(kThreads),
                   std::size_t(p.T) * p.H * sizeof(bf16), s, p.pdl, p);
  KEEL_CUDA_CHECK_LAUNCH("moe_decode_router");
}

void launch_moe_decode_gate_up(StreamRef s_ref, const MoeDecodeParams &p) {
  const cudaStream_t s = s_ref.get("launch_moe_decode_gate_up");
  check(p, "launch_moe_decode_gate_up");
  const dim3 grid((p.I + kWarps - 1) / kWarps, p.T * p.k);
  launch_maybe_pdl(moe_decode_gate_up_kernel, grid, dim3(kThreads), std::size_t(p.H) * sizeof(bf16),
                   s, p.pdl, p);
  KEEL_CUDA_CHECK_LAUNCH("moe_decode_gate_up");
}

void launch_moe_decode_down(StreamRef s_ref, const MoeDecodeParams &p) {
  const cudaStream_t s = s_ref.get("launch_moe_decode_down");
  check(p, "launch_moe_decode_down");
  const dim3 grid((p.H + kWarps - 1) / kWarps);
  const std::size_t smem = std::size_t(p.k) * p.I * sizeof(bf16);
  if (p.k <= 2)
    launch_maybe_pdl(moe_decode_down_kernel<2>, grid, dim3(kThreads), smem, s, p.pdl, p);
  else if (p.k <= 4)
    launch_maybe_pdl(moe_decode_down_kernel<4>, grid, dim3(kThreads), smem, s, p.pdl, p);
  else if (p.k <= 8)
    launch_maybe_pdl(moe_decode_down_kernel<8>, grid, dim3(kThreads), smem, s, p.pdl, p);
  else
    launch_maybe_pdl(moe_decode_down_kernel<kMoeMaxTopK>, grid, dim3(kThreads), smem, s, p.pdl, p);
  KEEL_CUDA_CHECK_LAUNCH("moe_decode_down");
}

}  // namespace keel::cuda
