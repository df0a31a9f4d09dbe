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

std::string escape_log_text(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c != 0x7f) {
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

void Logger::log(LogLevel level, const char *fmt, ...) const {
  if (!enabled(level)) return;
  char raw[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(raw, sizeof raw, fmt, ap);
  va_end(ap);
  // A line is one line: text from outside (a model name with a newline) cannot forge
  // another one, nor send terminal escapes.
  const std::string msg = escape_log_text(raw);
  // One fprintf per line so that lines from several threads never interleave.
  std::fprintf(stderr, "%s: %s\n", prefix_.c_str(), msg.c_str());
  std::fflush(stderr);
  if (ring_) ring_->add(log_level_name(level), msg);
}

}  // namespace keel
