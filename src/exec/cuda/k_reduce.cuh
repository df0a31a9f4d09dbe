// Warp and block reductions shared by the kernels that need a plain float sum or maximum
// (the latent attention, DSA's indexer, the MoE decode kernels). Every lane of a warp, or
// every thread of a block, gets the result.
#pragma once

namespace keel::cuda::reduce {

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a block of Threads threads; `red` is Threads / 32 floats of shared memory. It
// may be called again right after: the leading barrier keeps a slow warp's read of the
// previous call's `red` from being overwritten.
template <int Threads>
__device__ float block_sum(float v, float *red) {
  static_assert(Threads % 32 == 0 && Threads <= 1024, "whole warps");
  v = warp_sum(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < Threads / 32; ++w) total += red[w];
  return total;
}

}  // namespace keel::cuda::reduce
