// vocab_difference (text/vocab_match.h): two of make-model's generated tokenizers, one
// with a token more, and one with two tokens' ids swapped.
#include "text/vocab_match.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "formats/make_model.h"

namespace keel {
namespace {

std::filesystem::path made(const std::string &name, std::int64_t vocab) {
  const auto d = std::filesystem::temp_directory_path() /
                 ("keel-vocab-match-" + std::to_string(::getpid())) / name;
  MakeModelOptions o;
  o.shape = "tiny";
  o.layers = 1;
  o.vocab = vocab;
  o.out = d;
  o.threads = 1;
  make_model(o);
  return d;
}

TEST(VocabMatch, SameTokensMatchAndDifferencesAreNamed) {
  const auto dir_a = made("a", 512);
  const auto a = Tokenizer::load(dir_a);
  const auto b = Tokenizer::load(made("b", 512));
  EXPECT_EQ(vocab_difference(*a, *b), "");

  std::ifstream f(dir_a / "tokenizer.json");
  std::stringstream ss;
  ss << f.rdbuf();
  const nlohmann::ordered_json base = nlohmann::ordered_json::parse(ss.str());
  // One token more.
  nlohmann::ordered_json j = base;
  j["added_tokens"].push_back({{"id", a->vocab_size()},
                               {"content", "<|extra|>"},
                               {"single_word", false},
                               {"lstrip", false},
                               {"rstrip", false},
                               {"normalized", false},
                               {"special", true}});
  const auto wide = Tokenizer::from_json(j.dump(), "wide");
  ASSERT_EQ(wide->vocab_size(), a->vocab_size() + 1);
  const std::string size = vocab_difference(*a, *wide);
  EXPECT_NE(size.find(std::to_string(wide->vocab_size()) + " tokens against the target's " +
                      std::to_string(a->vocab_size())),
            std::string::npos)
      << size;
  // The ids of two byte tokens swapped.
  j = base;
  const std::string x = a->token_text(65), y = a->token_text(66);
  j["model"]["vocab"][x] = 66;
  j["model"]["vocab"][y] = 65;
  const auto swapped = Tokenizer::from_json(j.dump(), "swapped");
  const std::string diff = vocab_difference(*a, *swapped);
  EXPECT_NE(diff.find("token 65 is '" + y + "' against the target's '" + x + "'"),
            std::string::npos)
      << diff;
}

}  // namespace
}  // namespace keel
