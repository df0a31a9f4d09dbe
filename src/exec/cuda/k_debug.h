// Device-side fault injection for tests: a kernel that holds a stream until the host
// releases it, so tests can wedge one engine's stream and check that nothing else waits.
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

}  // namespace keel::cuda
