// Pseudo-random device fill (see k_fill.cu).
#pragma once

#include <cstdint>

#include "exec/cuda/kernels.h"

namespace keel::cuda {

// out[i] = bf16(lo + (hi - lo) * u(seed, i)), u uniform in [0, 1). out [n] bf16.
void launch_fill_uniform(StreamRef s, bf16 *out, std::int64_t n, std::uint64_t seed, float lo,
                         float hi);

}  // namespace keel::cuda
