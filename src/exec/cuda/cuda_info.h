// A one-line description of the CUDA backend for `keel --version` and logs: the toolkit
// keel was built with, the driver and runtime found, and the devices. Never throws, and
// works without a driver or device (it says so).
#pragma once

#include <string>

namespace keel::cuda {

std::string describe_backend();

// Free and total memory of `device` (cudaMemGetInfo), in bytes; false when it cannot be
// read (no driver, no such device).
bool device_memory(int device, long long *free_bytes, long long *total_bytes);

}  // namespace keel::cuda
