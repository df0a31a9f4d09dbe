#include "server/stop_matcher.h"

#include <algorithm>

namespace keel::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto &s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

StopMatcher::Result StopMatcher::push(std::string_view text, bool match) {
  Result r;
  if (hit_) return r;
  held_.append(text);
  if (stops_.empty()) {
    r.emit.swap(held_);
    return r;
  }
  // Earliest full match wins.
  std::size_t best = std::string::npos;
  const std::string *which = nullptr;
  for (const auto &s : stops_) {
    if (!match) break;
    auto p = held_.find(s);
    if (p != std::string::npos && (best == std::string::npos || p < best)) {
      best = p;
      which = &s;
    }
  }
  if (which) {
    hit_ = true;
    r.hit = true;
    r.matched = *which;
    r.emit = held_.substr(0, best);
    held_.clear();
    return r;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  std::size_t keep = 0;
  for (const auto &s : stops_) {
    for (std::size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  r.emit = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return r;
}

StopMatcher::Result StopMatcher::flush() {
  Result r;
  if (!hit_) r.emit.swap(held_);
  held_.clear();
  return r;
}

}  // namespace keel::server
