// A one-line description of the CUDA backend for `keel --version` and logs: the toolkit
// keel was built with, the driver and runtime found, and the devices. Never throws, and
// works without a driver or device (it says so).
#pragma once

#include <string>

namespace keel::cuda {

std::string describe_backend();

}  // namespace keel::cuda
