#include "cli/version.h"

#ifdef KEEL_WITH_CUDA
#include "exec/cuda/cuda_features.h"
#include "exec/cuda/cuda_info.h"
#endif

#ifndef KEEL_VERSION
#define KEEL_VERSION "0.0.0"
#endif

namespace keel::cli {

std::string version_string() { return KEEL_VERSION; }

std::string version_report() {
  std::string s = "keel " + version_string() + "\nbackends: cpu";
#ifdef KEEL_WITH_CUDA
  s += ", cuda (CUDA " + std::to_string(KEEL_CUDA_VERSION_MAJOR) + "." +
       std::to_string(KEEL_CUDA_VERSION_MINOR) +
       ")\ncuda architectures: " + cuda::compiled_architectures() + "\n" + cuda::describe_backend();
#else
  s += "\ncuda: not built";
#endif
  return s;
}

}  // namespace keel::cli
