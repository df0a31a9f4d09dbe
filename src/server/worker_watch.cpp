#include "server/worker_watch.h"

namespace keel::server {

void WorkerWatch::posted(Clock::time_point now) {
  std::lock_guard lock(mu_);
  if (waiting_++ == 0) since_ = now;
}

void WorkerWatch::taken(Clock::time_point now) {
  std::lock_guard lock(mu_);
  if (waiting_ > 0) --waiting_;
  since_ = now;
}

std::optional<WorkerWatch::Stall> WorkerWatch::stalled(std::chrono::milliseconds deadline,
                                                       Clock::time_point now) const {
  std::lock_guard lock(mu_);
  if (deadline.count() <= 0 || waiting_ == 0) return std::nullopt;
  const auto age = now - since_;
  if (age <= deadline) return std::nullopt;
  return Stall{std::chrono::duration<double>(age).count(), waiting_};
}

std::size_t WorkerWatch::waiting() const {
  std::lock_guard lock(mu_);
  return waiting_;
}

}  // namespace keel::server
