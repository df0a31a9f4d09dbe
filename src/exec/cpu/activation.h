// Elementwise and row-wise helpers of the forward pass: SwiGLU and a stable softmax.
#pragma once

#include <cstdint>

namespace keel::cpu {

// out[i] = silu(gate[i]) * up[i] over n elements (out may alias gate).
void swiglu(const float *gate, const float *up, float *out, std::int64_t n);

// In-place softmax of x[0, n), max-subtracted, accumulated in double.
void softmax(float *x, std::int64_t n);

// log_softmax of x[0, n) into out (double accumulation, as a reference should).
void log_softmax(const float *x, float *out, std::int64_t n);

}  // namespace keel::cpu
