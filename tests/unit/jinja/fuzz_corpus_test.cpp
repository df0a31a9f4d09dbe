// Replays the libFuzzer corpus of the Jinja2 harness (tests/fuzz/corpus/jinja/): every
// input must parse/render or fail with keel::Error, never crash or hang.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "support/paths.h"

#define KEEL_FUZZ_NO_MAIN
#include "fuzz/fuzz_jinja.cpp"

namespace {

TEST(JinjaFuzzCorpus, EveryInputIsHandled) {
  auto dir = keel::test::source_dir() / "tests" / "fuzz" / "corpus" / "jinja";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int n = 0;
  for (const auto &entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream f(entry.path(), std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    std::string data = ss.str();
    auto start = std::chrono::steady_clock::now();
    keel_fuzz_jinja_one(reinterpret_cast<const std::uint8_t *>(data.data()), data.size());
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count();
    EXPECT_LT(ms, 5000) << entry.path() << " took " << ms << " ms";
    ++n;
  }
  EXPECT_GT(n, 100);
}

}  // namespace
