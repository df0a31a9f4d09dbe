// Latency of the generations that finished in the last minute (time to first token and
// end to end), for /api/status and the dashboard's latency chart. Bounded: at most
// `capacity` samples, older than `window` dropped. Thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <mutex>

namespace keel::server {

struct LatencySummary {
  std::size_t requests = 0;
  double ttft_p50_ms = 0, ttft_p90_ms = 0, e2e_p50_ms = 0, e2e_p90_ms = 0;
};

class LatencyWindow {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LatencyWindow(std::chrono::seconds window = std::chrono::seconds(60),
                         std::size_t capacity = 4096)
      : window_(window), capacity_(capacity) {}
  void add(double ttft_ms, double e2e_ms, Clock::time_point at = Clock::now());
  LatencySummary summary(Clock::time_point now = Clock::now()) const;
  std::chrono::seconds window() const { return window_; }

 private:
  struct Sample {
    Clock::time_point at;
    double ttft_ms, e2e_ms;
  };
  void drop_old(Clock::time_point now) const;  // under mu_

  const std::chrono::seconds window_;
  const std::size_t capacity_;
  mutable std::mutex mu_;
  mutable std::deque<Sample> samples_;
};

}  // namespace keel::server
