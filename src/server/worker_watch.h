// Liveness of the request handler pool. /health is answered on an I/O thread, so a pool
// whose every worker is stuck (a handler that never returns) would leave it "ok" while
// nothing is served. The pool's entry and its workers stamp this watch; /health turns
// 503 when requests have waited longer than the deadline (--worker-deadline) and no
// worker has taken one in that time.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>

namespace keel::server {

class WorkerWatch {
 public:
  using Clock = std::chrono::steady_clock;

  // A request entered the pool's queue.
  void posted(Clock::time_point now = Clock::now());
  // A worker took one from the queue.
  void taken(Clock::time_point now = Clock::now());

  struct Stall {
    double seconds = 0;       // since a worker last took a request (or the queue filled)
    std::size_t waiting = 0;  // requests in the queue
  };
  // The stall when requests wait and none was taken for longer than `deadline`
  // (0: never); nullopt while the pool keeps taking them.
  std::optional<Stall> stalled(std::chrono::milliseconds deadline,
                               Clock::time_point now = Clock::now()) const;
  std::size_t waiting() const;

 private:
  mutable std::mutex mu_;
  std::size_t waiting_ = 0;
  Clock::time_point since_{};  // the later of: the last take, the queue becoming non-empty
};

}  // namespace keel::server
