// Progress of a download in bytes: a bar redrawn in place on a terminal (at most ten
// times a second), and on a file or pipe a plain line per tenth of the total, so a log
// shows where a long pull is without being flooded.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace keel::hub {

class ByteProgress {
 public:
  ByteProgress(std::FILE *out, std::string label, std::uint64_t total);
  void update(std::uint64_t done, const std::string &current_file);
  void finish();

 private:
  std::FILE *out_;
  std::string label_;
  std::uint64_t total_;
  bool tty_;
  int last_tenth_ = -1;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
  std::uint64_t start_done_ = 0;
  bool started_ = false;
};

// "1.5 GB", "820 MB", "12 KB", "17 B"
std::string human_bytes(std::uint64_t n);

}  // namespace keel::hub
