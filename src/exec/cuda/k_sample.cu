// Sampling on the device (see kernels.h for the semantics). Each row is split into P
// parts of >= kChunkMin entries (P from the row count: about two blocks per SM in all),
// so a batch of one row still spreads over the GPU:
//   prepare  (part blocks) per-part partials: raw log-sum-exp, penalised max and argmax;
//            rows with penalty entries are copied (keys_in) and penalised there.
//   filter   (part blocks, stochastic rows) a histogram of probability mass (integers:
//            exact, so order-free) and count by distance below the penalised max, merged
//            into the row's histogram with integer atomics; the row's last block to finish
//            picks the candidate window (below) and the row's normaliser from the per-part
//            sums in part order.
//   collect  (part blocks) appends the window's candidates (<= kFilterCap) to the row's
//            list (integer slot atomics; the list is sorted later, so its order does not
//            matter) and sums the mass above the window; rows the filter could not narrow
//            get keys/ids for the full sort.
//   CUB      stable segmented radix sort of the rows that need it (others are empty
//            segments), unchanged from the first version.
//   choose   (k_sample_choose.cu, one block per row) greedy: the parts' argmax in part
//            order; filtered: bitonic sort of the candidates in shared memory and the walk
//            with block scans in double; sorted: the walk over the sorted row.
// Nothing that decides a token or its logprob depends on the order of atomics.
//
// Why the window gives the token of a full sort: the walk only ever looks at a prefix of
// the sorted row -- up to top_k, the top_p crossing, the min_p cut, and the first
// candidate whose cumulative probability exceeds u * total. Buckets are monotone in the
// logit, so they cut the sorted row into consecutive runs. The window [lo, hi] is the run
// of buckets that holds that prefix with a margin of kMassSlack of the row's mass (enough
// mass for max(u, top_p), at least top_k candidates, every candidate min_p keeps); rows at
// plain temperature start it at the bucket where the mass reaches u - kMassSlack and add
// the mass above it, so flat rows (many candidates) sort only the run around their draw.
// Rows it cannot narrow to kFilterCap candidates (u or top_p within the margin of 1, huge
// top_k, tiny min_p) take the full sort.
#include <cub/cub.cuh>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_sample_common.cuh"
#include "exec/cuda/kernels.h"

namespace keel::cuda {

using namespace sample_detail;

namespace {

std::size_t cub_bytes_for(int R, int V) {
  std::size_t bytes = 0;
  KEEL_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, bytes, static_cast<const float *>(nullptr), static_cast<float *>(nullptr),
      static_cast<const std::int32_t *>(nullptr), static_cast<std::int32_t *>(nullptr),
      static_cast<std::int64_t>(R) * V, R, static_cast<const std::int32_t *>(nullptr),
      static_cast<const std::int32_t *>(nullptr) + 1, 0, 32, cudaStream_t(0)));
  return bytes;
}

std::size_t fixed_bytes(int R, int V) {
  Scratch s{};
  return lay_out(nullptr, R, V, s);
}

// The penalised row r: keys_in when it has penalty entries (prepare wrote it), else the
// logits themselves.
__device__ __forceinline__ const float *penalised_row(const float *logits, const SampleRow &row,
                                                      const Scratch &sc, std::int64_t base) {
  return (row.penalty_count > 0 ? sc.keys_in : logits) + base;
}

__global__ void __launch_bounds__(kPartThreads)
    prepare_kernel(const float *logits, int V, Parts pt, const SampleRow *rows,
                   const PenaltyEntry *penalties, Scratch sc) {
  __shared__ float fs[32];
  __shared__ double ds[32];
  __shared__ int is[32];
  const int r = blockIdx.x, c = blockIdx.y;
  const SampleRow row = rows[r];
  const std::int64_t base = std::int64_t(r) * V;
  const int c0 = c * pt.chunk, c1 = min(V, c0 + pt.chunk);
  const bool penalised = row.penalty_count > 0;
  if (row.inv_temperature > 0.0f) {  // the filter's merge state, fresh every launch
    for (int b = c * kPartThreads + threadIdx.x; b < kBuckets; b += pt.P * kPartThreads) {
      sc.hist_count[std::size_t(r) * kBuckets + b] = 0;
      sc.hist_mass[std::size_t(r) * kBuckets + b] = 0;
    }
    if (c == 0 && threadIdx.x == 0) sc.counter[r] = 0, sc.fill[r] = 0;
  }
  if (c == 0 && threadIdx.x == 0) {
    sc.offsets[r] = static_cast<std::int32_t>(base);
    sc.ends[r] = static_cast<std::int32_t>(base);  // the filter widens rows it cannot narrow
  }
  float m = -INFINITY, pm = -INFINITY, av = -FLT_MAX;
  double s = 0;
  int ai = 0x7fffffff;
  float *copy = sc.keys_in + base;
  for_chunk(logits + base, c0, c1, pt.vec, [&](int i, float x, bool ok) {
    if (!ok) return;
    lse_add(m, s, x);
    if (penalised) {
      copy[i] = x;
    } else {
      pm = fmaxf(pm, x);
      argmax_better(av, ai, x, i);
    }
  });
  if (penalised) {
    __syncthreads();  // this part's copy is complete before penalties rewrite entries of it
    for (int e = threadIdx.x; e < row.penalty_count; e += kPartThreads) {
      const PenaltyEntry pe = penalties[row.penalty_begin + e];
      if (pe.token < c0 || pe.token >= c1) continue;  // another part's (or out of range)
      float w = copy[pe.token];
      if (row.repetition_penalty != 1.0f)
        w = w > 0 ? w / row.repetition_penalty : w * row.repetition_penalty;
      if (pe.generated_count > 0 && (row.presence_penalty != 0.0f || row.frequency_penalty != 0.0f))
        w -= row.presence_penalty + row.frequency_penalty * static_cast<float>(pe.generated_count);
      copy[pe.token] = w;
    }
    __syncthreads();
    for_chunk(copy, c0, c1, pt.vec, [&](int i, float w, bool ok) {
      if (!ok) return;
      pm = fmaxf(pm, w);
      argmax_better(av, ai, w, i);
    });
  }
  block_lse(m, s, fs, ds);
  block_argmax_reduce(av, ai, fs, is);
  pm = block_reduce(
      pm, [](float a, float b) { return fmaxf(a, b); }, -INFINITY, fs);
  if (threadIdx.x == 0) {
    const std::size_t at = std::size_t(r) * kMaxParts + c;
    sc.raw_max[at] = m;
    sc.raw_sum[at] = s;
    sc.pen_max[at] = pm;
    sc.arg_val[at] = av;
    sc.arg_idx[at] = ai;
  }
}

// The penalised row's max from the parts' maxima (fmaxf: exact, any order). Warp-wide.
__device__ float row_max(const float *parts, int P) {
  float v = -INFINITY;
  for (int c = threadIdx.x % 32; c < P; c += 32) v = fmaxf(v, parts[c]);
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__global__ void __launch_bounds__(kPartThreads)
    filter_kernel(const float *logits, int V, Parts pt, const SampleRow *rows, Scratch sc) {
  using CountScan = cub::BlockScan<int, kPartThreads>;
  using MassScan = cub::BlockScan<unsigned long long, kPartThreads>;
  __shared__ int count[kBuckets];
  __shared__ unsigned long long mass[kBuckets];
  __shared__ typename CountScan::TempStorage count_tmp;
  __shared__ typename MassScan::TempStorage mass_tmp;
  __shared__ double ds[32];
  __shared__ double row_sum;
  __shared__ int last, cut_hi, cut_lo;
  const int r = blockIdx.x, c = blockIdx.y;
  const SampleRow row = rows[r];
  if (row.inv_temperature <= 0.0f) return;  // greedy: the argmax partials decide
  const std::int64_t base = std::int64_t(r) * V;
  const int c0 = c * pt.chunk, c1 = min(V, c0 + pt.chunk);
  const std::size_t parts = std::size_t(r) * kMaxParts;
  const float wmax = row_max(sc.pen_max + parts, pt.P);
  const double inv_t = row.inv_temperature;
  const double mx = scaled(wmax, inv_t);
  const double scale = ldexp(1.0, pt.mass_shift);
  for (int b = threadIdx.x; b < kBuckets; b += kPartThreads) count[b] = 0, mass[b] = 0;
  __syncthreads();
  double sum = 0;
  for_chunk(penalised_row(logits, row, sc, base), c0, c1, pt.vec, [&](int, float w, bool ok) {
    if (!ok) return;
    const double p = prob(w, inv_t, mx);  // choose_kernel's p, term for term
    sum += p;
    const int b = bucket_of(w, inv_t, mx);
    atomicAdd(&count[b], 1);
    if (p > 0) {  // p <= 1 (w <= wmax); NaN adds nothing
      const unsigned long long q = __double2ull_rn(p * scale);
      if (q) atomicAdd(&mass[b], q);
    }
  });
  sum = block_reduce(
      sum, [](double a, double b) { return a + b; }, 0.0, ds);
  if (threadIdx.x == 0) sc.mass_part[parts + c] = sum;
  int *g_count = sc.hist_count + std::size_t(r) * kBuckets;
  unsigned long long *g_mass = sc.hist_mass + std::size_t(r) * kBuckets;
  for (int b = threadIdx.x; b < kBuckets; b += kPartThreads) {  // block_reduce synced
    if (count[b]) atomicAdd(&g_count[b], count[b]);
    if (mass[b]) atomicAdd(&g_mass[b], mass[b]);
  }
  // The row's last part to get here sees every part's histogram and sum (fence, then the
  // done count; the last one fences again before reading).
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&sc.counter[r], 1) == pt.P - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int p = 0; p < pt.P; ++p) total += __ldcg(&sc.mass_part[parts + p]);
    row_sum = total;
    cut_hi = cut_lo = kBuckets;
  }
  int cnt[4];
  unsigned long long ms[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    cnt[k] = __ldcg(&g_count[4 * threadIdx.x + k]);
    ms[k] = __ldcg(&g_mass[4 * threadIdx.x + k]);
  }
  CountScan(count_tmp).InclusiveSum(cnt, cnt);
  MassScan(mass_tmp).InclusiveSum(ms, ms);
  __syncthreads();  // row_sum, cut_* set
  const double total = row_sum;
  const int need_count = row.top_k > 0 ? min(row.top_k, V) : 0;
  const double need_mass =
      row.top_k > 0 ? 0.0 : fmax(row.u, row.top_p < 1.0f ? double(row.top_p) : 0.0) + kMassSlack;
  // min_p alone decides where the walk's candidates end: keep every one it keeps.
  const double min_gap = row.top_k == 0 && row.top_p >= 1.0f && row.min_p > 0.0f
                             ? -log(double(row.min_p)) + 1e-3
                             : 0.0;
  // Plain temperature: the walk needs only the run around its draw.
  const bool windowed = row.top_k == 0 && row.top_p >= 1.0f && row.min_p <= 0.0f;
  const double inv_scale = ldexp(1.0, -pt.mass_shift);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int b = 4 * threadIdx.x + k;
    const double m = double(ms[k]) * inv_scale;
    const double upper = b == kBuckets - 1 ? INFINITY : (b + 1) / (kBuckets / kGapMax);
    if (need_mass < 1.0 && cnt[k] >= need_count && m >= need_mass * total && upper >= min_gap)
      atomicMin(&cut_hi, b);
    if (windowed && m > (row.u - kMassSlack) * total) atomicMin(&cut_lo, b);
    count[b] = cnt[k];  // inclusive counts, for thread 0 below
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int hi = cut_hi, lo = windowed ? cut_lo : 0;
    bool ok = hi < kBuckets && lo <= hi;
    const int n = ok ? count[hi] - (lo > 0 ? count[lo - 1] : 0) : 0;
    ok = ok && n >= 1 && n <= kFilterCap;
    sc.kept[r] = ok ? n : -1;
    sc.lo[r] = lo;
    sc.hi[r] = hi;
    sc.sums[r] = total;
    sc.wmax[r] = wmax;
    if (!ok) sc.ends[r] = static_cast<std::int32_t>(base + V);  // the full sort takes it
  }
}

__global__ void __launch_bounds__(kPartThreads)
    collect_kernel(const float *logits, int V, Parts pt, const SampleRow *rows, Scratch sc) {
  __shared__ double ds[32];
  const int r = blockIdx.x, c = blockIdx.y;
  const SampleRow row = rows[r];
  if (row.inv_temperature <= 0.0f) return;
  const std::int64_t base = std::int64_t(r) * V;
  const int c0 = c * pt.chunk, c1 = min(V, c0 + pt.chunk);
  const float *w = penalised_row(logits, row, sc, base);
  if (sc.kept[r] < 0) {  // the full sort: keys (unless prepare copied them) and ids
    float *keys = sc.keys_in + base;
    std::int32_t *ids = sc.ids_in + base;
    const bool copy = row.penalty_count == 0;
    for (int i = c0 + threadIdx.x; i < c1; i += kPartThreads) {
      if (copy) keys[i] = w[i];
      ids[i] = i;
    }
    return;
  }
  const int lo = sc.lo[r], hi = sc.hi[r];
  const double inv_t = row.inv_temperature;
  const double mx = scaled(sc.wmax[r], inv_t);
  unsigned long long *cand = sc.cand + std::size_t(r) * sc.cand_cap;
  const int lane = threadIdx.x % 32;
  double above = 0;
  for_chunk(w, c0, c1, pt.vec, [&](int i, float x, bool ok) {
    const int b = ok ? bucket_of(x, inv_t, mx) : -1;
    const bool take = ok && b >= lo && b <= hi;
    if (ok && b < lo) above += prob(x, inv_t, mx);
    const unsigned mask = __ballot_sync(0xffffffffu, take);
    if (mask == 0) return;  // warp-uniform
    const int leader = __ffs(mask) - 1;
    int first = 0;
    if (lane == leader) first = atomicAdd(&sc.fill[r], __popc(mask));
    first = __shfl_sync(0xffffffffu, first, leader);
    const int slot = first + __popc(mask & ((1u << lane) - 1u));
    if (take && slot < sc.cand_cap) cand[slot] = cand_key(x, i);
  });
  if (lo > 0) {
    above = block_reduce(
        above, [](double a, double b) { return a + b; }, 0.0, ds);
    if (threadIdx.x == 0) sc.base_part[std::size_t(r) * kMaxParts + c] = above;
  }
}

Parts split_rows(int R, int V, const float *logits) {
  int device = 0, sms = 0;
  KEEL_CUDA_CHECK(cudaGetDevice(&device));
  KEEL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int by_size = std::max(1, std::min(kMaxParts, V / kChunkMin));
  const int want = static_cast<int>((2 * std::int64_t(std::max(sms, 1)) + R - 1) / R);
  Parts pt;
  pt.P = std::max(1, std::min(want, by_size));
  pt.chunk = ((V + pt.P - 1) / pt.P + 3) / 4 * 4;
  pt.P = (V + pt.chunk - 1) / pt.chunk;
  pt.vec = V % 4 == 0 && reinterpret_cast<std::uintptr_t>(logits) % 16 == 0;
  int bits = 0;
  while (bits < 31 && (std::int64_t(1) << bits) <= V) ++bits;
  pt.mass_shift = std::min(44, 62 - bits);  // V entries of p <= 1: at most 2^62 per bucket
  return pt;
}

}  // namespace

std::size_t sample_scratch_bytes(int max_rows, int V) {
  if (max_rows <= 0 || V <= 0) return 0;
  return fixed_bytes(max_rows, V) + align256(cub_bytes_for(max_rows, V));
}

void launch_sample(StreamRef s_ref, const float *logits, int R, int V, const SampleRow *rows,
                   const PenaltyEntry *penalties, void *scratch, std::size_t scratch_bytes,
                   std::int32_t *out_tokens, float *out_logprobs) {
  const cudaStream_t s = s_ref.get("launch_sample");
  if (R <= 0) return;
  if (V <= 0) throw Error(ErrorCode::kInvalidArgument, "sample: empty vocabulary");
  if (std::int64_t(R) * V >= (std::int64_t(1) << 31))
    throw Error(ErrorCode::kInvalidArgument, "sample: rows x vocab beyond int32 offsets");
  const std::size_t fixed = fixed_bytes(R, V), need_cub = cub_bytes_for(R, V);
  if (scratch_bytes < fixed + need_cub)
    throw Error(ErrorCode::kInvalidArgument, "sample: scratch too small");
  Scratch sc{};
  lay_out(scratch, R, V, sc);
  sc.cub_bytes = scratch_bytes - fixed;
  const Parts pt = split_rows(R, V, logits);
  const dim3 grid(R, pt.P);
  prepare_kernel<<<grid, kPartThreads, 0, s>>>(logits, V, pt, rows, penalties, sc);
  KEEL_CUDA_CHECK_LAUNCH("sample prepare");
  filter_kernel<<<grid, kPartThreads, 0, s>>>(logits, V, pt, rows, sc);
  KEEL_CUDA_CHECK_LAUNCH("sample filter");
  collect_kernel<<<grid, kPartThreads, 0, s>>>(logits, V, pt, rows, sc);
  KEEL_CUDA_CHECK_LAUNCH("sample collect");
  std::size_t cub_bytes = sc.cub_bytes;
  KEEL_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
      sc.cub_temp, cub_bytes, sc.keys_in, sc.keys_out, sc.ids_in, sc.ids_out,
      static_cast<std::int64_t>(R) * V, R, sc.offsets, sc.ends, 0, 32, s));
  launch_choose(s, logits, R, V, pt, rows, sc, out_tokens, out_logprobs);
}

}  // namespace keel::cuda
