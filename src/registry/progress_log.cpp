#include "registry/progress_log.h"

#include <cmath>
#include <cstdio>

#include "core/progress_bar.h"

namespace keel {

bool ProgressLogPacer::should_log(const LoadProgress &p, Clock::time_point now) {
  const auto f = p.fraction();
  const int tenth = f ? static_cast<int>(std::floor(*f * 10.0)) : -1;
  bool log = false;
  if (!any_ || p.phase != phase_) {
    log = true;
  } else if (f) {
    const bool end = p.done >= p.total;
    if (end && !ended_)
      log = true;  // the phase's last figure, however soon after the previous line
    else if (tenth > tenth_ && now - last_ >= min_gap_)
      log = true;
  } else {
    log = now - last_ >= quiet_gap_;
  }
  if (!log) return false;
  any_ = true;
  if (p.phase != phase_) ended_ = false;
  phase_ = p.phase;
  tenth_ = tenth;
  ended_ = ended_ || (f && p.done >= p.total);
  last_ = now;
  return true;
}

std::string describe_progress(const LoadProgress &p) {
  std::string s = p.phase;
  const auto f = p.fraction();
  auto count = [&](std::int64_t n) {
    return p.unit == "bytes" ? format_bytes(static_cast<std::uint64_t>(n))
                             : std::to_string(n) + " " + p.unit;
  };
  if (f) {
    char pct[16];
    std::snprintf(pct, sizeof pct, " %.0f%%", *f * 100.0);
    s += pct;
    s += " (" + count(p.done) + " of " + count(p.total) + ")";
  } else if (!p.unit.empty() && p.done > 0) {
    s += " (" + count(p.done) + ")";
  }
  return s;
}

}  // namespace keel
