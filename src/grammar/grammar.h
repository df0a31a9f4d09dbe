// The grammar IR: context-free rules over bytes. Front ends (JSON Schema, regex,
// choice, GBNF) build expressions with a GrammarBuilder; build() turns each rule into
// an epsilon-free NFA whose edges consume a byte range or call another rule. The
// matcher runs these NFAs with a stack of return positions (a pushdown automaton).
//
// Text is UTF-8: character classes become alternatives of byte-range sequences, so the
// matcher and the token masks only ever see bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace keel::grammar {

// Caps that keep hostile input (huge enums, nested counted repeats, deep nesting)
// bounded in compile time and memory: past them build() throws kInvalidArgument.
struct GrammarLimits {
  std::size_t max_nodes = 200'000;     // NFA nodes over all rules
  std::size_t max_expr_depth = 2'000;  // nesting of expressions
  std::size_t max_rules = 20'000;
};

// A compiled grammar: every rule an epsilon-free NFA over bytes with call edges.
struct Grammar {
  struct ByteEdge {
    std::uint8_t lo, hi;  // inclusive byte range
    std::uint32_t target;
  };
  struct CallEdge {
    std::uint32_t rule;    // the rule to run
    std::uint32_t target;  // where this rule continues once it returns
  };
  struct Node {
    std::uint32_t bytes_begin = 0, bytes_end = 0;  // into byte_edges
    std::uint32_t calls_begin = 0, calls_end = 0;  // into call_edges
    std::uint32_t rule = 0;                        // the rule the node belongs to
    bool final = false;                            // the rule may end here
  };
  struct Rule {
    std::string name;
    std::uint32_t start = 0;
  };

  std::vector<Node> nodes;
  std::vector<ByteEdge> byte_edges;
  std::vector<CallEdge> call_edges;
  std::vector<Rule> rules;
  std::uint32_t root = 0;  // the rule a document is

  std::size_t num_nodes() const { return nodes.size(); }
};

// Builds expressions in an arena; ids are indices. Front ends create rules (so that
// they may refer to each other, recursively), set their bodies, then call build().
class GrammarBuilder {
 public:
  using ExprId = std::uint32_t;
  using CodeRange = std::pair<char32_t, char32_t>;  // inclusive

  explicit GrammarBuilder(GrammarLimits limits = {}) : limits_(limits) {}

  ExprId empty();
  ExprId bytes(std::uint8_t lo, std::uint8_t hi);
  ExprId literal(std::string_view text);
  // Any one of `literals`, shared prefixes merged (a huge enum stays small).
  ExprId literals(const std::vector<std::string> &literals);
  // One UTF-8 encoded code point in `ranges` (or, negated, outside them).
  ExprId char_class(std::vector<CodeRange> ranges, bool negated = false);
  ExprId any_char() { return char_class({}, true); }
  ExprId seq(std::vector<ExprId> parts);
  ExprId alt(std::vector<ExprId> options);
  // `e` between min and max times; max < 0 means unbounded.
  ExprId repeat(ExprId e, int min, int max);
  ExprId optional(ExprId e) { return repeat(e, 0, 1); }
  ExprId call(std::uint32_t rule);

  std::uint32_t add_rule(std::string name);
  void set_body(std::uint32_t rule, ExprId body);
  // -1 when absent.
  int find_rule(std::string_view name) const;
  const std::string &rule_name(std::uint32_t rule) const { return rules_[rule].name; }
  std::size_t num_rules() const { return rules_.size(); }

  // Throws Error(kInvalidArgument) for a rule without a body, left recursion, a rule
  // that can never finish, or a grammar past the limits.
  Grammar build(std::uint32_t root) const;

 private:
  enum class Kind : std::uint8_t { kEmpty, kBytes, kSeq, kAlt, kRepeat, kCall };
  struct Expr {
    Kind kind;
    std::uint8_t lo = 0, hi = 0;
    int min = 0, max = 0;
    std::uint32_t rule = 0;
    std::uint32_t depth = 1;
    std::vector<ExprId> kids;
  };
  struct RuleDef {
    std::string name;
    ExprId body = 0;
    bool has_body = false;
  };
  friend class NfaBuilder;

  ExprId push(Expr e);
  // Counted repeats past kBlockedAbove, as rules of blocks (see grammar.cpp).
  ExprId exact_repeat(ExprId x, int n);
  ExprId upto_repeat(ExprId x, int m);
  ExprId block_of(ExprId x);

  GrammarLimits limits_;
  std::vector<Expr> exprs_;
  std::vector<RuleDef> rules_;
  std::vector<std::pair<ExprId, ExprId>> blocks_;  // x -> a call of the rule x{kBlock}
};

}  // namespace keel::grammar
