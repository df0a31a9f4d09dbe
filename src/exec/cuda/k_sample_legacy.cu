// The device sampler as it was before the multi-block rewrite (k_sample.cu), kept so that
// cuda_sample_bench can time both in one run and a test can check that both pick the same
// tokens. One block of 1024 threads per row for every kernel. Delete once nobody needs the
// comparison.
//
// Sampling on the device (see kernels.h for the semantics): prepare (copy, penalties,
// log-sum-exp of the raw row); filter (stochastic rows: the few candidates that can be
// chosen, sorted in shared memory); a stable segmented radix sort by logit, descending,
// of the rows the filter could not narrow (greedy and filtered rows get an empty
// segment); then one block per row walks the sorted candidates with block-wide scans in
// double precision, or takes the argmax of the penalised row when greedy.
//
// Why the filter gives the same token as sorting the whole row: the walk only ever looks
// at a prefix of the sorted row -- up to top_k, the top_p crossing, the min_p cut, and the
// first candidate whose cumulative probability exceeds u * total. A histogram of the
// probability mass by distance below the top logit finds a logit threshold whose
// candidates hold that prefix with a margin (enough mass for max(u, top_p), at least
// top_k candidates, every candidate min_p keeps); only those are sorted, and the whole
// row's normaliser is summed unsorted. Rows it cannot narrow to kFilterCap candidates
// (u or top_p within the margin of 1, huge top_k, tiny min_p) take the full sort.
#include <cfloat>
#include <cub/cub.cuh>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_block_argmax.cuh"
#include "exec/cuda/k_sample_legacy.cuh"
#include "exec/cuda/kernels.h"

namespace keel::cuda {

namespace {
constexpr int kThreads = 1024;
constexpr int kFilterCap = 4096;     // candidates a filtered row may keep (sorted in shared)
constexpr int kBuckets = 1024;       // mass histogram over the distance below the top logit
constexpr double kGapMax = 48.0;     // nats; farther candidates share the last bucket
constexpr double kMassSlack = 1e-4;  // beyond float histogram error and double rounding

struct Scratch {  // carved out of one allocation, 256-byte aligned pieces
  float *keys_in, *keys_out, *lse;
  std::int32_t *ids_in, *ids_out, *offsets, *ends;  // ends[r]: offsets[r] when not sorted
  // kept[r]: -1 when row r is sorted whole (keys_out/ids_out); else the filtered row's
  // candidate count, sorted at the start of its keys_in/ids_in. sums[r]: its normaliser.
  std::int32_t *kept;
  double *sums;
  void *cub_temp;
  std::size_t cub_bytes;
};

std::size_t align256(std::size_t n) { return (n + 255) / 256 * 256; }

std::size_t fixed_bytes(int R, int V) {
  const std::size_t rv = std::size_t(R) * V;
  return 4 * align256(rv * 4) + 4 * align256(R * 4) + align256(R * 8);
}

Scratch carve(void *base, int R, int V, std::size_t total) {
  const std::size_t rv = std::size_t(R) * V;
  auto *p = static_cast<unsigned char *>(base);
  Scratch s{};
  s.keys_in = reinterpret_cast<float *>(p);
  p += align256(rv * 4);
  s.keys_out = reinterpret_cast<float *>(p);
  p += align256(rv * 4);
  s.ids_in = reinterpret_cast<std::int32_t *>(p);
  p += align256(rv * 4);
  s.ids_out = reinterpret_cast<std::int32_t *>(p);
  p += align256(rv * 4);
  s.offsets = reinterpret_cast<std::int32_t *>(p);
  p += align256(R * 4);
  s.lse = reinterpret_cast<float *>(p);
  p += align256(R * 4);
  s.ends = reinterpret_cast<std::int32_t *>(p);
  p += align256(R * 4);
  s.kept = reinterpret_cast<std::int32_t *>(p);
  p += align256(R * 4);
  s.sums = reinterpret_cast<double *>(p);
  p += align256(R * 8);
  s.cub_temp = p;
  s.cub_bytes = total - fixed_bytes(R, V);
  return s;
}

std::size_t cub_bytes_for(int R, int V) {
  std::size_t bytes = 0;
  KEEL_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, bytes, static_cast<const float *>(nullptr), static_cast<float *>(nullptr),
      static_cast<const std::int32_t *>(nullptr), static_cast<std::int32_t *>(nullptr),
      static_cast<std::int64_t>(R) * V, R, static_cast<const std::int32_t *>(nullptr),
      static_cast<const std::int32_t *>(nullptr) + 1, 0, 32, cudaStream_t(0)));
  return bytes;
}

template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T *shared /* [32] */) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // shared reused across calls
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = shared[lane < blockDim.x / 32 ? lane : 0];
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;  // every thread holds the result
}

__global__ void __launch_bounds__(kThreads)
    prepare_kernel(const float *logits, int R, int V, const SampleRow *rows,
                   const PenaltyEntry *penalties, Scratch sc) {
  __shared__ float fs[32];
  __shared__ double ds[32];
  const int r = blockIdx.x;
  const std::int64_t base = std::int64_t(r) * V;
  const bool sorts = rows[r].inv_temperature > 0.0f;
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < V; i += kThreads) {
    const float v = logits[base + i];
    sc.keys_in[base + i] = v;
    if (sorts) sc.ids_in[base + i] = i;
    mx = fmaxf(mx, v);
  }
  if (threadIdx.x == 0) {
    sc.offsets[r] = static_cast<std::int32_t>(base);
    sc.ends[r] = static_cast<std::int32_t>(sorts ? base + V : base);
  }
  mx = block_reduce(
      mx, [](float a, float b) { return fmaxf(a, b); }, fs);
  double sum = 0;
  if (isfinite(mx))
    for (int i = threadIdx.x; i < V; i += kThreads) sum += exp(double(logits[base + i]) - mx);
  sum = block_reduce(
      sum, [](double a, double b) { return a + b; }, ds);
  if (threadIdx.x == 0) sc.lse[r] = isfinite(mx) ? static_cast<float>(mx + log(sum)) : mx;
  __syncthreads();  // the row copy is complete before penalties rewrite entries of it
  const SampleRow row = rows[r];
  for (int e = threadIdx.x; e < row.penalty_count; e += kThreads) {
    const PenaltyEntry pe = penalties[row.penalty_begin + e];
    if (pe.token < 0 || pe.token >= V) continue;
    float w = sc.keys_in[base + pe.token];
    if (row.repetition_penalty != 1.0f)
      w = w > 0 ? w / row.repetition_penalty : w * row.repetition_penalty;
    if (pe.generated_count > 0 && (row.presence_penalty != 0.0f || row.frequency_penalty != 0.0f))
      w -= row.presence_penalty + row.frequency_penalty * static_cast<float>(pe.generated_count);
    sc.keys_in[base + pe.token] = w;
  }
}

// Ascending order of the float's value as an unsigned integer (-0 as +0).
__device__ std::uint32_t ordered_bits(float f) {
  const std::uint32_t b = __float_as_uint(f == 0.0f ? 0.0f : f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ float from_ordered_bits(std::uint32_t u) {
  return __uint_as_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u);
}

__global__ void __launch_bounds__(kThreads)
    filter_kernel(int V, const SampleRow *rows, Scratch sc) {
  __shared__ union {
    struct {
      float mass[kBuckets];
      int count[kBuckets];
    } hist;
    unsigned long long keys[kFilterCap];  // (~ordered logit) << 32 | id: ascending = the walk
  } sm;
  __shared__ float fs[32];
  __shared__ double ds[32];
  __shared__ int cut_bucket, cut_count, fill;
  const int r = blockIdx.x;
  const SampleRow row = rows[r];
  if (row.inv_temperature <= 0.0f) return;  // greedy: argmax in choose_kernel
  const std::int64_t base = std::int64_t(r) * V;
  float *w = sc.keys_in + base;
  float wmax = -INFINITY;
  for (int i = threadIdx.x; i < V; i += kThreads) wmax = fmaxf(wmax, w[i]);
  wmax = block_reduce(
      wmax, [](float a, float b) { return fmaxf(a, b); }, fs);
  const double inv_t = row.inv_temperature;
  const double mx = double(wmax) * inv_t;
  const double bucket_per_nat = kBuckets / kGapMax;
  auto bucket_of = [&](float v) {
    const double gap = mx - double(v) * inv_t;
    return gap >= kGapMax ? kBuckets - 1 : max(0, static_cast<int>(gap * bucket_per_nat));
  };
  for (int b = threadIdx.x; b < kBuckets; b += kThreads) sm.hist.mass[b] = 0, sm.hist.count[b] = 0;
  __syncthreads();
  double sum = 0;
  for (int i = threadIdx.x; i < V; i += kThreads) {
    const double p = exp(double(w[i]) * inv_t - mx);  // choose_kernel's p, term for term
    sum += p;
    const int b = bucket_of(w[i]);
    atomicAdd(&sm.hist.mass[b], static_cast<float>(p));
    atomicAdd(&sm.hist.count[b], 1);
  }
  sum = block_reduce(
      sum, [](double a, double b) { return a + b; }, ds);
  if (threadIdx.x == 0) {
    const int need_count = row.top_k > 0 ? min(row.top_k, V) : 0;
    const double need_mass =
        row.top_k > 0 ? 0.0 : fmax(row.u, row.top_p < 1.0f ? double(row.top_p) : 0.0) + kMassSlack;
    // min_p alone decides where the walk's candidates end: keep every one it keeps.
    const double min_gap = row.top_k == 0 && row.top_p >= 1.0f && row.min_p > 0.0f
                               ? -log(double(row.min_p)) + 1e-3
                               : 0.0;
    int cut = -1, count = 0;
    if (need_mass < 1.0) {
      double mass = 0;
      for (int b = 0; b < kBuckets; ++b) {
        mass += sm.hist.mass[b];
        count += sm.hist.count[b];
        const double upper = b == kBuckets - 1 ? INFINITY : (b + 1) / bucket_per_nat;
        if (count >= need_count && mass >= need_mass * sum && upper >= min_gap) {
          cut = b;
          break;
        }
      }
    }
    if (count > kFilterCap) cut = -1;
    cut_bucket = cut;
    cut_count = count;
    fill = 0;
    sc.kept[r] = cut < 0 ? -1 : count;
    sc.sums[r] = sum;
    if (cut >= 0) sc.ends[r] = sc.offsets[r];  // the global sort skips this row
  }
  __syncthreads();  // the histogram is read; its space becomes the keys
  const int cut = cut_bucket, n = cut_count;
  if (cut < 0) return;
  for (int i = threadIdx.x; i < V; i += kThreads)
    if (bucket_of(w[i]) <= cut) {
      const int slot = atomicAdd(&fill, 1);
      if (slot < kFilterCap)
        sm.keys[slot] = (static_cast<unsigned long long>(~ordered_bits(w[i])) << 32) |
                        static_cast<std::uint32_t>(i);
    }
  int P = 1;
  while (P < n) P <<= 1;
  __syncthreads();
  for (int i = n + threadIdx.x; i < P; i += kThreads) sm.keys[i] = ~0ull;
  __syncthreads();
  for (int k = 2; k <= P; k <<= 1)  // bitonic sort, ascending
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < P; i += kThreads) {
        const int other = i ^ j;
        if (other > i) {
          const unsigned long long a = sm.keys[i], b = sm.keys[other];
          if ((a > b) == ((i & k) == 0)) sm.keys[i] = b, sm.keys[other] = a;
        }
      }
      __syncthreads();
    }
  // Every read of the row is done: its start now holds the sorted candidates.
  std::int32_t *ids = sc.ids_in + base;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const unsigned long long k = sm.keys[i];
    w[i] = from_ordered_bits(~static_cast<std::uint32_t>(k >> 32));
    ids[i] = static_cast<std::int32_t>(k & 0xffffffffu);
  }
}

using BlockScan = cub::BlockScan<double, kThreads>;

// First index i < n whose inclusive prefix sum of q(i) satisfies pred, or -1.
template <typename Q, typename Pred>
__device__ int first_prefix(int n, Q q, Pred pred, BlockScan::TempStorage &tmp, int *found) {
  double running = 0;
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

__global__ void __launch_bounds__(kThreads)
    choose_kernel(const float *logits, int V, const SampleRow *rows, Scratch sc,
                  std::int32_t *out_tokens, float *out_logprobs) {
  __shared__ BlockScan::TempStorage tmp;
  __shared__ double ds[32];
  __shared__ float fs[32];
  __shared__ int is[32];
  __shared__ int found;
  const int r = blockIdx.x;
  const std::int64_t base = std::int64_t(r) * V;
  const SampleRow row = rows[r];
  int chosen = 0;
  if (row.inv_temperature <= 0.0f) {  // greedy: this row was not sorted
    chosen = block_argmax<kThreads>(sc.keys_in + base, V, fs, is);
  } else {
    // The sorted candidates: the filtered prefix (n of them) or the whole row.
    const int kept = sc.kept[r];
    const bool filtered = kept >= 0;
    const int n = filtered ? kept : V;
    const float *w = (filtered ? sc.keys_in : sc.keys_out) + base;
    const std::int32_t *id = (filtered ? sc.ids_in : sc.ids_out) + base;
    int keep = row.top_k > 0 ? min(row.top_k, V) : V;  // filtered with top_k: n >= keep
    const double inv_t = row.inv_temperature;
    const double mx = double(w[0]) * inv_t;
    auto p = [&](int i) { return exp(double(w[i]) * inv_t - mx); };
    double sum = 0;
    if (filtered && row.top_k == 0) {
      sum = sc.sums[r];  // over the whole row, unsorted
    } else {
      for (int i = threadIdx.x; i < keep; i += kThreads) sum += p(i);
      sum = block_reduce(
          sum, [](double a, double b) { return a + b; }, ds);
    }
    auto q = [&](int i) { return p(i) / sum; };
    if (row.top_p < 1.0f) {
      const double top_p = row.top_p;
      const int f = first_prefix(
          min(keep, n), q, [&](double cum) { return cum >= top_p; }, tmp, &found);
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
          first, [](int a, int b) { return min(a, b); }, is);
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
          total, [](double a, double b) { return a + b; }, ds);
    }
    const double target = row.u * total;
    const int f = first_prefix(
        min(keep, n), q, [&](double cum) { return target < cum; }, tmp, &found);
    chosen = id[f >= 0 ? f : min(keep, n) - 1];
  }
  if (threadIdx.x == 0) {
    out_tokens[r] = chosen;
    out_logprobs[r] = logits[base + chosen] - sc.lse[r];
  }
}
}  // namespace

std::size_t sample_legacy_scratch_bytes(int max_rows, int V) {
  if (max_rows <= 0 || V <= 0) return 0;
  return fixed_bytes(max_rows, V) + align256(cub_bytes_for(max_rows, V));
}

void launch_sample_legacy(cudaStream_t s, const float *logits, int R, int V, const SampleRow *rows,
                          const PenaltyEntry *penalties, void *scratch, std::size_t scratch_bytes,
                          std::int32_t *out_tokens, float *out_logprobs) {
  require_stream(s, "sample (legacy)");
  if (R <= 0) return;
  if (std::int64_t(R) * V >= (std::int64_t(1) << 31))
    throw Error(ErrorCode::kInvalidArgument, "sample: rows x vocab beyond int32 offsets");
  const std::size_t need_cub = cub_bytes_for(R, V);
  if (scratch_bytes < fixed_bytes(R, V) + need_cub)
    throw Error(ErrorCode::kInvalidArgument, "sample: scratch too small");
  const Scratch sc = carve(scratch, R, V, scratch_bytes);
  prepare_kernel<<<R, kThreads, 0, s>>>(logits, R, V, rows, penalties, sc);
  KEEL_CUDA_CHECK_LAUNCH("sample prepare");
  filter_kernel<<<R, kThreads, 0, s>>>(V, rows, sc);
  KEEL_CUDA_CHECK_LAUNCH("sample filter");
  std::size_t cub_bytes = sc.cub_bytes;
  KEEL_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
      sc.cub_temp, cub_bytes, sc.keys_in, sc.keys_out, sc.ids_in, sc.ids_out,
      static_cast<std::int64_t>(R) * V, R, sc.offsets, sc.ends, 0, 32, s));
  choose_kernel<<<R, kThreads, 0, s>>>(logits, V, rows, sc, out_tokens, out_logprobs);
  KEEL_CUDA_CHECK_LAUNCH("sample choose");
}

}  // namespace keel::cuda
