// Argmax within one thread block, shared by the greedy kernels (k_sampling.cu's argmax
// and k_sample.cu's greedy rows): the larger value wins, on equal values the lower
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

// Every thread of the block (32 warps at most) calls it with its own candidate (v, i);
// afterwards every thread holds the block's winner. sv, si: [blockDim.x / 32] shared
// scratch. The reduction's shape is fixed, and argmax_better is a total order, so the
// winner never depends on timing.
__device__ __forceinline__ void block_argmax_reduce(float &v, int &idx, float *sv, int *si) {
  for (int o = 16; o > 0; o >>= 1)
    argmax_better(v, idx, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, idx, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // the scratch may have served the caller before
  if (lane == 0) {
    sv[warp] = v;
    si[warp] = idx;
  }
  __syncthreads();
  const bool has = lane < blockDim.x / 32;
  v = has ? sv[lane] : -FLT_MAX;
  idx = has ? si[lane] : 0x7fffffff;
  for (int o = 16; o > 0; o >>= 1)
    argmax_better(v, idx, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, idx, o));
}

}  // namespace keel::cuda
