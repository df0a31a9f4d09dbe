// What the device lets the kernels use, decided once per context from its compute
// capability (the one place; CudaContext::features()). The build carries machine code
// for sm_80 .. sm_120 (src/exec/cuda/CMakeLists.txt, KEEL_CUDA_ARCHS); what differs
// between them at run time is chosen here, never by a kernel guessing:
//   - programmatic dependent launch (Hopper PDL, sm_90+): the fused decode kernels and
//     decode attention are launched as programmatic dependents only where it exists
//     (the device code compiles griddepcontrol only for __CUDA_ARCH__ >= 900);
//   - the shared memory a block may take (sm_80 163 KB, sm_86/89/120 99 KB, sm_90/100
//     227 KB): the fused GEMV's limit and the flash kernel's pipeline depth follow it.
// KEEL_CUDA_FEATURES=baseline (or CudaContextOptions::features) forces the smallest
// set any supported GPU has (no PDL, 99 KB), so an H100/H200 runs and tests the paths
// an A100, an L40S or an RTX 4090 take.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace keel::cuda {

// The smallest per-block shared memory of the supported GPUs (sm_86, sm_89, sm_120).
constexpr std::size_t kBaselineSmemPerBlock = 99 * 1024;

struct CudaFeatures {
  int major = 0, minor = 0;          // compute capability
  bool programmatic_launch = false;  // PDL: cudaLaunchAttributeProgrammaticStreamSerialization
  std::size_t smem_per_block = 48 * 1024;  // dynamic shared memory a block may opt into
  bool baseline = false;                   // forced to the smallest set

  // "sm_90 (pdl, 227 KB smem/block)" or "... baseline (forced)".
  std::string describe() const;
};

// The features of a device of capability major.minor with `smem_optin` bytes of
// opt-in shared memory per block, under `mode`: "auto" (or "") what the device has,
// "baseline" the smallest set. Another mode throws Error(kInvalidArgument) naming it.
CudaFeatures cuda_features(int major, int minor, std::size_t smem_optin, std::string_view mode);

// The same for a device's properties; an empty `mode` reads KEEL_CUDA_FEATURES.
CudaFeatures cuda_features(const cudaDeviceProp &props, std::string_view mode = {});

// The architectures this build carries machine code for, and the one whose PTX it
// carries (from KEEL_CUDA_ARCHS): "sm_80 sm_86 sm_89 sm_90 sm_100 sm_120, PTX compute_120".
std::string compiled_architectures();

}  // namespace keel::cuda
