#include "engine/speculative.h"

#include <algorithm>

#include "core/error.h"
#include "engine/ngram_drafter.h"

namespace keel {

std::string parse_speculative_method(const std::string &method) {
  if (method.empty() || method == "off") return "";
  if (method == "ngram") return method;
  throw Error(ErrorCode::kInvalidArgument,
              "speculative: unknown method '" + method + "' (off or ngram)");
}

std::unique_ptr<Drafter> make_drafter(const SpeculativeConfig &config) {
  const std::string method = parse_speculative_method(config.method);
  if (config.num_speculative_tokens > 16)
    throw Error(ErrorCode::kInvalidArgument, "speculative: num_speculative_tokens above 16");
  if (!config.enabled()) return nullptr;
  if (config.make_drafter) return config.make_drafter();
  return std::make_unique<NgramDrafter>(config.ngram_max, config.ngram_min);
}

bool AcceptanceTracker::should_draft() {
  if (pause_ > 0) {
    --pause_;
    return false;
  }
  return true;
}

void AcceptanceTracker::record(std::int32_t drafted, std::int32_t accepted) {
  if (drafted <= 0) return;
  ema_ = 0.7 * ema_ + 0.3 * static_cast<double>(accepted) / drafted;
  if (ema_ < 0.25) {
    backoff_ = std::min(std::max(2 * backoff_, 4), 64);
    pause_ = backoff_;
    ema_ = 0.5;  // a fresh chance after the pause
  } else if (accepted > 0) {
    backoff_ /= 2;
  }
}

}  // namespace keel
