#include "hub/byte_progress.h"

#include <unistd.h>

#include <algorithm>

namespace keel::hub {

std::string human_bytes(std::uint64_t n) {
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

ByteProgress::ByteProgress(std::FILE *out, std::string label, std::uint64_t total)
    : out_(out),
      label_(std::move(label)),
      total_(total),
      tty_(out && ::isatty(::fileno(out))),
      start_(std::chrono::steady_clock::now()),
      last_draw_() {}

void ByteProgress::update(std::uint64_t done, const std::string &current_file) {
  if (!out_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!started_) {
    started_ = true;
    start_ = now;
    start_done_ = done;  // bytes already there (resumed) do not count toward the rate
  }
  const double pct =
      total_ ? 100.0 * static_cast<double>(std::min(done, total_)) / static_cast<double>(total_)
             : 100.0;
  const double secs = std::chrono::duration<double>(now - start_).count();
  const double rate = secs > 0 ? static_cast<double>(done - std::min(done, start_done_)) / secs : 0;
  if (tty_) {
    if (now - last_draw_ < std::chrono::milliseconds(100) && done < total_) return;
    last_draw_ = now;
    constexpr int kWidth = 28;
    const int filled = static_cast<int>(pct / 100.0 * kWidth);
    std::string bar(static_cast<std::size_t>(filled), '=');
    bar.resize(kWidth, ' ');
    std::fprintf(out_, "\r%s [%s] %5.1f%% %s / %s %s/s %s\x1b[K", label_.c_str(), bar.c_str(), pct,
                 human_bytes(done).c_str(), human_bytes(total_).c_str(),
                 human_bytes(static_cast<std::uint64_t>(rate)).c_str(), current_file.c_str());
    std::fflush(out_);
    return;
  }
  const int tenth = static_cast<int>(pct / 10.0);
  if (tenth == last_tenth_) return;
  last_tenth_ = tenth;
  std::fprintf(out_, "%s: %.0f%% (%s of %s, %s/s) %s\n", label_.c_str(), pct,
               human_bytes(done).c_str(), human_bytes(total_).c_str(),
               human_bytes(static_cast<std::uint64_t>(rate)).c_str(), current_file.c_str());
  std::fflush(out_);
}

void ByteProgress::finish() {
  if (!out_ || finished_) return;
  finished_ = true;
  if (tty_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
}

}  // namespace keel::hub
