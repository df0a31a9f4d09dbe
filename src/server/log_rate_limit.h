// Bounds how many lines of one kind reach the log: at most `burst` a `period`; the first
// line let through after a quiet spell says how many were held back. Used for 401s, which
// anyone who can reach the port can send by the thousand, and which would otherwise push
// real lines out of the dashboard's 1,000-line log (GET /api/logs).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

namespace keel::server {

class LogRateLimit {
 public:
  using Clock = std::chrono::steady_clock;
  LogRateLimit(int burst, std::chrono::milliseconds period) : burst_(burst), period_(period) {}

  // True when this line may be written; `*held_back` (when true) is then the count of
  // lines refused since the last one let through.
  bool allow(std::uint64_t *held_back, Clock::time_point now = Clock::now());

 private:
  std::mutex mu_;
  int burst_;
  std::chrono::milliseconds period_;
  Clock::time_point window_start_{};
  int in_window_ = 0;
  std::uint64_t held_back_ = 0;
};

}  // namespace keel::server
