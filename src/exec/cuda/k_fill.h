// Pseudo-random device fill (see k_fill.cu).
#pragma once

#include <cstdint>

#include "exec/cuda/kernels.h"

namespace keel::cuda {

// out[i] = bf16(lo + (hi - lo) * u(seed, i)), u uniform in [0, 1). out [n] bf16.
void launch_fill_uniform(StreamRef s, bf16 *out, std::int64_t n, std::uint64_t seed, float lo,
                         float hi);

// `blocks` MXFP4 blocks (17 bytes each, formats/mxfp4.h) at out: random codes under one
// power-of-two scale chosen so the values' variance is about 1 / fan_in.
void launch_fill_mxfp4(StreamRef s, void *out, std::int64_t blocks, std::uint64_t seed,
                       std::int64_t fan_in);

}  // namespace keel::cuda
