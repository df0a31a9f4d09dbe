#include "exec/cuda/cuda_features.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"

#ifndef KEEL_CUDA_ARCH_LIST
#define KEEL_CUDA_ARCH_LIST ""
#endif

namespace keel::cuda {

std::string CudaFeatures::describe() const {
  std::string s = "sm_" + std::to_string(major) + std::to_string(minor) + " (" +
                  (programmatic_launch ? "pdl, " : "no pdl, ") +
                  std::to_string(smem_per_block / 1024) + " KB smem/block)";
  if (baseline) s += " baseline (forced)";
  return s;
}

CudaFeatures cuda_features(int major, int minor, std::size_t smem_optin, std::string_view mode) {
  const bool baseline = mode == "baseline";
  if (!baseline && !mode.empty() && mode != "auto")
    throw Error(ErrorCode::kInvalidArgument,
                "KEEL_CUDA_FEATURES: expected auto or baseline, got '" + std::string(mode) + "'");
  CudaFeatures f;
  f.major = major;
  f.minor = minor;
  f.baseline = baseline;
  f.programmatic_launch = !baseline && major >= 9;
  f.smem_per_block = baseline ? std::min(smem_optin, kBaselineSmemPerBlock) : smem_optin;
  return f;
}

CudaFeatures cuda_features(const cudaDeviceProp &props, std::string_view mode) {
  std::string m(mode);
  if (m.empty())
    if (const char *env = std::getenv("KEEL_CUDA_FEATURES")) m = env;
  return cuda_features(props.major, props.minor, props.sharedMemPerBlockOptin, m);
}

std::string compiled_architectures() {
  // KEEL_CUDA_ARCH_LIST is the CMake list joined by commas, e.g. "80-real,86-real,...,120": "-real"
  // entries are machine code only, the bare last one machine code and PTX.
  const std::string list = KEEL_CUDA_ARCH_LIST;
  std::string sass, ptx;
  std::size_t pos = 0;
  while (pos <= list.size() && !list.empty()) {
    const std::size_t end = std::min(list.find(',', pos), list.size());
    std::string a = list.substr(pos, end - pos);
    pos = end + 1;
    if (a.empty()) continue;
    const bool real = a.size() > 5 && a.compare(a.size() - 5, 5, "-real") == 0;
    if (real) a.resize(a.size() - 5);
    sass += (sass.empty() ? "sm_" : " sm_") + a;
    if (!real) ptx += (ptx.empty() ? "compute_" : " compute_") + a;
  }
  if (sass.empty()) return "unknown";
  return ptx.empty() ? sass : sass + ", PTX " + ptx;
}

}  // namespace keel::cuda
