// A fixed pool of worker threads for data-parallel kernels. One pool per engine (no
// global pool), so two engines in one process size their own threads and never share
// hidden state. The calling thread takes part as thread 0.
//
// Wake-up is a generation counter: workers spin briefly on it (a decode step issues
// hundreds of parallel regions, each a few microseconds long) and then sleep on a
// futex (std::atomic::wait), so an idle engine costs no CPU.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace keel {

class ThreadPool {
 public:
  // threads <= 0: one per hardware thread.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  int size() const { return num_threads_; }

  // Calls fn(thread_index, num_threads) once on every thread of the pool (the caller
  // is thread 0) and returns when all have returned. Not re-entrant: fn must not call
  // back into the same pool. Exceptions thrown by fn are rethrown here (the first).
  void run(const std::function<void(int, int)> &fn);

  // Splits [0, n) into num_threads contiguous chunks (static, so that a given n
  // always gives each thread the same range) and calls fn(begin, end) for each
  // non-empty chunk. `grain`: chunks are multiples of it (except the last), so
  // kernels can keep whole blocks per thread.
  void parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)> &fn,
                    std::int64_t grain = 1);

 private:
  void worker_main(int index);
  void run_task(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)> *task_ = nullptr;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
  std::atomic<bool> has_error_{false};
};

}  // namespace keel
