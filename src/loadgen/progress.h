// Progress of a benchmark level: the shared bar (core/progress_bar.h) counting requests,
// with the failures after the count.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>

#include "core/progress_bar.h"

namespace keel::loadgen {

class Progress {
 public:
  Progress(std::FILE *out, std::string label, int total)
      : bar_(out, std::move(label), std::max(total, 1), ProgressBar::Unit::kCount,
             "requests done") {
    update(0, 0);
  }
  void update(int done, int failed) { bar_.update(done, std::to_string(failed) + " failed"); }
  void finish() { bar_.finish(); }  // ends the bar's line

 private:
  ProgressBar bar_;
};

}  // namespace keel::loadgen
