#include "exec/cuda/cuda_step_profiler.h"

namespace keel::cuda {

StepProfiler::StepProfiler(std::size_t marks) : phase_(marks, kOther) {
  for (std::size_t i = 0; i < marks; ++i) events_.emplace_back(true);
}

void StepProfiler::begin(StreamRef s) {
  if (events_.empty()) return;
  used_ = 0;
  events_[used_++].record(s);
}

void StepProfiler::record(StreamRef s, Phase phase) {
  phase_[used_] = phase;
  events_[used_++].record(s);
}

void StepProfiler::collect() {
  for (std::size_t i = 1; i < used_; ++i)
    ms_[phase_[i]] += Event::elapsed_ms(events_[i - 1], events_[i]);
  used_ = 0;
}

}  // namespace keel::cuda
