// Device time per phase of a forward pass (CudaRunnerOptions::profile): timing events
// recorded between the launches of a step, summed by phase once the step completed.
// Off (no events) unless made with a number of marks; then steps run eagerly (a graph
// replay cannot record events between its kernels).
#pragma once

#include <array>
#include <cstddef>
#include <utility>
#include <vector>

#include "exec/cuda/cuda_resources.h"

namespace keel::cuda {

class StepProfiler {
 public:
  enum Phase : int { kGemm = 0, kAttention = 1, kOther = 2 };

  StepProfiler() = default;
  // Room for `marks` marks a step (marks past that are dropped).
  explicit StepProfiler(std::size_t marks);

  bool enabled() const { return !events_.empty(); }
  void begin(StreamRef s);
  // Closes the span since the last mark as `phase`.
  void mark(StreamRef s, Phase phase) {
    if (used_ < events_.size()) record(s, phase);
  }
  // After the step's last event completed: adds its spans to the totals.
  void collect();
  // Milliseconds per phase since the last call: {gemm, attention, other}.
  std::array<double, 3> take() { return std::exchange(ms_, {}); }

 private:
  void record(StreamRef s, Phase phase);

  std::vector<Event> events_;
  std::vector<Phase> phase_;  // [events_] the phase each event closes
  std::size_t used_ = 0;
  std::array<double, 3> ms_{};
};

}  // namespace keel::cuda
