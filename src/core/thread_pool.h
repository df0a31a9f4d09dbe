// A fixed pool of worker threads for data-parallel kernels. One pool per engine (no
// global pool), so two engines in one process size their own threads and never share
// hidden state. The calling thread takes part as thread 0.
//
// Wake-up is a generation counter: workers spin briefly on it (a decode step issues
// hundreds of parallel regions, each a few microseconds long) and then sleep on a
// futex (std::atomic::wait), so an idle engine costs no CPU.
//
// A region's thread indices are claimed, not assigned: whichever thread is running
// takes the next index, the caller included. On a machine with more runnable threads
// than cores a worker may not be scheduled for milliseconds; the caller then runs its
// share itself instead of waiting for it at the barrier. Each index still runs once,
// never two at a time, so results do not depend on which thread ran it.
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

  // Calls fn(thread_index, num_threads) once for every index in [0, num_threads), each
  // on one of the pool's threads (the caller's included), and returns when all have
  // returned. Not re-entrant: fn must not call
  // back into the same pool. Exceptions thrown by fn are rethrown here (the first).
  void run(const std::function<void(int, int)> &fn);

  // Calls fn(chunk, slot) once for every chunk in [0, chunks), claimed one at a time by
  // whichever thread is free; `slot` (in [0, size())) names the calling thread for the
  // region, so fn may keep per-slot scratch (two calls never share a slot at once). The
  // finer the chunks, the less a thread the OS has not scheduled holds up the region.
  void run_chunks(int chunks, const std::function<void(int, int)> &fn);

  // Splits [0, n) into num_threads contiguous chunks (fixed: a given n always gives the
  // same ranges, whichever thread runs each) and calls fn(begin, end) for each non-empty
  // chunk. `grain`: chunks are multiples of it (except the last), so kernels can keep
  // whole blocks per chunk.
  void parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)> &fn,
                    std::int64_t grain = 1);

 private:
  void worker_main(int slot);
  // Claims and runs the current region's chunks until none is left.
  void work(int slot);
  void run_task(int chunk, int slot);

  int num_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)> *task_ = nullptr;
  std::atomic<std::uint64_t> generation_{0};  // bumped per region: wakes the workers
  // [chunks: 32 bits][next chunk: 32 bits]; a claim is one fetch_add. The caller starts a
  // region only once its own claim came back past the end, and a claim compares its index
  // with the count in the same word: a late claim is past the end of the old region or
  // part of the new one, never a mix.
  std::atomic<std::uint64_t> ticket_{0};
  std::atomic<int> done_{0};  // chunks of the current region that have returned
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
  std::atomic<bool> has_error_{false};
};

}  // namespace keel
