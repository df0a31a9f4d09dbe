// The last log lines, kept in memory for the dashboard (GET /api/logs): a bounded ring,
// so a chatty server holds at most `capacity` lines. Thread-safe; a value that a Logger
// shares, never a global.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace keel {

struct LogLine {
  std::uint64_t seq = 0;  // 1, 2, ...: a reader asks for lines after the last it saw
  double unix_time = 0;   // seconds since the epoch
  std::string level;      // "error", "warn", "info", "debug"
  std::string text;
};

class LogRing {
 public:
  explicit LogRing(std::size_t capacity = 500) : capacity_(capacity ? capacity : 1) {}
  void add(std::string level, std::string text);
  // Lines with seq > after, oldest first, at most `limit`.
  std::vector<LogLine> since(std::uint64_t after, std::size_t limit) const;
  std::size_t capacity() const { return capacity_; }

 private:
  const std::size_t capacity_;
  mutable std::mutex mu_;
  std::deque<LogLine> lines_;
  std::uint64_t next_seq_ = 1;
};

}  // namespace keel
