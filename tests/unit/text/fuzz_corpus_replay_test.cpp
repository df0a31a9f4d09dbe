// Replays the committed libFuzzer corpus of the tokenizer loaders: every input must
// end in success or keel::Error, never a crash or another exception.
#include <gtest/gtest.h>

#include "support/paths.h"
#include "tokenizer_fuzz_target.h"
#include "vocab_test_util.h"

namespace keel {
namespace {

TEST(TokenizerFuzzCorpus, ReplaysWithoutCrashing) {
  const auto dir = test::source_dir() / "tests" / "fuzz" / "corpus" / "tokenizer_json";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent";
  int n = 0;
  for (const auto &e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string bytes = test::slurp(e.path());
    SCOPED_TRACE(e.path().string());
    EXPECT_NO_THROW(
        fuzz::tokenizer_one(reinterpret_cast<const std::uint8_t *>(bytes.data()), bytes.size()));
    ++n;
  }
  EXPECT_GT(n, 5);
}

}  // namespace
}  // namespace keel
