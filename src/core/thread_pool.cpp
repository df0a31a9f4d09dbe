#include "core/thread_pool.h"

#include <algorithm>
#include <exception>
#include <mutex>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KEEL_CPU_RELAX() _mm_pause()
#else
#define KEEL_CPU_RELAX() ((void)0)
#endif

namespace keel {

namespace {
// Spin iterations before sleeping: long enough to bridge the gap between two kernels
// of one forward pass, short enough not to steal a core from other work for long.
constexpr int kSpinIterations = 1 << 12;
}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  num_threads_ = std::min(threads, 256);
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_main(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto &t : workers_) t.join();
}

void ThreadPool::run_task(int chunk, int slot) {
  try {
    (*task_)(chunk, slot);
  } catch (...) {
    bool expected = false;
    if (has_error_.compare_exchange_strong(expected, true)) error_ = std::current_exception();
  }
}

void ThreadPool::work(int slot) {
  for (;;) {
    // A claim below the count belongs to the current region, which cannot end (nor task_
    // change) before this chunk is done: the acquire makes the region's task_ visible.
    const std::uint64_t t = ticket_.fetch_add(1, std::memory_order_acq_rel);
    const auto chunk = static_cast<std::uint32_t>(t), chunks = static_cast<std::uint32_t>(t >> 32);
    if (chunk >= chunks) return;
    run_task(static_cast<int>(chunk), slot);
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<int>(chunks))
      done_.notify_one();
  }
}

void ThreadPool::worker_main(int slot) {
  std::uint64_t seen = 0;
  for (;;) {
    std::uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      KEEL_CPU_RELAX();
      gen = generation_.load(std::memory_order_acquire);
    }
    while (gen == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    work(slot);
  }
}

void ThreadPool::run(const std::function<void(int, int)> &fn) {
  const int n = num_threads_;
  run_chunks(n, [&](int chunk, int) { fn(chunk, n); });
}

void ThreadPool::run_chunks(int chunks, const std::function<void(int, int)> &fn) {
  if (chunks <= 0) return;
  if (num_threads_ == 1 || chunks == 1) {
    for (int c = 0; c < chunks; ++c) fn(c, 0);
    return;
  }
  task_ = &fn;
  has_error_.store(false, std::memory_order_relaxed);
  error_ = nullptr;
  done_.store(0, std::memory_order_relaxed);
  // Chunk 0 of a fresh region; the release publishes task_ to whoever claims from it.
  ticket_.store(static_cast<std::uint64_t>(chunks) << 32, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  work(0);
  // Wait only for the chunks other threads claimed and are still running.
  int done = done_.load(std::memory_order_acquire);
  for (int spin = 0; done != chunks && spin < kSpinIterations; ++spin) {
    KEEL_CPU_RELAX();
    done = done_.load(std::memory_order_acquire);
  }
  while (done != chunks) {
    done_.wait(done, std::memory_order_acquire);
    done = done_.load(std::memory_order_acquire);
  }
  task_ = nullptr;
  if (has_error_.load(std::memory_order_acquire)) std::rethrow_exception(error_);
}

void ThreadPool::parallel_for(std::int64_t n,
                              const std::function<void(std::int64_t, std::int64_t)> &fn,
                              std::int64_t grain) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(grain, 1);
  const std::int64_t units = (n + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<std::int64_t>(num_threads_, units));
  if (threads <= 1) {
    fn(0, n);
    return;
  }
  run([&](int t, int) {
    if (t >= threads) return;
    const std::int64_t u0 = units * t / threads, u1 = units * (t + 1) / threads;
    const std::int64_t b = u0 * grain, e = std::min(n, u1 * grain);
    if (b < e) fn(b, e);
  });
}

}  // namespace keel
