// Holds a context's compute stream with a spinning kernel until release() (or until the
// kernel's own 60 s safety timeout), so tests can check what waits on that stream and
// what does not.
#pragma once

#include <cstdint>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_context.h"
#include "exec/cuda/cuda_resources.h"
#include "exec/cuda/k_debug.h"

namespace keel::cuda::test {

class StreamBlocker {
 public:
  explicit StreamBlocker(CudaContext &ctx)
      : flag_(sizeof(std::int32_t), /*mapped=*/true), status_(4) {
    *flag_.as<volatile std::int32_t>() = 0;
    KEEL_CUDA_CHECK(cudaMemsetAsync(status_.data(), 0, 4, ctx.compute().get("cudaMemsetAsync")));
    launch_spin_until_released(ctx.compute(),
                               static_cast<volatile std::int32_t *>(flag_.device_ptr()),
                               status_.as<std::int32_t>(), 60000);
    after_.record(ctx.compute());
  }
  ~StreamBlocker() { release(); }
  StreamBlocker(const StreamBlocker &) = delete;
  StreamBlocker &operator=(const StreamBlocker &) = delete;
  void release() { *flag_.as<volatile std::int32_t>() = 1; }
  const Event &after() const { return after_; }
  const DeviceBuffer &status() const { return status_; }

 private:
  PinnedBuffer flag_;
  DeviceBuffer status_;
  Event after_;
};

}  // namespace keel::cuda::test
