#include "core/fault_injector.h"

#include <algorithm>
#include <limits>

namespace keel {

namespace {
constexpr struct {
  FaultKind kind;
  const char *name;
} kNames[] = {{FaultKind::kStallStep, "stall-step"},
              {FaultKind::kCrashEngine, "crash-engine"},
              {FaultKind::kSsdWriteError, "ssd-write-error"},
              {FaultKind::kSsdReadCorrupt, "ssd-read-corrupt"},
              {FaultKind::kSlowStore, "slow-store"},
              {FaultKind::kMaskError, "mask-error"}};
}  // namespace

const char *fault_kind_name(FaultKind kind) {
  for (const auto &n : kNames)
    if (n.kind == kind) return n.name;
  return "unknown";
}

std::optional<FaultKind> parse_fault_kind(std::string_view name) {
  for (const auto &n : kNames)
    if (name == n.name) return n.kind;
  return std::nullopt;
}

void FaultInjector::arm(const FaultSpec &spec) {
  std::lock_guard lk(mu_);
  std::erase_if(armed_, [&](const FaultSpec &f) { return f.kind == spec.kind; });
  if (spec.count > 0) armed_.push_back(spec);
  any_.store(!armed_.empty(), std::memory_order_relaxed);
}

void FaultInjector::disarm_all() {
  std::lock_guard lk(mu_);
  armed_.clear();
  any_.store(false, std::memory_order_relaxed);
}

std::vector<FaultSpec> FaultInjector::armed() const {
  std::lock_guard lk(mu_);
  return armed_;
}

std::optional<FaultSpec> FaultInjector::take(FaultKind kind) {
  if (!any_.load(std::memory_order_relaxed)) return std::nullopt;
  std::lock_guard lk(mu_);
  auto it = std::find_if(armed_.begin(), armed_.end(),
                         [&](const FaultSpec &f) { return f.kind == kind; });
  if (it == armed_.end()) return std::nullopt;
  FaultSpec shot = *it;
  if (--it->count <= 0) armed_.erase(it);
  any_.store(!armed_.empty(), std::memory_order_relaxed);
  return shot;
}

std::optional<double> FaultInjector::take_stall() {
  auto f = take(FaultKind::kStallStep);
  if (!f) return std::nullopt;
  return f->seconds ? *f->seconds : std::numeric_limits<double>::infinity();
}

bool FaultInjector::take_crash() { return take(FaultKind::kCrashEngine).has_value(); }
bool FaultInjector::take_ssd_write_error() { return take(FaultKind::kSsdWriteError).has_value(); }
bool FaultInjector::take_mask_error() { return take(FaultKind::kMaskError).has_value(); }
bool FaultInjector::take_ssd_read_corrupt() { return take(FaultKind::kSsdReadCorrupt).has_value(); }

double FaultInjector::take_slow_store() {
  auto f = take(FaultKind::kSlowStore);
  return f && f->seconds ? std::max(0.0, *f->seconds) : 0.0;
}

}  // namespace keel
