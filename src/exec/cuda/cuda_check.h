// Error checks for CUDA runtime and cuBLAS calls: every failure becomes a keel::Error that
// names the call site, never an abort or a silently ignored code.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

namespace keel::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char *what, const char *file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char *what, const char *file,
                                     int line);

}  // namespace keel::cuda

#define KEEL_CUDA_CHECK(expr)                                                    \
  do {                                                                           \
    const cudaError_t keel_cuda_err_ = (expr);                                   \
    if (keel_cuda_err_ != cudaSuccess)                                           \
      ::keel::cuda::throw_cuda_error(keel_cuda_err_, #expr, __FILE__, __LINE__); \
  } while (0)

#define KEEL_CUBLAS_CHECK(expr)                                                     \
  do {                                                                              \
    const cublasStatus_t keel_cublas_st_ = (expr);                                  \
    if (keel_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                   \
      ::keel::cuda::throw_cublas_error(keel_cublas_st_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, not at a later sync.
#define KEEL_CUDA_CHECK_LAUNCH(name) KEEL_CUDA_CHECK(cudaPeekAtLastError())
