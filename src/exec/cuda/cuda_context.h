// The CUDA execution context of one engine: its device, one compute stream, two copy
// streams (host->device restores, device->host snapshots), a cuBLASLt handle and GEMM
// workspace. Exactly one thread enqueues work through it: the thread that made it (the
// engine thread, inside its BackendFactory), for good. The context hands out its streams
// only as StreamRefs carrying that owner, and every launch and enqueue checks it, in
// every build (stream_ref.h), so misuse from another thread is fatal instead of a race.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>

#include "core/thread_owner.h"
#include "exec/cuda/cuda_features.h"
#include "exec/cuda/cuda_resources.h"
#include "exec/cuda/stream_ref.h"

namespace keel::cuda {

struct CudaContextOptions {
  int device = 0;
  std::size_t gemm_workspace_bytes = 64u << 20;  // cuBLASLt split-K / stream-K scratch
  // Host waits on this context's events give up after this long (Error kTimeout).
  std::chrono::milliseconds wait_timeout{120000};
  // "auto" or "baseline" (cuda_features.h); empty: KEEL_CUDA_FEATURES, else auto.
  std::string features;
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
  // What the kernels may use on this device (PDL, shared memory per block).
  const CudaFeatures &features() const { return features_; }

  StreamRef compute() const { return {compute_.get(), owner_}; }
  StreamRef copy_h2d() const { return {copy_h2d_.get(), owner_}; }
  StreamRef copy_d2h() const { return {copy_d2h_.get(), owner_}; }
  cublasLtHandle_t blas_lt() const { return lt_; }
  void *gemm_workspace() const { return workspace_.data(); }
  std::size_t gemm_workspace_bytes() const { return workspace_.bytes(); }
  std::chrono::milliseconds wait_timeout() const { return wait_timeout_; }

  // Makes this device current for the calling thread (the runtime's per-thread device
  // is the one piece of implicit state CUDA has; every entry point sets it explicitly).
  void activate() const;
  // Entry points that enqueue through helpers check once up front, naming themselves.
  void check_owner(const char *what) const { owner_.check(what); }
  const ThreadOwner &owner() const { return owner_; }
  // Waits (unbounded) for all three streams, from any thread: only teardown may, once
  // nothing enqueues any more (a wedged engine is killed by its supervisor, not joined).
  void drain() const;

 private:
  int device_ = 0;
  cudaDeviceProp props_{};
  CudaFeatures features_;
  std::chrono::milliseconds wait_timeout_;
  ThreadOwner owner_;
  Stream compute_, copy_h2d_, copy_d2h_;
  cublasLtHandle_t lt_ = nullptr;
  DeviceBuffer workspace_;
};

}  // namespace keel::cuda
