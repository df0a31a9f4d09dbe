// The DSA indexer's scores on the tensor cores (k_dsa_scores_mma.cu), for launch_dsa_scores
// (k_dsa_indexer.h), which picks it where it takes the shape and keeps the fp32 kernel for the
// rest. Same contract: scores[r, s] for s in [0, p] of each selecting token t0 + r.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "exec/cuda/k_dsa_indexer.h"

namespace keel::cuda {

// Resident blocks a SM the kernel is built for (__launch_bounds__), for the grid's size.
inline constexpr int kDsaScoresMmaBlocksPerSm = 3;

// Index keys of 128 values, a multiple of 16 index heads up to 128, even rope <= 128.
bool dsa_scores_mma_supported(int Hi, int Di, int rope);
std::size_t dsa_scores_mma_smem(int Hi, int Di, int rope);
// p's shape supported and checked by the caller (launch_dsa_scores).
void launch_dsa_scores_mma(cudaStream_t s, const DsaScoreParams &p);

}  // namespace keel::cuda
