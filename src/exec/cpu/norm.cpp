#include "exec/cpu/norm.h"

#include <cmath>

namespace keel::cpu {

void rmsnorm(const float *x, const float *w, float *y, std::int64_t rows, std::int64_t n,
             float eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    double ss = 0;
    for (std::int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
    for (std::int64_t i = 0; i < n; ++i) yr[i] = w[i] * (xr[i] * inv);
  }
}

void rmsnorm_reference(const float *x, const float *w, float *y, std::int64_t rows, std::int64_t n,
                       float eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (std::int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[r * n + i]) * x[r * n + i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (std::int64_t i = 0; i < n; ++i)
      y[r * n + i] = static_cast<float>(w[i] * (x[r * n + i] * inv));
  }
}

}  // namespace keel::cpu
