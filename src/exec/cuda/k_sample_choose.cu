// The device sampler's last kernel (see k_sample.cu): one block per row picks the token
// and its logprob. Greedy rows combine the parts' argmax partials in part order; filtered
// rows sort their candidate window in shared memory and walk it; rows the filter could not
// narrow walk the fully sorted row. The walk is the CPU Sampler's, with block scans in
// double precision.
#include <cub/cub.cuh>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_sample_common.cuh"

namespace keel::cuda::sample_detail {

namespace {

using BlockScan = cub::BlockScan<double, kThreads>;

// First index i < n whose inclusive prefix sum of q(i), plus start, satisfies pred; -1 if
// none.
template <typename Q, typename Pred>
__device__ int first_prefix(int n, double start, Q q, Pred pred, BlockScan::TempStorage &tmp,
                            int *found) {
  double running = start;
  if (threadIdx.x == 0) *found = 0x7fffffff;
  __syncthreads();
  for (int c = 0; c < n; c += kThreads) {
    const int i = c + threadIdx.x;
    const double v = i < n ? q(i) : 0.0;
    double incl, chunk_total;
    BlockScan(tmp).InclusiveSum(v, incl, chunk_total);
    if (i < n && pred(running + incl)) atomicMin(found, i);
    running += chunk_total;
    __syncthreads();
    if (*found != 0x7fffffff) break;  // uniform: read after the barrier
    __syncthreads();
  }
  const int f = *found;
  __syncthreads();
  return f == 0x7fffffff ? -1 : f;
}

struct WalkShared {
  BlockScan::TempStorage scan;
  double ds[32];
  int is[32];
  int found;
};

// The walk over n candidates sorted by (logit desc, id asc): w(i) their penalised logits,
// id(i) their token ids. mx: the row's max at the temperature. filtered: the candidates are
// a window of the row (sum: the whole row's normaliser, start: the probability above the
// window, non-zero only at plain temperature); else the whole row.
template <typename W, typename Id>
__device__ int walk(const SampleRow &row, int V, int n, bool filtered, double mx, double sum,
                    double start, W w, Id id, WalkShared &sh) {
  int keep = row.top_k > 0 ? min(row.top_k, V) : V;  // filtered with top_k: n >= keep
  const double inv_t = row.inv_temperature;
  auto p = [&](int i) { return prob(w(i), inv_t, mx); };
  if (!(filtered && row.top_k == 0)) {  // else: over the whole row, unsorted (filter)
    sum = 0;
    for (int i = threadIdx.x; i < keep; i += kThreads) sum += p(i);
    sum = block_reduce(
        sum, [](double a, double b) { return a + b; }, 0.0, sh.ds);
  }
  auto q = [&](int i) { return p(i) / sum; };
  if (row.top_p < 1.0f) {
    const double top_p = row.top_p;
    const int f = first_prefix(
        min(keep, n), 0.0, q, [&](double cum) { return cum >= top_p; }, sh.scan, &sh.found);
    if (f >= 0)
      keep = max(f + 1, 1);
    else
      keep = min(keep, n);  // filtered: the margin makes this unreachable
  }
  if (row.min_p > 0.0f) {
    const double floor = double(row.min_p) * q(0);
    int first = 0x7fffffff;
    for (int i = 1 + threadIdx.x; i < min(keep, n); i += kThreads)
      if (q(i) < floor) {
        first = i;
        break;
      }
    first = block_reduce(
        first, [](int a, int b) { return min(a, b); }, 0x7fffffff, sh.is);
    if (first != 0x7fffffff)
      keep = first;
    else
      keep = min(keep, n);  // filtered: every candidate past n is below the floor
  }
  double total = 1.0;  // filtered, temperature only: the whole row's q sums to 1
  if (keep <= n) {
    total = 0;
    for (int i = threadIdx.x; i < keep; i += kThreads) total += q(i);
    total = block_reduce(
        total, [](double a, double b) { return a + b; }, 0.0, sh.ds);
  }
  const double target = row.u * total;
  const int f = first_prefix(
      min(keep, n), start, q, [&](double cum) { return target < cum; }, sh.scan, &sh.found);
  return id(f >= 0 ? f : min(keep, n) - 1);
}

__global__ void __launch_bounds__(kThreads)
    choose_kernel(const float *logits, int V, int P, const SampleRow *rows, Scratch sc,
                  std::int32_t *out_tokens, float *out_logprobs) {
  __shared__ unsigned long long keys[kFilterCap];
  __shared__ WalkShared sh;
  const int r = blockIdx.x;
  const std::int64_t base = std::int64_t(r) * V;
  const std::size_t parts = std::size_t(r) * kMaxParts;
  const SampleRow row = rows[r];
  int chosen = 0;
  if (row.inv_temperature <= 0.0f) {  // greedy: the parts' argmax, in part order
    if (threadIdx.x == 0) {
      float v = -FLT_MAX;
      int i = 0x7fffffff;
      for (int c = 0; c < P; ++c) argmax_better(v, i, sc.arg_val[parts + c], sc.arg_idx[parts + c]);
      chosen = i == 0x7fffffff ? 0 : i;
    }
  } else if (sc.kept[r] >= 0) {                 // filtered: sort the window's candidates here
    const int n = min(sc.kept[r], sc.fill[r]);  // equal: both count the same buckets
    const unsigned long long *cand = sc.cand + std::size_t(r) * sc.cand_cap;
    int P2 = 1;
    while (P2 < n) P2 <<= 1;
    for (int i = threadIdx.x; i < P2; i += kThreads) keys[i] = i < n ? cand[i] : ~0ull;
    __syncthreads();
    for (int k = 2; k <= P2; k <<= 1)  // bitonic sort, ascending
      for (int j = k >> 1; j > 0; j >>= 1) {
        for (int i = threadIdx.x; i < P2; i += kThreads) {
          const int other = i ^ j;
          if (other > i) {
            const unsigned long long a = keys[i], b = keys[other];
            if ((a > b) == ((i & k) == 0)) keys[i] = b, keys[other] = a;
          }
        }
        __syncthreads();
      }
    const int lo = sc.lo[r];
    const double sum = sc.sums[r];
    double above = 0;  // the probability mass above the window, in part order
    if (lo > 0)
      for (int c = 0; c < P; ++c) above += sc.base_part[parts + c];
    chosen = walk(
        row, V, n, true, scaled(sc.wmax[r], row.inv_temperature), sum, above / sum,
        [&](int i) { return cand_logit(keys[i]); }, [&](int i) { return cand_id(keys[i]); }, sh);
  } else {  // sorted whole by the segmented sort
    const float *w = sc.keys_out + base;
    const std::int32_t *id = sc.ids_out + base;
    chosen = walk(
        row, V, V, false, scaled(w[0], row.inv_temperature), 0.0, 0.0, [&](int i) { return w[i]; },
        [&](int i) { return id[i]; }, sh);
  }
  if (threadIdx.x == 0) {
    float m = -INFINITY;
    for (int c = 0; c < P; ++c) m = fmaxf(m, sc.raw_max[parts + c]);
    double s = 0;
    for (int c = 0; c < P; ++c) {
      const float mc = sc.raw_max[parts + c];
      if (mc != -INFINITY) s += sc.raw_sum[parts + c] * exp(double(mc) - double(m));
    }
    const float lse = isfinite(m) ? static_cast<float>(m + log(s)) : m;
    out_tokens[r] = chosen;
    out_logprobs[r] = logits[base + chosen] - lse;
  }
}

}  // namespace

void launch_choose(cudaStream_t s, const float *logits, int R, int V, const Parts &pt,
                   const SampleRow *rows, const Scratch &sc, std::int32_t *out_tokens,
                   float *out_logprobs) {
  choose_kernel<<<R, kThreads, 0, s>>>(logits, V, pt.P, rows, sc, out_tokens, out_logprobs);
  KEEL_CUDA_CHECK_LAUNCH("sample choose");
}

}  // namespace keel::cuda::sample_detail
