// Progress of a benchmark level: a bar redrawn in place on a terminal, plain lines
// (at most one per tenth of the work) when the output is a file or a pipe.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace keel::loadgen {

class Progress {
 public:
  Progress(std::FILE *out, std::string label, int total);
  void update(int done, int failed);
  void finish();  // ends the bar's line

 private:
  std::FILE *out_;
  std::string label_;
  int total_;
  bool tty_;
  int last_decile_ = -1;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace keel::loadgen
