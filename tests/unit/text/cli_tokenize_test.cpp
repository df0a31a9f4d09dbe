// keel tokenize / keel detokenize as a user runs them.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>

#include "support/paths.h"

namespace keel {
namespace {

std::string run(const std::string &cmd) {
  std::string out;
  FILE *p = popen(cmd.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  return out;
}

TEST(Cli, TokenizeAndDetokenize) {
  auto d = test::testdata_dir();
  if (!d) GTEST_SKIP() << "../shared/testdata is absent";
  if (!std::filesystem::exists(test::keel_binary())) GTEST_SKIP() << "build the keel binary first";
  const std::string keel = test::keel_binary().string();
  const std::string model = (*d / "spm" / "llama2-tokenizer.model").string();
  EXPECT_EQ(run(keel + " tokenize --model " + model + " 'Hello world'"), "[15043, 3186]\n");
  EXPECT_EQ(run(keel + " tokenize --bos --model " + model + " 'Hello world'"),
            "[1, 15043, 3186]\n");
  EXPECT_EQ(run(keel + " tokenize --model " + model + " '</s>'").find("[2]"), std::string::npos);
  EXPECT_EQ(run(keel + " tokenize --special --model " + model + " '</s>'"), "[2]\n");
  EXPECT_EQ(run(keel + " detokenize --model " + model + " 15043 3186"), "Hello world\n");
  EXPECT_EQ(run(keel + " detokenize --model " + model + " '[15043, 3186]'"), "Hello world\n");
  // Out-of-range ids are an error, not a crash.
  EXPECT_EQ(run(keel + " detokenize --model " + model + " 99999999 2>&1").find("out of range") ==
                std::string::npos,
            false);
}

}  // namespace
}  // namespace keel
