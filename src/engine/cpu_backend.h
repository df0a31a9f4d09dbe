// A BackendFactory for the CPU runner: the engine thread opens the model and builds
// its ExecContext (thread pool), so that thread owns both.
#pragma once

#include <cstdint>
#include <filesystem>

#include "engine/engine.h"

namespace keel {

struct CpuBackendOptions {
  std::filesystem::path model;    // HF directory or GGUF file
  int threads = 0;                // 0: one per hardware thread
  std::int32_t num_blocks = 256;  // KV blocks
  std::int32_t block_size = 16;   // tokens per block
};

BackendFactory cpu_backend(CpuBackendOptions options);

}  // namespace keel
