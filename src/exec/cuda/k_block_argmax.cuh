// Argmax of one row by one thread block, shared by the greedy kernels (k_sampling.cu's
// argmax and k_sample.cu's greedy rows): the larger value wins, on equal values the lower
// index (HF's torch.argmax and std::max_element pick the first), NaN never wins over a
// number.
#pragma once

#include <cfloat>

namespace keel::cuda {

__device__ __forceinline__ void argmax_better(float &v, int &i, float v2, int i2) {
  if (v2 > v || (v2 == v && i2 < i) || (v != v && v2 == v2)) {
    v = v2;
    i = i2;
  }
}

// Every thread of a block of kThreads (32 warps at most) calls it with its own candidate
// (v, i); the block's winner is in thread 0's (v, i) afterwards. sv, si: [kThreads / 32]
// shared scratch.
template <int kThreads>
__device__ void block_argmax_reduce(float &v, int &idx, float *sv, int *si) {
  for (int o = 16; o > 0; o >>= 1)
    argmax_better(v, idx, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, idx, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // the scratch may have served the caller before
  if (lane == 0) {
    sv[warp] = v;
    si[warp] = idx;
  }
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? sv[lane] : -FLT_MAX;
    idx = lane < kThreads / 32 ? si[lane] : 0x7fffffff;
    for (int o = 16; o > 0; o >>= 1)
      argmax_better(v, idx, __shfl_xor_sync(0xffffffffu, v, o),
                    __shfl_xor_sync(0xffffffffu, idx, o));
  }
}

// The argmax of a whole row; the index is valid in thread 0 (0 when no entry beats
// -FLT_MAX).
template <int kThreads>
__device__ int block_argmax(const float *row, int V, float *sv, int *si) {
  float v = -FLT_MAX;
  int idx = 0x7fffffff;
  for (int i = threadIdx.x; i < V; i += kThreads) argmax_better(v, idx, row[i], i);
  block_argmax_reduce<kThreads>(v, idx, sv, si);
  return idx == 0x7fffffff ? 0 : idx;
}

}  // namespace keel::cuda
