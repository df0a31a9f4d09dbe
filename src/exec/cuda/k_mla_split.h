// The split-K path of launch_mla_attention (k_mla_attention.h): absorb, split, combine.
#pragma once

#include <cuda_runtime.h>

#include "exec/cuda/k_mla_attention.h"

namespace keel::cuda {

// Launches the three kernels of the split path for p (p.num_splits > 0, p.num_tiles > 0);
// throws Error(kInvalidArgument) on shapes it does not take or missing scratch.
void launch_mla_split(cudaStream_t s, const MlaAttnParams &p);

}  // namespace keel::cuda
