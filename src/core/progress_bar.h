// Progress of long CLI work (keel pull's downloads, keel bench's levels, keel run's and
// keel engine's weight reading): a bar redrawn in place on a terminal, at most ten times
// a second, and on a file or pipe a plain line per tenth of the total, so a log shows
// where the work is without being flooded. The one bar every command uses.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace keel {

// "1.5 GB", "820 MB", "12 KB", "17 B" (powers of 1000, as download tools show them).
std::string format_bytes(std::uint64_t n);

class ProgressBar {
 public:
  // `noun` follows a count ("6/10 requests done"); with bytes the figures are sizes
  // with a rate. A total of 0 shows the count alone, without a bar or a percentage.
  enum class Unit { kCount, kBytes };
  ProgressBar(std::FILE *out, std::string label, std::int64_t total, Unit unit = Unit::kCount,
              std::string noun = {});
  ProgressBar(const ProgressBar &) = delete;
  ProgressBar &operator=(const ProgressBar &) = delete;

  // `detail` is free text after the figures ("3 failed", the file being fetched).
  void update(std::int64_t done, const std::string &detail = {});
  // Ends the bar's line on a terminal; later updates are ignored.
  void finish();
  // For tests and callers that format their own lines.
  void set_tty(bool tty) { tty_ = tty; }

 private:
  std::string line(std::int64_t done, double secs, const std::string &detail, bool with_pct) const;

  std::FILE *out_;
  std::string label_, noun_;
  std::int64_t total_;
  Unit unit_;
  bool tty_;
  int last_tenth_ = -1;
  bool started_ = false, finished_ = false;
  std::int64_t start_done_ = 0;  // already there at the first update (resumed): not in the rate
  std::chrono::steady_clock::time_point start_, last_draw_{};
};

}  // namespace keel
