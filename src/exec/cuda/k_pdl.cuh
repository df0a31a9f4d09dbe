// Programmatic dependent launch (sm_90 PDL): a kernel launched with the attribute may
// start while the previous kernel on its stream drains, and must wait for it
// (griddepcontrol.wait) before touching anything that kernel writes or reads. Shared by
// the fused decode kernels and the decode attention kernel.
#pragma once

#include <cuda_runtime.h>

#include "exec/cuda/cuda_check.h"

namespace keel::cuda {

// Both are no-ops in a kernel launched without the attribute, and compiled out of the
// machine code for GPUs before Hopper, where the runtime never sets the attribute
// (CudaFeatures::programmatic_launch): there a kernel starts only after the one before
// it ended, so there is nothing to wait for.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, s>>>(params), as a programmatic dependent when `pdl`
// (callers pass CudaFeatures::programmatic_launch, false before sm_90).
template <typename Params>
void launch_maybe_pdl(void (*kernel)(Params), dim3 grid, dim3 block, std::size_t smem,
                      cudaStream_t s, bool pdl, const Params &params) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  KEEL_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, params));
}

}  // namespace keel::cuda
