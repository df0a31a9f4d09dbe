#include "exec/cpu/activation.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace keel::cpu {

void swiglu(const float *gate, const float *up, float *out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void softmax(float *x, std::int64_t n) {
  if (n <= 0) return;
  const float mx = *std::max_element(x, x + n);
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (std::int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void log_softmax(const float *x, float *out, std::int64_t n) {
  if (n <= 0) return;
  float mx = -std::numeric_limits<float>::infinity();
  for (std::int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  const double lse = mx + std::log(sum);
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<double>(x[i]) - lse);
}

}  // namespace keel::cpu
