#include "registry/log.h"

#include <cstdarg>
#include <cstdio>

#include "registry/log_ring.h"

namespace keel {

std::optional<LogLevel> parse_log_level(std::string_view name) {
  if (name == "error") return LogLevel::kError;
  if (name == "warn" || name == "warning") return LogLevel::kWarn;
  if (name == "info") return LogLevel::kInfo;
  if (name == "debug") return LogLevel::kDebug;
  return std::nullopt;
}

const char *log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "info";
}

void Logger::log(LogLevel level, const char *fmt, ...) const {
  if (!enabled(level)) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  // One fprintf per line so that lines from several threads never interleave.
  std::fprintf(stderr, "%s: %s\n", prefix_.c_str(), msg);
  std::fflush(stderr);
  if (ring_) ring_->add(log_level_name(level), msg);
}

}  // namespace keel
