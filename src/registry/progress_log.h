// Which of an engine's load progress reports become log lines (issue 22): the first of
// each phase, then, in a counted phase, one when it reaches a new tenth (at most one per
// `min_gap`, and always its end), and in a phase without a total one every `quiet_gap`:
// a long load is visible in the log without flooding it.
#pragma once

#include <chrono>
#include <string>

#include "engine/load_progress.h"

namespace keel {

class ProgressLogPacer {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ProgressLogPacer(std::chrono::milliseconds min_gap = std::chrono::seconds(2),
                            std::chrono::milliseconds quiet_gap = std::chrono::seconds(10))
      : min_gap_(min_gap), quiet_gap_(quiet_gap) {}
  // Whether `p`, seen at `now`, deserves a line (and if so, remembers it).
  bool should_log(const LoadProgress &p, Clock::time_point now);
  void reset() { *this = ProgressLogPacer(min_gap_, quiet_gap_); }

 private:
  std::chrono::milliseconds min_gap_, quiet_gap_;
  std::string phase_;
  bool any_ = false;
  int tenth_ = -1;
  bool ended_ = false;  // the counted phase's done == total was logged
  Clock::time_point last_{};
};

// "reading weights 40% (12.0 MB of 30.0 MB)", "rebuilding cache index (1200 blocks)",
// "uploading to device".
std::string describe_progress(const LoadProgress &p);

}  // namespace keel
