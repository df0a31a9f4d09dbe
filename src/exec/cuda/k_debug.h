// Device-side fault injection for tests: a kernel that holds a stream until the host
// releases it, so tests can wedge one engine's stream and check that nothing else waits.
// Also which of the fat binary's machine codes the runtime loaded for the device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/stream_ref.h"

namespace keel::cuda {

// Spins on one thread until *release != 0 (a mapped pinned host word), or until
// timeout_ms passes (so a failed test cannot wedge the GPU for good). On exit writes 1
// (released) or 2 (timed out) to *status (device or mapped memory).
void launch_spin_until_released(StreamRef s, const volatile std::int32_t *release,
                                std::int32_t *status, std::uint32_t timeout_ms);

// The architecture of the code the runtime runs for this file's kernel on the current
// device: its SASS version (90 on an H200 built with sm_90), or 0 when none could be
// loaded. *ptx gets the PTX version it was compiled from (JIT-compiled when no SASS fits).
int loaded_binary_version(int *ptx = nullptr);

}  // namespace keel::cuda
