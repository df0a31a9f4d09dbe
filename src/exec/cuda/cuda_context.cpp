#include "exec/cuda/cuda_context.h"

#include "exec/cuda/cuda_check.h"

namespace keel::cuda {

namespace {
int select_device(int device) {
  const int n = device_count();
  if (n == 0) throw Error(ErrorCode::kUnavailable, "cuda: no CUDA device is available");
  if (device < 0 || device >= n)
    throw Error(ErrorCode::kInvalidArgument, "cuda: device " + std::to_string(device) +
                                                 " does not exist (" + std::to_string(n) +
                                                 " present)");
  KEEL_CUDA_CHECK(cudaSetDevice(device));
  return device;
}
}  // namespace

// Members that create CUDA objects are initialised after select_device() made the device current.
CudaContext::CudaContext(const CudaContextOptions &opts)
    : device_(select_device(opts.device)),
      wait_timeout_(opts.wait_timeout),
      workspace_(opts.gemm_workspace_bytes) {
  KEEL_CUDA_CHECK(cudaGetDeviceProperties(&props_, device_));
  if (props_.major < 8)
    throw Error(ErrorCode::kUnsupported,
                std::string("cuda: device ") + props_.name + " has compute capability " +
                    std::to_string(props_.major) + "." + std::to_string(props_.minor) +
                    "; keel needs bf16 (8.0 or newer)");
  features_ = cuda_features(props_, opts.features);
  KEEL_CUBLAS_CHECK(cublasLtCreate(&lt_));
}

CudaContext::~CudaContext() {
  // Shutdown is the one place that waits for everything: nothing may still be using the
  // workspace or streams when they are destroyed. Errors are ignored (destructor).
  drain();
  if (lt_) cublasLtDestroy(lt_);
}

void CudaContext::activate() const { KEEL_CUDA_CHECK(cudaSetDevice(device_)); }

void CudaContext::drain() const {
  cudaSetDevice(device_);
  cudaStreamSynchronize(compute_.get());
  cudaStreamSynchronize(copy_h2d_.get());
  cudaStreamSynchronize(copy_d2h_.get());
}

}  // namespace keel::cuda
