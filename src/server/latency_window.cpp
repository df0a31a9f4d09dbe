#include "server/latency_window.h"

#include <algorithm>
#include <vector>

namespace keel::server {

namespace {

// Nearest-rank percentile of sorted values.
double rank(const std::vector<double> &sorted, double p) {
  if (sorted.empty()) return 0;
  const auto i = static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

}  // namespace

void LatencyWindow::add(double ttft_ms, double e2e_ms, Clock::time_point at) {
  std::lock_guard lock(mu_);
  samples_.push_back({at, ttft_ms, e2e_ms});
  while (samples_.size() > capacity_) samples_.pop_front();
  drop_old(at);
}

void LatencyWindow::drop_old(Clock::time_point now) const {
  while (!samples_.empty() && now - samples_.front().at > window_) samples_.pop_front();
}

LatencySummary LatencyWindow::summary(Clock::time_point now) const {
  std::vector<double> ttft, e2e;
  {
    std::lock_guard lock(mu_);
    drop_old(now);
    for (const auto &s : samples_) {
      ttft.push_back(s.ttft_ms);
      e2e.push_back(s.e2e_ms);
    }
  }
  std::sort(ttft.begin(), ttft.end());
  std::sort(e2e.begin(), e2e.end());
  return {ttft.size(), rank(ttft, 0.5), rank(ttft, 0.9), rank(e2e, 0.5), rank(e2e, 0.9)};
}

}  // namespace keel::server
