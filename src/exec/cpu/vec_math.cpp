#include "exec/cpu/vec_math.h"

#include <algorithm>
#include <limits>

namespace keel::cpu {

namespace {

constexpr std::size_t kLanes = 16;  // independent accumulators: one 512-bit register of floats
constexpr float kInf = std::numeric_limits<float>::infinity();

// Lane-wise max over whole blocks of kLanes; `m` keeps per-lane maxima (NaN never wins).
void lane_max(const float *x, std::size_t n, float *m) {
  for (std::size_t i = 0; i + kLanes <= n; i += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
}

}  // namespace

float max_value(std::span<const float> x) {
  float m[kLanes];
  std::fill(m, m + kLanes, -kInf);
  lane_max(x.data(), x.size(), m);
  float best = -kInf;
  for (float v : m) best = v > best ? v : best;
  for (std::size_t i = x.size() / kLanes * kLanes; i < x.size(); ++i)
    best = x[i] > best ? x[i] : best;
  return best;
}

float min_finite_value(std::span<const float> x) {
  float m[kLanes];
  std::fill(m, m + kLanes, kInf);
  const std::size_t whole = x.size() / kLanes * kLanes;
  for (std::size_t i = 0; i < whole; i += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) {
      const float v = x[i + j] > -kInf ? x[i + j] : kInf;  // -inf and NaN ignored
      m[j] = v < m[j] ? v : m[j];
    }
  float best = kInf;
  for (float v : m) best = v < best ? v : best;
  for (std::size_t i = whole; i < x.size(); ++i)
    if (x[i] > -kInf && x[i] < best) best = x[i];
  return best;
}

std::int64_t first_argmax(std::span<const float> x) {
  // The max first (vectorized), then the first block of 256 that holds it, then the index.
  const float best = max_value(x);
  constexpr std::size_t kBlock = 256;
  for (std::size_t b = 0; b < x.size(); b += kBlock) {
    const std::size_t e = std::min(x.size(), b + kBlock);
    bool has = false;
    for (std::size_t i = b; i < e; ++i) has |= x[i] == best;
    if (!has) continue;
    for (std::size_t i = b; i < e; ++i)
      if (x[i] == best) return static_cast<std::int64_t>(i);
  }
  return 0;
}

double sum_exp(std::span<const float> x, double scale, double shift) {
  constexpr std::size_t kD = 8;  // double lanes
  double acc[kD] = {};
  const std::size_t whole = x.size() / kD * kD;
  for (std::size_t i = 0; i < whole; i += kD)
    for (std::size_t j = 0; j < kD; ++j)
      acc[j] += exp_nonpos(fmadd(static_cast<double>(x[i + j]), scale, -shift));
  double s = 0;
  for (double a : acc) s += a;
  for (std::size_t i = whole; i < x.size(); ++i)
    s += exp_nonpos(fmadd(static_cast<double>(x[i]), scale, -shift));
  return s;
}

double log_sum_exp(std::span<const float> x) {
  const float mx = max_value(x);
  if (!(mx > -kInf) || mx == kInf) return mx;
  return mx + std::log(sum_exp(x, 1.0, mx));
}

}  // namespace keel::cpu
