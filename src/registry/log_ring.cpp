#include "registry/log_ring.h"

#include <chrono>

namespace keel {

void LogRing::add(std::string level, std::string text) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::lock_guard lock(mu_);
  lines_.push_back({next_seq_++, now, std::move(level), std::move(text)});
  while (lines_.size() > capacity_) lines_.pop_front();
}

std::vector<LogLine> LogRing::since(std::uint64_t after, std::size_t limit) const {
  std::lock_guard lock(mu_);
  std::vector<LogLine> out;
  for (const auto &l : lines_)
    if (l.seq > after) out.push_back(l);
  if (out.size() > limit) out.erase(out.begin(), out.end() - static_cast<std::ptrdiff_t>(limit));
  return out;
}

}  // namespace keel
