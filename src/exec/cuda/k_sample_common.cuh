// Shared pieces of the device sampler (k_sample.cu, k_sample_choose.cu): the scratch
// layout, the row split into parts, and the small block-level helpers. Device code only
// (included by .cu files).
#pragma once

#include <cfloat>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "exec/cuda/k_block_argmax.cuh"
#include "exec/cuda/kernels.h"

namespace keel::cuda::sample_detail {

constexpr int kThreads = 1024;       // choose_kernel: one block per row
constexpr int kPartThreads = 512;    // prepare / filter / collect: one block per part of a row
constexpr int kFilterCap = 4096;     // candidates a filtered row may keep (sorted in shared)
constexpr int kBuckets = 2048;       // mass histogram over the distance below the top logit
constexpr double kGapMax = 48.0;     // nats; farther candidates share the last bucket
constexpr double kMassSlack = 1e-4;  // fraction of the row's mass: beyond any summation error
constexpr int kChunkMin = 2048;      // entries a part covers at least
constexpr int kMaxParts = 64;        // parts per row at most
static_assert(kBuckets == 4 * kPartThreads, "the cut scan gives each thread 4 buckets");

// How a row is split: P parts of `chunk` entries (a multiple of 4), the last one shorter.
struct Parts {
  int P = 1;
  int chunk = 0;
  bool vec = false;    // float4 loads: V % 4 == 0 and the logits 16-byte aligned
  int mass_shift = 0;  // histogram masses are p * 2^mass_shift as integers (exact sums)
};

// Per-(row, part) partials are [R][kMaxParts]; per-row histograms [R][kBuckets].
struct Scratch {
  // The full-sort fallback (CUB): keys_in/ids_in hold the rows it sorts, *_out the result.
  // keys_in also holds the penalised copy of every row with penalty entries.
  float *keys_in, *keys_out;
  std::int32_t *ids_in, *ids_out, *offsets, *ends;  // ends[r] = offsets[r]: not sorted
  // Per (row, part): raw log-sum-exp (max, sum of exp(x - max)), penalised max, penalised
  // argmax (value, index), the part's sum of p at the temperature (filter), the part's sum
  // of p above the filtered window (collect).
  float *raw_max;
  double *raw_sum;
  float *pen_max, *arg_val;
  std::int32_t *arg_idx;
  double *mass_part, *base_part;
  // Per row, decided by the filter's last block: kept (-1: sorted whole; else the count of
  // candidates in buckets [lo, hi]), sums (the row's normaliser at its temperature), wmax
  // (the penalised row's max). counter/fill: the filter's done-blocks and collect's append
  // slot (zeroed by prepare every launch).
  std::int32_t *kept, *lo, *hi, *counter, *fill;
  double *sums;
  float *wmax;
  std::int32_t *hist_count;       // [R][kBuckets]
  unsigned long long *hist_mass;  // [R][kBuckets]
  unsigned long long *cand;       // [R][cand_cap] candidate keys, unordered
  int cand_cap;
  void *cub_temp;
  std::size_t cub_bytes;
};

inline std::size_t align256(std::size_t n) { return (n + 255) / 256 * 256; }

// Lays the scratch out from base (nullptr: sizes only); returns the bytes before the CUB
// temporary storage, which takes the rest.
inline std::size_t lay_out(void *base, int R, int V, Scratch &s) {
  const std::size_t rv = std::size_t(R) * V, rp = std::size_t(R) * kMaxParts;
  std::size_t off = 0;
  auto take = [&](auto *&ptr, std::size_t count) {
    using T = std::remove_reference_t<decltype(*ptr)>;
    ptr = base ? reinterpret_cast<T *>(static_cast<unsigned char *>(base) + off) : nullptr;
    off += align256(count * sizeof(T));
  };
  s.cand_cap = V < kFilterCap ? V : kFilterCap;
  take(s.keys_in, rv);
  take(s.keys_out, rv);
  take(s.ids_in, rv);
  take(s.ids_out, rv);
  take(s.offsets, R);
  take(s.ends, R);
  take(s.raw_max, rp);
  take(s.raw_sum, rp);
  take(s.pen_max, rp);
  take(s.arg_val, rp);
  take(s.arg_idx, rp);
  take(s.mass_part, rp);
  take(s.base_part, rp);
  take(s.kept, R);
  take(s.lo, R);
  take(s.hi, R);
  take(s.counter, R);
  take(s.fill, R);
  take(s.sums, R);
  take(s.wmax, R);
  take(s.hist_count, std::size_t(R) * kBuckets);
  take(s.hist_mass, std::size_t(R) * kBuckets);
  take(s.cand, std::size_t(R) * s.cand_cap);
  s.cub_temp = base ? static_cast<unsigned char *>(base) + off : nullptr;
  return off;
}

// p = exp(w / T - max / T) and the histogram bucket of w, with explicit roundings: every
// kernel (filter, collect, choose) must compute them bit for bit alike, so no FMA
// contraction may differ between them.
__device__ __forceinline__ double scaled(float w, double inv_t) {
  return __dmul_rn(static_cast<double>(w), inv_t);
}
__device__ __forceinline__ double prob(float w, double inv_t, double mx) {
  return exp(__dsub_rn(scaled(w, inv_t), mx));
}
__device__ __forceinline__ int bucket_of(float w, double inv_t, double mx) {
  const double gap = __dsub_rn(mx, scaled(w, inv_t));
  if (gap >= kGapMax) return kBuckets - 1;
  const int b = __double2int_rz(__dmul_rn(gap, kBuckets / kGapMax));  // NaN -> 0
  return b < 0 ? 0 : (b > kBuckets - 1 ? kBuckets - 1 : b);
}

// Ascending order of the float's value as an unsigned integer (-0 as +0).
__device__ __forceinline__ std::uint32_t ordered_bits(float f) {
  const std::uint32_t b = __float_as_uint(f == 0.0f ? 0.0f : f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float from_ordered_bits(std::uint32_t u) {
  return __uint_as_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u);
}
// (~ordered logit) << 32 | id: ascending order = the walk's order (logit desc, id asc).
__device__ __forceinline__ unsigned long long cand_key(float w, int i) {
  return (static_cast<unsigned long long>(~ordered_bits(w)) << 32) | static_cast<std::uint32_t>(i);
}
__device__ __forceinline__ float cand_logit(unsigned long long k) {
  return from_ordered_bits(~static_cast<std::uint32_t>(k >> 32));
}
__device__ __forceinline__ int cand_id(unsigned long long k) {
  return static_cast<int>(k & 0xffffffffu);
}

// Online log-sum-exp of one thread's values: m the max so far, s = sum exp(x - m). NaN
// values make s NaN (as the CPU's sum does); -inf adds nothing.
__device__ __forceinline__ void lse_add(float &m, double &s, float x) {
  const bool up = x > m;
  const double d = up ? double(m) - double(x) : double(x) - double(m);
  const double e = x == -INFINITY ? 0.0 : exp(d);
  s = up ? s * e + 1.0 : s + e;
  if (up) m = x;
}
__device__ __forceinline__ void lse_merge(float &m, double &s, float m2, double s2) {
  const float M = fmaxf(m, m2);
  const double a = m == -INFINITY ? 0.0 : s * exp(double(m) - double(M));
  const double b = m2 == -INFINITY ? 0.0 : s2 * exp(double(m2) - double(M));
  m = M;
  s = a + b;
}

// identity: op(x, identity) == x. Lanes past the block's warp count take it (a block of
// 512 threads has 16 warps: re-reading a warp's value there would add it again to a sum).
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T identity, T *shared /* [32] */) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // shared reused across calls
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < blockDim.x / 32 ? shared[lane] : identity;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;  // every thread holds the result
}

// Fixed-shape (hence deterministic) block reductions of per-thread pairs; the result is
// valid in every thread.
__device__ __forceinline__ void block_lse(float &m, double &s, float *fm, double *ds) {
  for (int o = 16; o > 0; o >>= 1)
    lse_merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) fm[warp] = m, ds[warp] = s;
  __syncthreads();
  const bool has = lane < blockDim.x / 32;
  m = has ? fm[lane] : -INFINITY;
  s = has ? ds[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1)
    lse_merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
}

// Calls f(i, value, valid) for the entries [c0, c1) of row, four per thread per step
// (float4 loads when vec: c0 % 4 == 0 and row 16-byte aligned). Every thread of the block
// makes the same number of calls, so f may use warp-wide votes.
template <typename F>
__device__ __forceinline__ void for_chunk(const float *row, int c0, int c1, bool vec, F f) {
  for (int i0 = c0; i0 < c1; i0 += 4 * kPartThreads) {
    const int i = i0 + 4 * threadIdx.x;
    float v[4];
    bool ok[4];
    if (vec && i + 3 < c1) {
      const float4 q = *reinterpret_cast<const float4 *>(row + i);
      v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
      ok[0] = ok[1] = ok[2] = ok[3] = true;
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        ok[k] = i + k < c1;
        v[k] = ok[k] ? row[i + k] : 0.0f;
      }
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) f(i + k, v[k], ok[k]);
  }
}

// choose_kernel (k_sample_choose.cu): one block of kThreads per row.
void launch_choose(cudaStream_t s, const float *logits, int R, int V, const Parts &pt,
                   const SampleRow *rows, const Scratch &sc, std::int32_t *out_tokens,
                   float *out_logprobs);

}  // namespace keel::cuda::sample_detail
