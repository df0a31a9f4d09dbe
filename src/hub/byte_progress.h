// keel pull's progress: the shared bar (core/progress_bar.h) counting bytes, with the
// file being fetched after the figures.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/progress_bar.h"

namespace keel::hub {

class ByteProgress {
 public:
  ByteProgress(std::FILE *out, std::string label, std::uint64_t total)
      : bar_(out, std::move(label), static_cast<std::int64_t>(total), ProgressBar::Unit::kBytes) {}
  void update(std::uint64_t done, const std::string &current_file) {
    bar_.update(static_cast<std::int64_t>(done), current_file);
  }
  void finish() { bar_.finish(); }

 private:
  ProgressBar bar_;
};

// "1.5 GB", "820 MB", "12 KB", "17 B"
inline std::string human_bytes(std::uint64_t n) { return format_bytes(n); }

}  // namespace keel::hub
