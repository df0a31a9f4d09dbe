#include "grammar/grammar.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "core/error.h"
#include "grammar/utf8_ranges.h"

namespace keel::grammar {

namespace {

[[noreturn]] void fail(const std::string &what) {
  throw Error(ErrorCode::kInvalidArgument, "grammar: " + what);
}

}  // namespace

GrammarBuilder::ExprId GrammarBuilder::push(Expr e) {
  std::uint32_t depth = 1;
  for (ExprId k : e.kids) depth = std::max(depth, exprs_[k].depth + 1);
  e.depth = depth;
  if (depth > limits_.max_expr_depth)
    fail("nests deeper than " + std::to_string(limits_.max_expr_depth) + " levels");
  exprs_.push_back(std::move(e));
  return static_cast<ExprId>(exprs_.size() - 1);
}

GrammarBuilder::ExprId GrammarBuilder::empty() {
  Expr e;
  e.kind = Kind::kEmpty;
  return push(std::move(e));
}

GrammarBuilder::ExprId GrammarBuilder::bytes(std::uint8_t lo, std::uint8_t hi) {
  Expr e;
  e.kind = Kind::kBytes;
  e.lo = lo, e.hi = hi;
  return push(std::move(e));
}

GrammarBuilder::ExprId GrammarBuilder::literal(std::string_view text) {
  std::vector<ExprId> parts;
  parts.reserve(text.size());
  for (char c : text) parts.push_back(bytes(std::uint8_t(c), std::uint8_t(c)));
  return seq(std::move(parts));
}

GrammarBuilder::ExprId GrammarBuilder::literals(const std::vector<std::string> &lits) {
  // A byte trie of the literals, turned into expressions bottom-up: chains of one
  // child become flat sequences, so the depth is the number of branch points.
  std::size_t total = 0;
  for (const std::string &s : lits) total += s.size();
  // Shared prefixes save states, but not more than a few-fold in practice.
  if (total > 4 * limits_.max_nodes)
    fail("more than " + std::to_string(4 * limits_.max_nodes) + " bytes of literals (too large)");
  struct TrieNode {
    std::map<std::uint8_t, std::uint32_t> kids;
    bool end = false;
  };
  std::vector<TrieNode> trie(1);
  for (const std::string &s : lits) {
    std::uint32_t at = 0;
    for (char c : s) {
      auto [it, added] = trie[at].kids.try_emplace(std::uint8_t(c), 0);
      if (added) {
        it->second = static_cast<std::uint32_t>(trie.size());
        trie.emplace_back();
      }
      at = it->second;
    }
    trie[at].end = true;
  }
  // Children always have larger indices than parents: build from the back.
  std::vector<ExprId> expr(trie.size());
  for (std::size_t i = trie.size(); i-- > 0;) {
    std::vector<ExprId> options;
    if (trie[i].end) options.push_back(empty());
    for (auto [byte, kid] : trie[i].kids) options.push_back(seq({bytes(byte, byte), expr[kid]}));
    expr[i] = options.size() == 1 ? options[0] : alt(std::move(options));
  }
  return expr[0];
}

GrammarBuilder::ExprId GrammarBuilder::char_class(std::vector<CodeRange> ranges, bool negated) {
  std::vector<ExprId> options;
  for (const Utf8Sequence &s : utf8_sequences(std::move(ranges), negated)) {
    std::vector<ExprId> parts;
    for (std::size_t i = 0; i < s.len; ++i) parts.push_back(bytes(s.lo[i], s.hi[i]));
    options.push_back(seq(std::move(parts)));
  }
  if (options.empty()) fail("a character class that matches nothing");
  return alt(std::move(options));
}

GrammarBuilder::ExprId GrammarBuilder::seq(std::vector<ExprId> parts) {
  if (parts.size() == 1) return parts[0];
  Expr e;
  e.kind = Kind::kSeq;
  e.kids = std::move(parts);
  return push(std::move(e));
}

GrammarBuilder::ExprId GrammarBuilder::alt(std::vector<ExprId> options) {
  if (options.size() == 1) return options[0];
  Expr e;
  e.kind = Kind::kAlt;
  e.kids = std::move(options);
  return push(std::move(e));
}

namespace {
// A counted repeat is expanded into copies of its body: x{0,5000} (a string's
// maxLength) would be 5,000 copies of a UTF-8 character's states, past the node cap,
// and each copy a node of its own whose token table the matcher builds on first use.
// Past kBlockedAbove it is written with rules instead: a rule B1 = x{kBlock}, B2 =
// B1{kBlock}, ..., so the copies share their nodes, O(kBlock log n) states in all.
constexpr int kBlock = 16;
constexpr int kBlockedAbove = 64;
}  // namespace

// A call of the rule x{kBlock}, one rule for each x.
GrammarBuilder::ExprId GrammarBuilder::block_of(ExprId x) {
  for (const auto &[from, call_expr] : blocks_)
    if (from == x) return call_expr;
  Expr body;
  body.kind = Kind::kRepeat;
  body.min = body.max = kBlock;
  body.kids = {x};
  const ExprId b = push(std::move(body));
  const std::uint32_t r = add_rule("repeat block " + std::to_string(x));
  set_body(r, b);
  const ExprId c = call(r);
  blocks_.emplace_back(x, c);
  return c;
}

// x exactly n times: n / kBlock blocks (themselves blocked), then the rest.
GrammarBuilder::ExprId GrammarBuilder::exact_repeat(ExprId x, int n) {
  if (n <= kBlockedAbove) return repeat(x, n, n);
  return seq({exact_repeat(block_of(x), n / kBlock), repeat(x, n % kBlock, n % kBlock)});
}

// x 0 to m times, m = q * kBlock + r: either at most q - 1 blocks and then at most
// kBlock - 1 more (0 to q * kBlock - 1 in all), or q blocks and at most r more. Each
// length has one parse, so the matcher keeps few live stacks.
GrammarBuilder::ExprId GrammarBuilder::upto_repeat(ExprId x, int m) {
  if (m <= kBlockedAbove) return repeat(x, 0, m);
  const int q = m / kBlock, r = m % kBlock;
  const ExprId b = block_of(x);
  return alt({seq({upto_repeat(b, q - 1), repeat(x, 0, kBlock - 1)}),
              seq({exact_repeat(b, q), repeat(x, 0, r)})});
}

GrammarBuilder::ExprId GrammarBuilder::repeat(ExprId x, int min, int max) {
  if (min < 0 || (max >= 0 && max < min)) fail("a repetition with bad bounds");
  if (min > kBlockedAbove || max > kBlockedAbove) {
    const ExprId head = exact_repeat(x, min);
    if (max < 0) return seq({head, repeat(x, 0, -1)});
    return seq({head, upto_repeat(x, max - min)});
  }
  Expr e;
  e.kind = Kind::kRepeat;
  e.min = min, e.max = max;
  e.kids = {x};
  return push(std::move(e));
}

GrammarBuilder::ExprId GrammarBuilder::call(std::uint32_t rule) {
  Expr e;
  e.kind = Kind::kCall;
  e.rule = rule;
  return push(std::move(e));
}

std::uint32_t GrammarBuilder::add_rule(std::string name) {
  if (rules_.size() >= limits_.max_rules)
    fail("more than " + std::to_string(limits_.max_rules) + " rules");
  rules_.push_back({std::move(name)});
  return static_cast<std::uint32_t>(rules_.size() - 1);
}

void GrammarBuilder::set_body(std::uint32_t rule, ExprId body) {
  rules_[rule].body = body;
  rules_[rule].has_body = true;
}

int GrammarBuilder::find_rule(std::string_view name) const {
  for (std::size_t i = 0; i < rules_.size(); ++i)
    if (rules_[i].name == name) return static_cast<int>(i);
  return -1;
}

// Thompson construction with epsilon edges per rule, then epsilon elimination.
class NfaBuilder {
 public:
  NfaBuilder(const GrammarBuilder &b) : b_(b) {}

  Grammar run(std::uint32_t root) {
    Grammar g;
    g.root = root;
    for (const auto &r : b_.rules_) {
      if (!r.has_body) fail("rule '" + r.name + "' is used but never defined");
      g.rules.push_back({r.name, 0});
    }
    for (std::uint32_t r = 0; r < b_.rules_.size(); ++r) build_rule(g, r);
    trim(g);
    check_left_recursion(g);
    return g;
  }

 private:
  struct TNode {
    std::vector<std::uint32_t> eps;
    std::vector<Grammar::ByteEdge> bytes;
    std::vector<Grammar::CallEdge> calls;
  };

  std::uint32_t fresh() {
    if (t_.size() + total_ >= b_.limits_.max_nodes)
      fail("more than " + std::to_string(b_.limits_.max_nodes) + " states (too large)");
    t_.emplace_back();
    return static_cast<std::uint32_t>(t_.size() - 1);
  }

  // Appends `e` starting at `from`; returns the node where it ends.
  std::uint32_t emit(GrammarBuilder::ExprId id, std::uint32_t from) {
    const auto &e = b_.exprs_[id];
    using K = GrammarBuilder::Kind;
    switch (e.kind) {
      case K::kEmpty:
        return from;
      case K::kBytes: {
        std::uint32_t n = fresh();
        t_[from].bytes.push_back({e.lo, e.hi, n});
        return n;
      }
      case K::kCall: {
        std::uint32_t n = fresh();
        t_[from].calls.push_back({e.rule, n});
        return n;
      }
      case K::kSeq: {
        std::uint32_t cur = from;
        for (auto k : e.kids) cur = emit(k, cur);
        return cur;
      }
      case K::kAlt: {
        std::uint32_t end = fresh();
        for (auto k : e.kids) {
          std::uint32_t s = fresh();
          t_[from].eps.push_back(s);
          std::uint32_t x = emit(k, s);
          t_[x].eps.push_back(end);
        }
        return end;
      }
      case K::kRepeat: {
        std::uint32_t cur = from;
        for (int i = 0; i < e.min; ++i) cur = emit(e.kids[0], cur);
        if (e.max < 0) {
          std::uint32_t head = fresh();
          t_[cur].eps.push_back(head);
          std::uint32_t x = emit(e.kids[0], head);
          t_[x].eps.push_back(head);
          return head;
        }
        if (e.max == e.min) return cur;
        std::uint32_t end = fresh();
        for (int i = e.min; i < e.max; ++i) {
          t_[cur].eps.push_back(end);
          cur = emit(e.kids[0], cur);
        }
        t_[cur].eps.push_back(end);
        return end;
      }
    }
    return from;
  }

  void build_rule(Grammar &g, std::uint32_t rule) {
    t_.clear();
    std::uint32_t start = fresh();
    std::uint32_t end = emit(b_.rules_[rule].body, start);
    // Keep the start and every edge target; each takes the edges of its closure.
    std::vector<std::int64_t> id(t_.size(), -1);
    std::vector<std::uint32_t> kept{start};
    id[start] = 0;
    for (const auto &n : t_) {
      for (const auto &be : n.bytes)
        if (id[be.target] < 0) id[be.target] = 0, kept.push_back(be.target);
      for (const auto &ce : n.calls)
        if (id[ce.target] < 0) id[ce.target] = 0, kept.push_back(ce.target);
    }
    const auto base = static_cast<std::uint32_t>(g.nodes.size());
    for (std::size_t i = 0; i < kept.size(); ++i) id[kept[i]] = base + i;
    g.rules[rule].start = base;
    std::vector<std::uint32_t> mark(t_.size(), 0), stack;
    std::uint32_t stamp = 0;
    for (std::uint32_t k : kept) {
      ++stamp;
      Grammar::Node node;
      node.rule = rule;
      std::vector<Grammar::ByteEdge> bytes;
      std::vector<Grammar::CallEdge> calls;
      stack.assign(1, k);
      mark[k] = stamp;
      while (!stack.empty()) {
        std::uint32_t x = stack.back();
        stack.pop_back();
        if (++work_ > kMaxClosureWork) fail("too large (epsilon closure past its budget)");
        if (x == end) node.final = true;
        for (auto be : t_[x].bytes) bytes.push_back({be.lo, be.hi, std::uint32_t(id[be.target])});
        for (auto ce : t_[x].calls) calls.push_back({ce.rule, std::uint32_t(id[ce.target])});
        for (std::uint32_t y : t_[x].eps)
          if (mark[y] != stamp) mark[y] = stamp, stack.push_back(y);
      }
      auto by = [](const auto &a, const auto &b) {
        return std::tie(a.lo, a.hi, a.target) < std::tie(b.lo, b.hi, b.target);
      };
      std::sort(bytes.begin(), bytes.end(), by);
      bytes.erase(std::unique(bytes.begin(), bytes.end(),
                              [](auto &a, auto &b) {
                                return a.lo == b.lo && a.hi == b.hi && a.target == b.target;
                              }),
                  bytes.end());
      node.bytes_begin = static_cast<std::uint32_t>(g.byte_edges.size());
      g.byte_edges.insert(g.byte_edges.end(), bytes.begin(), bytes.end());
      node.bytes_end = static_cast<std::uint32_t>(g.byte_edges.size());
      node.calls_begin = static_cast<std::uint32_t>(g.call_edges.size());
      g.call_edges.insert(g.call_edges.end(), calls.begin(), calls.end());
      node.calls_end = static_cast<std::uint32_t>(g.call_edges.size());
      g.nodes.push_back(node);
    }
    total_ += kept.size();
  }

  // Drops nodes that can never reach their rule's end and calls of rules that can
  // never finish; a root that can never finish is an error.
  void trim(Grammar &g) {
    const std::size_t n = g.nodes.size();
    std::vector<std::vector<std::uint32_t>> byte_preds(n), call_preds(n), callers(g.rules.size());
    std::vector<std::int64_t> start_of(n, -1);
    for (std::uint32_t r = 0; r < g.rules.size(); ++r) start_of[g.rules[r].start] = r;
    for (std::uint32_t x = 0; x < n; ++x) {
      const auto &nd = g.nodes[x];
      for (auto i = nd.bytes_begin; i < nd.bytes_end; ++i)
        byte_preds[g.byte_edges[i].target].push_back(x);
      for (auto i = nd.calls_begin; i < nd.calls_end; ++i) {
        call_preds[g.call_edges[i].target].push_back(i);
        callers[g.call_edges[i].rule].push_back(i);
      }
    }
    std::vector<std::uint32_t> edge_src(g.call_edges.size());
    for (std::uint32_t x = 0; x < n; ++x)
      for (auto i = g.nodes[x].calls_begin; i < g.nodes[x].calls_end; ++i) edge_src[i] = x;
    std::vector<char> live(n, 0), productive(g.rules.size(), 0);
    std::vector<std::uint32_t> work;
    auto mark = [&](std::uint32_t x) {
      if (!live[x]) live[x] = 1, work.push_back(x);
    };
    for (std::uint32_t x = 0; x < n; ++x)
      if (g.nodes[x].final) mark(x);
    while (!work.empty()) {
      std::uint32_t x = work.back();
      work.pop_back();
      for (auto p : byte_preds[x]) mark(p);
      for (auto e : call_preds[x])
        if (productive[g.call_edges[e].rule]) mark(edge_src[e]);
      if (start_of[x] >= 0) {
        productive[start_of[x]] = 1;
        for (auto e : callers[start_of[x]])
          if (live[g.call_edges[e].target]) mark(edge_src[e]);
      }
    }
    if (!productive[g.root]) fail("rule '" + g.rules[g.root].name + "' can never complete");
    std::vector<Grammar::ByteEdge> bytes;
    std::vector<Grammar::CallEdge> calls;
    for (auto &nd : g.nodes) {
      auto b0 = bytes.size(), c0 = calls.size();
      for (auto i = nd.bytes_begin; i < nd.bytes_end; ++i)
        if (live[g.byte_edges[i].target]) bytes.push_back(g.byte_edges[i]);
      for (auto i = nd.calls_begin; i < nd.calls_end; ++i)
        if (live[g.call_edges[i].target] && productive[g.call_edges[i].rule])
          calls.push_back(g.call_edges[i]);
      nd.bytes_begin = std::uint32_t(b0), nd.bytes_end = std::uint32_t(bytes.size());
      nd.calls_begin = std::uint32_t(c0), nd.calls_end = std::uint32_t(calls.size());
    }
    g.byte_edges = std::move(bytes);
    g.call_edges = std::move(calls);
  }

  // A rule that can call itself before consuming a byte would make the matcher's
  // stack grow without end: refuse it, naming the rule.
  void check_left_recursion(const Grammar &g) {
    const std::size_t nr = g.rules.size();
    std::vector<char> nullable(nr, 0);
    // Nodes reachable from a rule's start through calls of nullable rules only.
    auto reach = [&](std::uint32_t r, auto &&on_call) {
      std::vector<std::uint32_t> stack{g.rules[r].start};
      std::vector<std::uint32_t> seen{g.rules[r].start};
      bool ends = false;
      while (!stack.empty()) {
        std::uint32_t x = stack.back();
        stack.pop_back();
        if (g.nodes[x].final) ends = true;
        for (auto i = g.nodes[x].calls_begin; i < g.nodes[x].calls_end; ++i) {
          const auto &ce = g.call_edges[i];
          on_call(ce.rule);
          if (nullable[ce.rule] && std::find(seen.begin(), seen.end(), ce.target) == seen.end()) {
            seen.push_back(ce.target);
            stack.push_back(ce.target);
          }
        }
      }
      return ends;
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (std::uint32_t r = 0; r < nr; ++r)
        if (!nullable[r] && reach(r, [](std::uint32_t) {})) nullable[r] = 1, changed = true;
    }
    std::vector<std::vector<std::uint32_t>> left(nr);
    for (std::uint32_t r = 0; r < nr; ++r) reach(r, [&](std::uint32_t s) { left[r].push_back(s); });
    std::vector<char> color(nr, 0);  // 0 new, 1 on the path, 2 done
    for (std::uint32_t r0 = 0; r0 < nr; ++r0) {
      if (color[r0]) continue;
      std::vector<std::pair<std::uint32_t, std::size_t>> path{{r0, 0}};
      color[r0] = 1;
      while (!path.empty()) {
        auto &[r, i] = path.back();
        if (i == left[r].size()) {
          color[r] = 2;
          path.pop_back();
          continue;
        }
        std::uint32_t s = left[r][i++];
        if (color[s] == 1) fail("left recursion in rule '" + g.rules[s].name + "'");
        if (color[s] == 0) color[s] = 1, path.push_back({s, 0});
      }
    }
  }

  static constexpr std::size_t kMaxClosureWork = 20'000'000;
  const GrammarBuilder &b_;
  std::vector<TNode> t_;
  std::size_t total_ = 0;
  std::size_t work_ = 0;
};

Grammar GrammarBuilder::build(std::uint32_t root) const {
  if (root >= rules_.size()) fail("no root rule");
  return NfaBuilder(*this).run(root);
}

}  // namespace keel::grammar
