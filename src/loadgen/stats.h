// Order statistics over a run's per-request measurements: percentiles by linear
// interpolation between closest ranks (numpy's default, as vLLM's benchmark reports).
#pragma once

#include <vector>

namespace keel::loadgen {

// The p-th percentile (0..100) of values; 0 for an empty set. Takes a copy to sort.
double percentile(std::vector<double> values, double p);

struct Summary {
  int count = 0;
  double mean = 0, min = 0, max = 0, p50 = 0, p90 = 0, p99 = 0;
};

Summary summarize(const std::vector<double> &values);

}  // namespace keel::loadgen
