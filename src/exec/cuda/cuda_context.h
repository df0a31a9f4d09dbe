// The CUDA execution context of one engine: its device, one compute stream, two copy
// streams (host->device restores, device->host snapshots), a cuBLASLt handle and GEMM
// workspace. Exactly one thread (the engine thread) enqueues work through it; in debug
// builds every launch checks that (check_owner), so misuse throws instead of racing.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>

#include "exec/cuda/cuda_resources.h"

namespace keel::cuda {

struct CudaContextOptions {
  int device = 0;
  std::size_t gemm_workspace_bytes = 64u << 20;  // cuBLASLt split-K / stream-K scratch
  // Host waits on this context's events give up after this long (Error kTimeout).
  std::chrono::milliseconds wait_timeout{120000};
};

class CudaContext {
 public:
  explicit CudaContext(const CudaContextOptions &opts = {});
  ~CudaContext();
  CudaContext(const CudaContext &) = delete;
  CudaContext &operator=(const CudaContext &) = delete;

  int device() const { return device_; }
  const cudaDeviceProp &props() const { return props_; }
  int num_sms() const { return props_.multiProcessorCount; }
  std::string device_name() const { return props_.name; }

  cudaStream_t compute() const { return compute_.get(); }
  cudaStream_t copy_h2d() const { return copy_h2d_.get(); }
  cudaStream_t copy_d2h() const { return copy_d2h_.get(); }
  cublasLtHandle_t blas_lt() const { return lt_; }
  void *gemm_workspace() const { return workspace_.data(); }
  std::size_t gemm_workspace_bytes() const { return workspace_.bytes(); }
  std::chrono::milliseconds wait_timeout() const { return wait_timeout_; }

  // Makes this device current for the calling thread (the runtime's per-thread device
  // is the one piece of implicit state CUDA has; every entry point sets it explicitly).
  void activate() const;
  // Debug builds: throws Error(kInternal) unless called on the owning thread.
  void check_owner(const char *what) const {
#if defined(KEEL_CHECK_THREAD_OWNERSHIP)
    check_owner_slow(what);
#else
    (void)what;
#endif
  }
  // Hands ownership to the calling thread (an engine built on one thread, run on another).
  void adopt_current_thread() { owner_ = std::this_thread::get_id(); }

 private:
  void check_owner_slow(const char *what) const;

  int device_ = 0;
  cudaDeviceProp props_{};
  std::chrono::milliseconds wait_timeout_;
  std::thread::id owner_;
  Stream compute_, copy_h2d_, copy_d2h_;
  cublasLtHandle_t lt_ = nullptr;
  DeviceBuffer workspace_;
};

}  // namespace keel::cuda
