// The memory-bandwidth probe the CPU benchmarks put their decode rooflines on: a
// multi-threaded streaming read of 1 GiB (far beyond the caches), best of 5.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <utility>
#include <vector>

#include "core/thread_pool.h"

namespace keel::bench {

// Process CPU seconds (all threads). On a shared, oversubscribed machine the wall clock
// mostly measures other people's work; CPU time / threads estimates the idle-machine
// time (it counts our spin-waits too, so it errs against us).
inline double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Multi-threaded streaming read of a buffer far larger than the caches; best of 5.
// Returns {wall, cpu-normalized} bytes per second.
inline std::pair<double, double> read_bandwidth(keel::ThreadPool &pool) {
  const std::size_t bytes = std::size_t{1} << 30;
  auto *buf = static_cast<float *>(std::aligned_alloc(64, bytes));
  const std::size_t n = bytes / sizeof(float);
  pool.parallel_for(static_cast<std::int64_t>(n), [&](std::int64_t a, std::int64_t b) {
    for (std::int64_t i = a; i < b; ++i) buf[i] = static_cast<float>(i & 7);
  });
  std::vector<float> sink(pool.size() * 16);
  double best = 1e30, best_cpu = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    pool.run([&](int t, int nt) {
      const std::size_t a = n * t / nt / 64 * 64, b = n * (t + 1) / nt / 64 * 64;
#if defined(__AVX512F__)
      __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
      for (std::size_t i = a; i < b; i += 64) {
        s0 = _mm512_add_ps(s0, _mm512_load_ps(buf + i));
        s1 = _mm512_add_ps(s1, _mm512_load_ps(buf + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_load_ps(buf + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_load_ps(buf + i + 48));
      }
      sink[t * 16] =
          _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
#else
      float s = 0;
      for (std::size_t i = a; i < b; ++i) s += buf[i];
      sink[t * 16] = s;
#endif
    });
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    best_cpu = std::min(best_cpu, (cpu_seconds() - c0) / pool.size());
  }
  std::free(buf);
  return {static_cast<double>(bytes) / best, static_cast<double>(bytes) / best_cpu};
}

}  // namespace keel::bench
