// Faults armed on purpose, for the wedge scenario suite (`keel serve
// --enable-fault-injection`, POST /debug/faults). Each engine owns one injector; the
// step loop and the cache tiers ask it, at the points where a real fault would strike,
// whether to fail. Thread-safe: the front's IPC reader arms, the engine thread and the
// cache's I/O workers take. With nothing armed every take_*() is one relaxed load.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace keel {

enum class FaultKind {
  kStallStep,       // the next step blocks inside the executor (`seconds`, or forever)
  kCrashEngine,     // the engine process aborts at its next step
  kSsdWriteError,   // the next `count` SSD cache writes fail
  kSsdReadCorrupt,  // the next `count` SSD cache reads return corrupted bytes
  kSlowStore,       // the next `count` cache stores each take `seconds` longer
  kMaskError,       // the next `count` structured-output masks throw while computed
};

struct FaultSpec {
  FaultKind kind = FaultKind::kStallStep;
  // Stall length or store delay; none with kStallStep: forever.
  std::optional<double> seconds;
  std::int32_t count = 1;  // shots: steps, writes, reads or stores
};

const char *fault_kind_name(FaultKind kind);  // "stall-step", ...
std::optional<FaultKind> parse_fault_kind(std::string_view name);

class FaultInjector {
 public:
  // Adds a fault; one of the same kind already armed is replaced.
  void arm(const FaultSpec &spec);
  void disarm_all();
  std::vector<FaultSpec> armed() const;

  // Each take consumes one shot of its kind, if armed.
  // Stall length in seconds (infinity: forever).
  std::optional<double> take_stall();
  bool take_crash();
  bool take_ssd_write_error();
  bool take_ssd_read_corrupt();
  // Extra seconds this store should take (0 when not armed).
  double take_slow_store();
  bool take_mask_error();

 private:
  std::optional<FaultSpec> take(FaultKind kind);

  mutable std::mutex mu_;
  std::vector<FaultSpec> armed_;  // under mu_
  std::atomic<bool> any_{false};
};

}  // namespace keel
