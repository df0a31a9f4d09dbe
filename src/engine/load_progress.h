// Where an engine is in loading its model (issue 22): the phase it is in ("reading
// weights", "uploading to device", "rebuilding cache index", ...) and, where the work can
// be counted, how much of it is done. The engine child sends these to the front (a
// progress frame, engine/ipc/progress_sender.h); the registry keeps the latest per model
// and /api/status shows it until the model is ready.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace keel {

struct LoadProgress {
  std::string phase;
  std::int64_t done = 0;
  std::int64_t total = 0;  // 0: not known (the phase is shown without a fraction)
  std::string unit;        // "bytes", "blocks", or empty when nothing is counted

  // done / total in [0, 1], or nullopt when the total is not known.
  std::optional<double> fraction() const {
    if (total <= 0) return std::nullopt;
    const double f = static_cast<double>(done) / static_cast<double>(total);
    return f < 0 ? 0.0 : f > 1 ? 1.0 : f;
  }
  bool operator==(const LoadProgress &) const = default;
};

// Called by whatever loads (any thread); must not block for long.
using LoadProgressSink = std::function<void(const LoadProgress &)>;

}  // namespace keel
