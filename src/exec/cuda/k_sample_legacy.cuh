// The single-block-per-row device sampler that k_sample.cu replaced (same semantics, same
// scratch contract as launch_sample / sample_scratch_bytes in kernels.h), for A/B timing in
// cuda_sample_bench and an old-vs-new equality test. Host declarations only: .cpp files
// may include it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "exec/cuda/kernels.h"

namespace keel::cuda {

std::size_t sample_legacy_scratch_bytes(int max_rows, int V);
void launch_sample_legacy(cudaStream_t s, const float *logits, int R, int V, const SampleRow *rows,
                          const PenaltyEntry *penalties, void *scratch, std::size_t scratch_bytes,
                          std::int32_t *out_tokens, float *out_logprobs);

}  // namespace keel::cuda
