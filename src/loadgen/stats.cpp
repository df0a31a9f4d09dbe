#include "loadgen/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace keel::loadgen {

namespace {

double sorted_percentile(const std::vector<double> &sorted, double p) {
  if (sorted.empty()) return 0;
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

}  // namespace

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return sorted_percentile(values, p);
}

Summary summarize(const std::vector<double> &values) {
  Summary s;
  if (values.empty()) return s;
  std::vector<double> v = values;
  std::sort(v.begin(), v.end());
  s.count = static_cast<int>(v.size());
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  s.min = v.front();
  s.max = v.back();
  s.p50 = sorted_percentile(v, 50);
  s.p90 = sorted_percentile(v, 90);
  s.p99 = sorted_percentile(v, 99);
  return s;
}

}  // namespace keel::loadgen
