// The server's log lines on stderr, filtered by --log-level. A value, not a global: the
// front hands one to each part that logs (two servers in one test process may differ).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace keel {

class LogRing;

enum class LogLevel { kError = 0, kWarn, kInfo, kDebug };

// "error", "warn" (or "warning"), "info", "debug"; nullopt otherwise.
std::optional<LogLevel> parse_log_level(std::string_view name);
const char *log_level_name(LogLevel level);
// Control characters (newlines, escapes, DEL) as \n, \r, \t or \xNN; the rest as is.
std::string escape_log_text(std::string_view text);

class Logger {
 public:
  explicit Logger(LogLevel level = LogLevel::kInfo, std::string prefix = "keel serve")
      : level_(level), prefix_(std::move(prefix)) {}
  LogLevel level() const { return level_; }
  bool enabled(LogLevel level) const { return level <= level_; }
  // One line "PREFIX: message" when `level` passes the filter; written whole (one call).
  void log(LogLevel level, const char *fmt, ...) const __attribute__((format(printf, 3, 4)));
  // Lines that pass the filter are also kept in `ring` (the dashboard's recent lines).
  void keep_in(std::shared_ptr<LogRing> ring) { ring_ = std::move(ring); }
  const std::shared_ptr<LogRing> &ring() const { return ring_; }

 private:
  LogLevel level_;
  std::string prefix_;
  std::shared_ptr<LogRing> ring_;
};

}  // namespace keel
