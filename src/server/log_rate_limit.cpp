#include "server/log_rate_limit.h"

namespace keel::server {

bool LogRateLimit::allow(std::uint64_t *held_back, Clock::time_point now) {
  std::lock_guard lock(mu_);
  if (window_start_ == Clock::time_point{} || now - window_start_ >= period_) {
    window_start_ = now;
    in_window_ = 0;
  }
  if (in_window_ >= burst_) {
    ++held_back_;
    return false;
  }
  ++in_window_;
  *held_back = held_back_;
  held_back_ = 0;
  return true;
}

}  // namespace keel::server
