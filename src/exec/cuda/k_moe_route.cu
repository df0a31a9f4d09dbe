// Mixture-of-experts routing (k_moe.h): top-k by softmax (Qwen3-MoE, Mixtral), by GLM's
// grouped sigmoid or gpt-oss's top-k softmax, one warp per token, and the
// counting sort that groups the token slots by expert, in one block.
#include <climits>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_moe_route.h"
#include "exec/cuda/k_moe_softmax_topk.cuh"

namespace keel::cuda {

namespace {

constexpr int kRouteWarps = 8;

__global__ void __launch_bounds__(kRouteWarps * 32)
    moe_route_kernel(const float *__restrict__ logits, int T, int E, int k, bool norm,
                     std::int32_t *__restrict__ ids, float *__restrict__ weights) {
  const int t = blockIdx.x * kRouteWarps + threadIdx.x / 32;
  if (t >= T) return;
  const float *row = logits + std::int64_t(t) * E;
  warp_softmax_topk([row](int e) { return row[e]; }, E, k, norm, ids + std::int64_t(t) * k,
                    weights + std::int64_t(t) * k);
}

// kGroupedSigmoid and kTopkSoftmax (k_moe.h): one warp per token, its choice scores in
// shared memory (double, as the CPU reference computes them), then k rounds of a warp
// argmax with ties to the lower index.
constexpr int kSelectWarps = 4;

__device__ inline bool better(double v, int i, double bv, int bi) {
  return bi == INT_MAX || v > bv || (v == bv && i < bi);
}

__global__ void __launch_bounds__(kSelectWarps * 32)
    moe_route_select_kernel(const float *__restrict__ logits, int T, MoeRouteParams p,
                            std::int32_t *__restrict__ ids, float *__restrict__ weights) {
  __shared__ double choice_s[kSelectWarps][kMoeMaxExperts];
  __shared__ double score_s[kSelectWarps][kMoeMaxExperts];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kSelectWarps + warp;
  if (t >= T) return;  // warp-uniform: the kernel syncs warps only
  const int E = p.E, k = p.k;
  const bool sigmoid = p.rule == MoeRouteRule::kGroupedSigmoid;
  const float *row = logits + std::int64_t(t) * E;
  double *choice = choice_s[warp], *score = score_s[warp];
  for (int e = lane; e < E; e += 32) {
    const float x = row[e];
    double sc, c;
    if (sigmoid) {
      sc = 1.0 / (1.0 + exp(-static_cast<double>(x)));
      c = sc + static_cast<double>(p.bias ? p.bias[e] : 0.0f);
    } else {
      const float z = x + (p.bias ? p.bias[e] : 0.0f);
      sc = c = z;
    }
    if (isnan(c)) c = -INFINITY;  // a NaN never wins
    score[e] = sc;
    choice[e] = c;
  }
  __syncwarp();
  if (sigmoid && p.topk_group < p.n_group) {
    // Lane g: group g's worth, the sum of its two best choices.
    const int per = E / p.n_group;
    double worth = -INFINITY;
    if (lane < p.n_group) {
      double a = -INFINITY, b = -INFINITY;
      for (int e = lane * per; e < (lane + 1) * per; ++e) {
        const double c = choice[e];
        if (c > a) {
          b = a;
          a = c;
        } else if (c > b) {
          b = c;
        }
      }
      worth = a + b;
    }
    unsigned keep = 0;  // bit g: group g kept
    for (int j = 0; j < p.topk_group; ++j) {
      double bv = -INFINITY;
      int bi = INT_MAX;
      if (lane < p.n_group && !(keep >> lane & 1u)) bv = worth, bi = lane;
      for (int o = 16; o > 0; o >>= 1) {
        const double ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi != INT_MAX && better(ov, oi, bv, bi)) bv = ov, bi = oi;
      }
      if (bi != INT_MAX) keep |= 1u << bi;
    }
    __syncwarp();
    for (int e = lane; e < E; e += 32)
      if (!(keep >> (e / per) & 1u)) choice[e] = 0.0;
    __syncwarp();
  }
  constexpr int kPerLane = kMoeMaxExperts / 32;
  unsigned taken = 0;  // bit i: expert lane + 32 i already chosen
  int chosen[kMoeMaxTopK];
  double value[kMoeMaxTopK];
  for (int j = 0; j < k; ++j) {
    double bv = -INFINITY;
    int bi = INT_MAX;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + 32 * i;
      if (e >= E || (taken >> i & 1u)) continue;
      if (better(choice[e], e, bv, bi)) bv = choice[e], bi = e;
    }
    for (int o = 16; o > 0; o >>= 1) {
      const double ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (oi != INT_MAX && better(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    if (bi % 32 == lane) taken |= 1u << (bi / 32);
    chosen[j] = bi;
    value[j] = score[bi];
  }
  if (lane != 0) return;
  double sum = 0.0;
  if (sigmoid) {
    for (int j = 0; j < k; ++j) sum += value[j];
    for (int j = 0; j < k; ++j) {
      const double w = p.norm_topk_prob ? value[j] / (sum + 1e-20) : value[j];
      weights[std::int64_t(t) * k + j] = static_cast<float>(w * p.scale);
      ids[std::int64_t(t) * k + j] = chosen[j];
    }
    return;
  }
  // Softmax over the chosen k; value[0] is their largest.
  const double mx = isinf(value[0]) && value[0] < 0 ? 0.0 : value[0];
  for (int j = 0; j < k; ++j) sum += exp(value[j] - mx);
  for (int j = 0; j < k; ++j) {
    weights[std::int64_t(t) * k + j] = static_cast<float>(exp(value[j] - mx) / sum);
    ids[std::int64_t(t) * k + j] = chosen[j];
  }
}

constexpr int kGroupThreads = 1024;
constexpr int kGroupWarps = kGroupThreads / 32;

__global__ void __launch_bounds__(kGroupThreads)
    moe_group_kernel(const std::int32_t *__restrict__ ids, int S, int E, int k, int align,
                     MoeGroupLayout L, std::int32_t *__restrict__ out) {
  __shared__ int cnt[kMoeMaxExperts];
  __shared__ int base[kMoeMaxExperts];
  __shared__ int warp_at[kGroupWarps * kMoeMaxExperts];  // [warp][expert]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int e = tid; e < E; e += kGroupThreads) cnt[e] = 0;
  __syncthreads();
  for (int s = tid; s < S; s += kGroupThreads) {
    const int e = ids[s];
    if (e >= 0 && e < E) atomicAdd(&cnt[e], 1);
  }
  __syncthreads();
  if (tid == 0) {
    int at = 0, na = 0;
    for (int e = 0; e < E; ++e) {
      out[L.starts() + e] = at;
      out[L.counts() + e] = cnt[e];
      base[e] = at;
      if (cnt[e] > 0) out[L.active() + na++] = e;
      at += (cnt[e] + align - 1) / align * align;
    }
    out[L.starts() + E] = at;
    out[L.n_active()] = na;
  }
  for (std::int64_t r = tid; r < L.rows_cap; r += kGroupThreads) out[L.row_token() + r] = -1;
  __syncthreads();
  // Stable placement, a tile of kGroupThreads slots at a time: a slot's row is its
  // expert's next free row plus the slots of that expert before it in the tile (earlier
  // warps, then earlier lanes of its own warp).
  const unsigned lower = (1u << lane) - 1u;
  for (int tile = 0; tile < S; tile += kGroupThreads) {
    const int s = tile + tid;
    int e = s < S ? ids[s] : -1;
    if (e >= E) e = -1;
    for (int i = tid; i < kGroupWarps * E; i += kGroupThreads)
      warp_at[(i / E) * kMoeMaxExperts + i % E] = 0;
    __syncthreads();
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    const int rank = __popc(peers & lower);
    if (e >= 0 && rank == 0) warp_at[warp * kMoeMaxExperts + e] = __popc(peers);
    __syncthreads();
    for (int x = tid; x < E; x += kGroupThreads) {
      int run = base[x];
      for (int w = 0; w < kGroupWarps; ++w) {
        const int c = warp_at[w * kMoeMaxExperts + x];
        warp_at[w * kMoeMaxExperts + x] = run;
        run += c;
      }
      base[x] = run;
    }
    __syncthreads();
    if (e >= 0) {
      const int row = warp_at[warp * kMoeMaxExperts + e] + rank;
      out[L.slot_row() + s] = row;
      out[L.row_token() + row] = s / k;
    }
    __syncthreads();
  }
}

}  // namespace

void launch_moe_route(StreamRef s_ref, const float *logits, int T, int E, int k,
                      bool norm_topk_prob, std::int32_t *ids, float *weights) {
  const cudaStream_t s = s_ref.get("launch_moe_route");
  if (T <= 0) return;
  if (E <= 0 || E > kMoeMaxExperts || k <= 0 || k > E || k > kMoeMaxTopK)
    throw Error(ErrorCode::kInvalidArgument, "launch_moe_route: experts or top-k out of range");
  moe_route_kernel<<<(T + kRouteWarps - 1) / kRouteWarps, kRouteWarps * 32, 0, s>>>(
      logits, T, E, k, norm_topk_prob, ids, weights);
  KEEL_CUDA_CHECK_LAUNCH("moe_route");
}

void launch_moe_route(StreamRef s_ref, const float *logits, int T, const MoeRouteParams &p,
                      std::int32_t *ids, float *weights) {
  if (p.rule == MoeRouteRule::kSoftmax)
    return launch_moe_route(s_ref, logits, T, p.E, p.k, p.norm_topk_prob, ids, weights);
  const cudaStream_t s = s_ref.get("launch_moe_route");
  if (T <= 0) return;
  if (p.E <= 0 || p.E > kMoeMaxExperts || p.k <= 0 || p.k > p.E || p.k > kMoeMaxTopK)
    throw Error(ErrorCode::kInvalidArgument, "launch_moe_route: experts or top-k out of range");
  if (p.rule == MoeRouteRule::kGroupedSigmoid &&
      (p.n_group <= 0 || p.n_group > kMoeMaxGroups || p.E % p.n_group != 0 || p.topk_group <= 0 ||
       p.topk_group > p.n_group))
    throw Error(ErrorCode::kInvalidArgument, "launch_moe_route: n_group / topk_group out of range");
  moe_route_select_kernel<<<(T + kSelectWarps - 1) / kSelectWarps, kSelectWarps * 32, 0, s>>>(
      logits, T, p, ids, weights);
  KEEL_CUDA_CHECK_LAUNCH("moe_route_select");
}

void launch_moe_group(StreamRef s_ref, const std::int32_t *ids, int S, int E, int k, int align,
                      std::int64_t rows_cap, std::int32_t *out) {
  const cudaStream_t s = s_ref.get("launch_moe_group");
  if (E <= 0 || E > kMoeMaxExperts || k <= 0 || align <= 0 || S < 0 ||
      rows_cap < moe_rows_cap(S, E, align))
    throw Error(ErrorCode::kInvalidArgument, "launch_moe_group: bad sizes");
  MoeGroupLayout L{E, S, rows_cap};
  moe_group_kernel<<<1, kGroupThreads, 0, s>>>(ids, S, E, k, align, L, out);
  KEEL_CUDA_CHECK_LAUNCH("moe_group");
}

}  // namespace keel::cuda
