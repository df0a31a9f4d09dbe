#include "exec/cuda/cuda_info.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <exception>

#include "exec/cuda/cuda_features.h"
#include "exec/cuda/cuda_resources.h"

namespace keel::cuda {

namespace {
std::string version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}
}  // namespace

std::string describe_backend() {
  std::string s = "cuda " + std::to_string(KEEL_CUDA_VERSION_MAJOR) + "." +
                  std::to_string(KEEL_CUDA_VERSION_MINOR);
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  s += " (runtime " + version_string(runtime) + ", driver " +
       (driver ? version_string(driver) : "none") + ")";
  const int n = device_count();
  if (n == 0) return s + ", no device";
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%s %d: %s (sm_%d%d, %.0f GiB)", i == 0 ? "," : ";", i, p.name,
                  p.major, p.minor, static_cast<double>(p.totalGlobalMem) / (1 << 30));
    s += buf;
    try {  // what the kernels will use there (KEEL_CUDA_FEATURES may force the baseline)
      s += ", features " + cuda_features(p).describe();
    } catch (const std::exception &e) {
      s += std::string(", ") + e.what();
    }
  }
  return s;
}

bool device_memory(int device, long long *free_bytes, long long *total_bytes) {
  std::size_t free_b = 0, total_b = 0;
  if (cudaSetDevice(device) != cudaSuccess || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  *free_bytes = static_cast<long long>(free_b);
  *total_bytes = static_cast<long long>(total_b);
  return true;
}

}  // namespace keel::cuda
