#include "exec/cpu/vec_math.h"

#include <algorithm>
#include <limits>

namespace keel::cpu {

namespace {

constexpr std::size_t kLanes = 16;  // independent accumulators: one 512-bit register of floats
constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace

MaxMin max_and_min_finite(std::span<const float> x) {
  float hi[kLanes], lo[kLanes];
  std::fill(hi, hi + kLanes, -kInf);
  std::fill(lo, lo + kLanes, kInf);
  const std::size_t whole = x.size() / kLanes * kLanes;
  for (std::size_t i = 0; i < whole; i += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) {
      const float v = x[i + j];
      hi[j] = v > hi[j] ? v : hi[j];
      const float f = v > -kInf ? v : kInf;  // -inf and NaN ignored
      lo[j] = f < lo[j] ? f : lo[j];
    }
  MaxMin r{-kInf, kInf};
  for (std::size_t j = 0; j < kLanes; ++j) {
    r.max = hi[j] > r.max ? hi[j] : r.max;
    r.min_finite = lo[j] < r.min_finite ? lo[j] : r.min_finite;
  }
  for (std::size_t i = whole; i < x.size(); ++i) {
    if (x[i] > r.max) r.max = x[i];
    if (x[i] > -kInf && x[i] < r.min_finite) r.min_finite = x[i];
  }
  return r;
}

float max_value(std::span<const float> x) { return max_and_min_finite(x).max; }

float min_finite_value(std::span<const float> x) { return max_and_min_finite(x).min_finite; }

std::int64_t first_argmax(std::span<const float> x) {
  // One pass of block maxima (each block's max vectorizes); the first block with the
  // largest holds the first index of it.
  constexpr std::size_t kBlock = 256;
  float best = -kInf;
  std::size_t best_block = x.size();
  for (std::size_t b = 0; b < x.size(); b += kBlock) {
    const std::size_t e = std::min(x.size(), b + kBlock);
    float m[kLanes];
    std::fill(m, m + kLanes, -kInf);
    std::size_t i = b;
    for (; i + kLanes <= e; i += kLanes)
      for (std::size_t j = 0; j < kLanes; ++j) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    float bm = -kInf;
    for (float v : m) bm = v > bm ? v : bm;
    for (; i < e; ++i) bm = x[i] > bm ? x[i] : bm;
    if (bm > best || (best_block == x.size() && bm == best)) best = bm, best_block = b;
  }
  if (best_block == x.size()) return 0;
  for (std::size_t i = best_block; i < x.size(); ++i)
    if (x[i] == best) return static_cast<std::int64_t>(i);
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

namespace {

// sum of expf_nonpos(x[i] - mx): a chunk of terms at a time (an elementwise loop:
// vectorizes), summed into 8 double lanes.
double sum_expf(std::span<const float> x, float mx) {
  constexpr std::size_t kChunk = 256, kD = 8;
  float e[kChunk];
  double acc[kD] = {};
  double s = 0;
  for (std::size_t c0 = 0; c0 < x.size(); c0 += kChunk) {
    const std::size_t n = std::min(kChunk, x.size() - c0);
    const float *xc = x.data() + c0;
    for (std::size_t j = 0; j < n; ++j) e[j] = expf_nonpos(xc[j] - mx);
    const std::size_t whole = n / kD * kD;
    for (std::size_t j = 0; j < whole; j += kD)
      for (std::size_t l = 0; l < kD; ++l) acc[l] += e[j + l];
    for (std::size_t j = whole; j < n; ++j) s += e[j];
  }
  for (double a : acc) s += a;
  return s;
}

}  // namespace

double log_sum_exp(std::span<const float> x, ThreadPool *pool) {
  const float mx = max_value(x);
  if (!(mx > -kInf) || mx == kInf) return mx;
  constexpr std::size_t kParts = 4;  // fixed: the same sum whatever the pool
  double part[kParts];
  auto run = [&](std::size_t p) {
    const std::size_t a = x.size() * p / kParts, b = x.size() * (p + 1) / kParts;
    part[p] = sum_expf(x.subspan(a, b - a), mx);
  };
  if (pool && pool->size() > 1)
    pool->parallel_for(kParts, [&](std::int64_t a, std::int64_t b) {
      for (std::int64_t p = a; p < b; ++p) run(static_cast<std::size_t>(p));
    });
  else
    for (std::size_t p = 0; p < kParts; ++p) run(p);
  double s = 0;
  for (double v : part) s += v;
  return mx + std::log(s);
}

}  // namespace keel::cpu
