// Replays the committed libFuzzer corpus (tests/fuzz/corpus/<target>/) through the
// parsers: every file must parse or give keel::Error, never crash.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "fuzz/format_targets.h"
#include "support/paths.h"

namespace keel {
namespace {

int replay(const std::string &target, void (*one)(const std::uint8_t *, std::size_t)) {
  const auto dir = test::source_dir() / "tests/fuzz/corpus" / target;
  if (!std::filesystem::exists(dir)) return -1;
  int n = 0;
  for (const auto &e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string bytes = ss.str();
    SCOPED_TRACE(e.path().string());
    one(reinterpret_cast<const std::uint8_t *>(bytes.data()), bytes.size());
    ++n;
  }
  return n;
}

TEST(FuzzCorpus, Gguf) {
  const int n = replay("gguf", fuzz::gguf_one);
  if (n < 0) GTEST_SKIP() << "no corpus";
  EXPECT_GT(n, 10);
}

TEST(FuzzCorpus, Safetensors) {
  const int n = replay("safetensors", fuzz::safetensors_one);
  if (n < 0) GTEST_SKIP() << "no corpus";
  EXPECT_GT(n, 10);
}

TEST(FuzzCorpus, HfConfig) {
  const int n = replay("hf_config", fuzz::hf_config_one);
  if (n < 0) GTEST_SKIP() << "no corpus";
  EXPECT_GT(n, 10);
}

}  // namespace
}  // namespace keel
