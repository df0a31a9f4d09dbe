#include "core/progress_bar.h"

#include <unistd.h>

#include <algorithm>

namespace keel {

std::string format_bytes(std::uint64_t n) {
  const char *units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1000 && u < 5) {
    v /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

ProgressBar::ProgressBar(std::FILE *out, std::string label, std::int64_t total, Unit unit,
                         std::string noun)
    : out_(out),
      label_(std::move(label)),
      noun_(std::move(noun)),
      total_(std::max<std::int64_t>(total, 0)),
      unit_(unit),
      tty_(out != nullptr && ::isatty(::fileno(out)) != 0),
      start_(std::chrono::steady_clock::now()) {}

// Bytes: "40% (1.2 GB of 3.0 GB, 500 MB/s) detail"; a count: "6/10 requests done, detail,
// 1.2s" (no percentage on a terminal, where the bar shows it).
std::string ProgressBar::line(std::int64_t done, double secs, const std::string &detail,
                              bool with_pct) const {
  std::string s;
  char buf[48];
  const bool pct = with_pct && total_ > 0;
  const double f = total_ > 0 ? static_cast<double>(std::clamp<std::int64_t>(done, 0, total_)) /
                                    static_cast<double>(total_)
                              : 0.0;
  if (unit_ == Unit::kBytes) {
    const double moved = static_cast<double>(done - std::min(done, start_done_));
    if (pct) {
      std::snprintf(buf, sizeof buf, "%.0f%% (", 100.0 * f);
      s = buf;
    }
    s += format_bytes(static_cast<std::uint64_t>(done));
    if (total_ > 0) s += " of " + format_bytes(static_cast<std::uint64_t>(total_));
    s += ", " + format_bytes(static_cast<std::uint64_t>(secs > 0 ? moved / secs : 0)) + "/s";
    if (pct) s += ")";
    if (!detail.empty()) s += " " + detail;
  } else {
    s = std::to_string(done);
    if (total_ > 0) s += "/" + std::to_string(total_);
    if (!noun_.empty()) s += " " + noun_;
    if (!detail.empty()) s += ", " + detail;
    std::snprintf(buf, sizeof buf, ", %.1fs", secs);
    s += buf;
  }
  return s;
}

void ProgressBar::update(std::int64_t done, const std::string &detail) {
  if (!out_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!started_) {
    started_ = true;
    if (unit_ == Unit::kBytes) start_ = now;  // the rate counts from the first figure
    start_done_ = done;
  }
  const double secs = std::chrono::duration<double>(now - start_).count();
  const double f = total_ > 0 ? static_cast<double>(std::clamp<std::int64_t>(done, 0, total_)) /
                                    static_cast<double>(total_)
                              : -1.0;
  if (tty_) {
    const bool last = total_ > 0 && done >= total_;
    if (now - last_draw_ < std::chrono::milliseconds(100) && !last) return;
    last_draw_ = now;
    std::string bar = " ";
    if (f >= 0) {
      constexpr int kWidth = 28;
      std::string fill(static_cast<std::size_t>(f * kWidth), '=');
      fill.resize(kWidth, ' ');
      char p[16];
      std::snprintf(p, sizeof p, "] %5.1f%% ", 100.0 * f);
      bar = " [" + fill + p;
    }
    std::fprintf(out_, "\r%s%s%s\x1b[K", label_.c_str(), bar.c_str(),
                 line(done, secs, detail, false).c_str());
    std::fflush(out_);
    return;
  }
  // Off a terminal: a line per tenth (a count without a total: its first figure only).
  const int tenth = f >= 0 ? static_cast<int>(f * 10.0) : 0;
  if (tenth == last_tenth_) return;
  last_tenth_ = tenth;
  std::fprintf(out_, "%s: %s\n", label_.c_str(), line(done, secs, detail, true).c_str());
  std::fflush(out_);
}

void ProgressBar::finish() {
  if (!out_ || finished_) return;
  finished_ = true;
  if (tty_ && started_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
}

}  // namespace keel
