// Structured output on the device sampler (issue 17): a step's token bitmasks, uploaded
// once, set the logits of disallowed tokens to -inf before launch_sample.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/stream_ref.h"

namespace keel::cuda {

// logits [R, V] f32, masked in place. row_mask [R] i32: the index of row r's mask in
// `masks`, or -1 for an unmasked row. masks [*, W] u32 with W = ceil(V / 32): bit t % 32
// of word t / 32 set when token t may be sampled (OutputConstraint::mask_words).
void launch_apply_token_masks(StreamRef s, float *logits, int R, int V,
                              const std::uint32_t *masks, const std::int32_t *row_mask);

// The CPU reference of launch_apply_token_masks (tests).
void apply_token_masks_reference(float *logits, int R, int V, const std::uint32_t *masks,
                                 const std::int32_t *row_mask);

}  // namespace keel::cuda
