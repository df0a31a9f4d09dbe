// Replays the committed corpus of the JSON Schema fuzz target (tests/fuzz/corpus/
// json_schema: hostile schemas: deep nesting, a large enum, exponential patterns, left
// recursion, counted-repeat blow-ups, and the bounds, divisors and keywords keel
// refuses): every input compiles or ends in keel::Error, never a crash or another
// exception, and the whole corpus within a bounded time.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fuzz/grammar_fuzz_target.h"
#include "support/paths.h"

namespace keel {
namespace {

TEST(JsonSchemaFuzzCorpus, ReplaysWithinBoundsWithoutCrashing) {
  const auto dir = test::source_dir() / "tests" / "fuzz" / "corpus" / "json_schema";
  ASSERT_TRUE(std::filesystem::exists(dir)) << dir;
  int n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto &e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string bytes = ss.str();
    SCOPED_TRACE(e.path().string());
    EXPECT_NO_THROW(
        fuzz::json_schema_one(reinterpret_cast<const std::uint8_t *>(bytes.data()), bytes.size()));
    ++n;
  }
  EXPECT_GT(n, 15);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
}

}  // namespace
}  // namespace keel
