#pragma once

#include <string>

namespace keel::cli {

std::string version_string();
// Version, compiled-in backends and, with CUDA, the toolkit version.
std::string version_report();

}  // namespace keel::cli
