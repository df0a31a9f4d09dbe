// The one progress bar of the CLI: off a terminal, a plain line per tenth of the work
// (never a flood), with the figures a reader needs; on a terminal, a bar redrawn in place.
#include "core/progress_bar.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace keel {
namespace {

// Everything written to a temporary file, split into lines.
struct Capture {
  std::FILE *f = std::tmpfile();
  ~Capture() { std::fclose(f); }
  std::string text() {
    std::fflush(f);
    std::rewind(f);
    std::string s;
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, f)) s.append(buf, n);
    return s;
  }
  std::vector<std::string> lines() {
    std::vector<std::string> out;
    std::string cur;
    for (char c : text()) {
      if (c == '\n') {
        out.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    return out;
  }
};

TEST(ProgressBar, OffATerminalOneLinePerTenth) {
  Capture cap;
  ProgressBar bar(cap.f, "read", 1000, ProgressBar::Unit::kBytes);
  for (int done = 0; done <= 1000; done += 1) bar.update(done, "model.safetensors");
  bar.finish();
  const auto lines = cap.lines();
  ASSERT_EQ(lines.size(), 11u);  // 0%, 10%, ..., 100%
  EXPECT_EQ(lines.front().rfind("read: 0% (0 B of 1.0 KB, ", 0), 0u) << lines.front();
  EXPECT_EQ(lines.back().rfind("read: 100% (1.0 KB of 1.0 KB, ", 0), 0u) << lines.back();
  EXPECT_NE(lines.back().find(") model.safetensors"), std::string::npos) << lines.back();
  EXPECT_EQ(cap.text().find('\r'), std::string::npos);  // no terminal codes in a log
}

TEST(ProgressBar, ACountNamesItsNounAndDetail) {
  Capture cap;
  ProgressBar bar(cap.f, "c=3", 6, ProgressBar::Unit::kCount, "requests done");
  bar.update(6, "1 failed");
  const auto lines = cap.lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("c=3: 6/6 requests done, 1 failed, ", 0), 0u) << lines[0];
}

TEST(ProgressBar, OnATerminalRedrawsInPlaceAndEndsTheLine) {
  Capture cap;
  ProgressBar bar(cap.f, "load", 4, ProgressBar::Unit::kCount, "files");
  bar.set_tty(true);
  bar.update(1);
  bar.update(4);  // the end is always drawn, however soon
  bar.finish();
  bar.update(2);  // after finish: ignored
  const std::string t = cap.text();
  EXPECT_EQ(t.front(), '\r');
  EXPECT_NE(t.find("[=======                     ]  25.0% 1/4 files"), std::string::npos) << t;
  EXPECT_NE(t.find("100.0% 4/4 files"), std::string::npos) << t;
  EXPECT_EQ(t.back(), '\n');
  EXPECT_EQ(t.find("2/4"), std::string::npos);
}

TEST(ProgressBar, WithoutATotalShowsTheCountAlone) {
  Capture cap;
  ProgressBar bar(cap.f, "index", 0, ProgressBar::Unit::kCount, "blocks");
  bar.update(10);
  bar.update(20);  // no tenths to cross: the first figure only
  const auto lines = cap.lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("index: 10 blocks, ", 0), 0u) << lines[0];
}

TEST(ProgressBar, FormatsBytesInPowersOfAThousand) {
  EXPECT_EQ(format_bytes(17), "17 B");
  EXPECT_EQ(format_bytes(12'000), "12.0 KB");
  EXPECT_EQ(format_bytes(1'500'000'000), "1.5 GB");
}

}  // namespace
}  // namespace keel
