#include "loadgen/progress.h"

#include <unistd.h>

#include <algorithm>

namespace keel::loadgen {

Progress::Progress(std::FILE *out, std::string label, int total)
    : out_(out),
      label_(std::move(label)),
      total_(std::max(total, 1)),
      tty_(isatty(fileno(out)) != 0),
      start_(std::chrono::steady_clock::now()) {
  update(0, 0);
}

void Progress::update(int done, int failed) {
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = kWidth * std::min(done, total_) / total_;
    std::fprintf(out_, "\r%s [%s%s] %d/%d failed %d %.1fs", label_.c_str(),
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(), done,
                 total_, failed, secs);
    std::fflush(out_);
    return;
  }
  const int decile = 10 * std::min(done, total_) / total_;
  if (decile == last_decile_) return;
  last_decile_ = decile;
  std::fprintf(out_, "%s: %d/%d requests done, %d failed, %.1fs\n", label_.c_str(), done, total_,
               failed, secs);
  std::fflush(out_);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (tty_) std::fprintf(out_, "\n");
}

}  // namespace keel::loadgen
