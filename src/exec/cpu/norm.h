// RMSNorm, as HF Llama computes it: y = w * (x / sqrt(mean(x^2) + eps)), in float32
// with the mean of squares accumulated in double (per row, so batch-independent).
#pragma once

#include <cstdint>

namespace keel::cpu {

// x, y: [rows, n] (y may alias x); w: [n].
void rmsnorm(const float *x, const float *w, float *y, std::int64_t rows, std::int64_t n,
             float eps);
// Scalar reference in double throughout.
void rmsnorm_reference(const float *x, const float *w, float *y, std::int64_t rows, std::int64_t n,
                       float eps);

}  // namespace keel::cpu
