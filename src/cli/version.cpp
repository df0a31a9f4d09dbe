#include "cli/version.h"

#ifndef KEEL_VERSION
#define KEEL_VERSION "0.0.0"
#endif

namespace keel::cli {

std::string version_string() { return KEEL_VERSION; }

std::string version_report() {
  std::string s = "keel " + version_string() + "\nbackends: cpu";
#ifdef KEEL_WITH_CUDA
  s += ", cuda (CUDA " + std::to_string(KEEL_CUDA_VERSION_MAJOR) + "." +
       std::to_string(KEEL_CUDA_VERSION_MINOR) + ")";
#endif
  return s;
}

}  // namespace keel::cli
