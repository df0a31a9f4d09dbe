// Eight bf16 values in a 16-byte word (the kernels' vector loads and stores of bf16 rows) to
// and from f32: one definition for every kernel file.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace keel::cuda {

__device__ __forceinline__ void bf16x8_to_float(const uint4 &raw, float f[8]) {
  const __nv_bfloat162 *h2 = reinterpret_cast<const __nv_bfloat162 *>(&raw);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 v = __bfloat1622float2(h2[e]);
    f[2 * e] = v.x;
    f[2 * e + 1] = v.y;
  }
}

// Rounded to nearest even, as __float2bfloat16.
__device__ __forceinline__ uint4 float8_to_bf16x8(const float f[8]) {
  uint4 raw;
  __nv_bfloat162 *h2 = reinterpret_cast<__nv_bfloat162 *>(&raw);
#pragma unroll
  for (int e = 0; e < 4; ++e) h2[e] = __floats2bfloat162_rn(f[2 * e], f[2 * e + 1]);
  return raw;
}

}  // namespace keel::cuda
