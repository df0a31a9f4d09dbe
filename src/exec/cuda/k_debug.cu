// Fault-injection kernels (see k_debug.h).
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_debug.h"

namespace keel::cuda {

namespace {
__device__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(const volatile std::int32_t *release, std::int32_t *status,
                            std::uint64_t timeout_ns) {
  const std::uint64_t start = global_ns();
  while (*release == 0) {
    if (global_ns() - start > timeout_ns) {
      *status = 2;
      return;
    }
    __nanosleep(1000);
  }
  *status = 1;
}
}  // namespace

void launch_spin_until_released(StreamRef s_ref, const volatile std::int32_t *release,
                                std::int32_t *status, std::uint32_t timeout_ms) {
  const cudaStream_t s = s_ref.get("launch_spin_until_released");
  spin_kernel<<<1, 1, 0, s>>>(release, status, std::uint64_t(timeout_ms) * 1000000ull);
  KEEL_CUDA_CHECK_LAUNCH("spin_until_released");
}

int loaded_binary_version(int *ptx) {
  cudaFuncAttributes a{};
  if (cudaFuncGetAttributes(&a, spin_kernel) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  if (ptx) *ptx = a.ptxVersion;
  return a.binaryVersion;
}

}  // namespace keel::cuda
