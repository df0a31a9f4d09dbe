// `keel engine --tensor-parallel N` on the CPU: the BackendFactory body for rank 0.
// Call it on the engine thread (inside the factory), so that the workers, tied to the
// thread that spawned them, live exactly as long as the engine.
#pragma once

#include <cstdint>
#include <filesystem>

#include "engine/engine.h"
#include "engine/tp/group.h"

namespace keel::tp {

struct CpuTpBackendOptions {
  std::filesystem::path model;
  int tensor_parallel = 2;
  int threads = 0;  // all ranks together (0: all cores), split evenly
  std::int32_t num_blocks = 256;
  std::int32_t block_size = 16;
  std::int64_t op_timeout_ms = 60000;
  TpLaunch launch = default_tp_launch();  // `keel engine-tp-worker` of this binary
};

// Rank 0's context and runner; when the group is lost, the process exits (status 3).
EngineBackend make_cpu_tp_backend(const CpuTpBackendOptions &options);

}  // namespace keel::tp
