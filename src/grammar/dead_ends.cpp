#include "grammar/dead_ends.h"

#include <cstdio>
#include <vector>

#include "core/error.h"
#include "grammar/token_vocab.h"

namespace keel::grammar {

ByteSet vocab_bytes(std::size_t n, const std::function<std::string(std::size_t)> &bytes_of) {
  ByteSet s;
  for (std::size_t i = 0; i < n && !s.all(); ++i)
    for (unsigned char c : bytes_of(i)) s.set(c);
  return s;
}

ByteSet vocab_bytes(const TokenVocab &vocab) {
  ByteSet s;
  // Every token lies in the trie (special tokens are not in it): its edges are the bytes.
  for (const auto &n : vocab.trie())
    if (n.depth > 0) s.set(n.byte);
  return s;
}

namespace {

// Which nodes can still reach the end of their rule, and which rules can finish, over
// the grammar's current edges (a worklist over the reversed edges).
struct Productive {
  std::vector<char> node, rule;
};

Productive productive(const Grammar &g) {
  const std::size_t n = g.nodes.size();
  Productive p{std::vector<char>(n, 0), std::vector<char>(g.rules.size(), 0)};
  // Reversed edges in CSR form: by target node, and calls by the rule they call.
  std::vector<std::uint32_t> by_target_off(n + 1, 0), by_rule_off(g.rules.size() + 1, 0);
  for (std::uint32_t x = 0; x < n; ++x) {
    const auto &nd = g.nodes[x];
    for (auto i = nd.bytes_begin; i < nd.bytes_end; ++i)
      ++by_target_off[g.byte_edges[i].target + 1];
    for (auto i = nd.calls_begin; i < nd.calls_end; ++i) {
      ++by_target_off[g.call_edges[i].target + 1];
      ++by_rule_off[g.call_edges[i].rule + 1];
    }
  }
  for (std::size_t i = 0; i < n; ++i) by_target_off[i + 1] += by_target_off[i];
  for (std::size_t i = 0; i < g.rules.size(); ++i) by_rule_off[i + 1] += by_rule_off[i];
  struct In {
    std::uint32_t from;
    std::int64_t call;  // the call edge, or -1 for a byte edge
  };
  std::vector<In> by_target(by_target_off[n]);
  std::vector<std::uint32_t> by_rule(by_rule_off[g.rules.size()]);  // call edge indices
  {
    auto t = by_target_off;
    auto r = by_rule_off;
    for (std::uint32_t x = 0; x < n; ++x) {
      const auto &nd = g.nodes[x];
      for (auto i = nd.bytes_begin; i < nd.bytes_end; ++i)
        by_target[t[g.byte_edges[i].target]++] = {x, -1};
      for (auto i = nd.calls_begin; i < nd.calls_end; ++i) {
        by_target[t[g.call_edges[i].target]++] = {x, std::int64_t(i)};
        by_rule[r[g.call_edges[i].rule]++] = i;
      }
    }
  }
  // The node owning each call edge.
  std::vector<std::uint32_t> call_from(g.call_edges.size());
  for (std::uint32_t x = 0; x < n; ++x)
    for (auto i = g.nodes[x].calls_begin; i < g.nodes[x].calls_end; ++i) call_from[i] = x;
  std::vector<int> rule_of_start(n, -1);
  for (std::uint32_t r = 0; r < g.rules.size(); ++r) rule_of_start[g.rules[r].start] = int(r);

  std::vector<std::uint32_t> work;
  for (std::uint32_t x = 0; x < n; ++x)
    if (g.nodes[x].final) p.node[x] = 1, work.push_back(x);
  while (!work.empty()) {
    const std::uint32_t t = work.back();
    work.pop_back();
    for (auto k = by_target_off[t]; k < by_target_off[t + 1]; ++k) {
      const In &in = by_target[k];
      if (p.node[in.from]) continue;
      if (in.call < 0 || p.rule[g.call_edges[in.call].rule])
        p.node[in.from] = 1, work.push_back(in.from);
    }
    if (const int r = rule_of_start[t]; r >= 0 && !p.rule[r]) {
      p.rule[r] = 1;
      for (auto k = by_rule_off[r]; k < by_rule_off[r + 1]; ++k) {
        const auto e = by_rule[k];
        const std::uint32_t from = call_from[e];
        if (!p.node[from] && p.node[g.call_edges[e].target]) p.node[from] = 1, work.push_back(from);
      }
    }
  }
  return p;
}

std::string byte_list(const ByteSet &s) {
  std::string out;
  int shown = 0;
  for (int b = 0; b < 256; ++b)
    if (s[b]) {
      if (shown == 8) return out + ", ...";
      char buf[8];
      std::snprintf(buf, sizeof buf, "0x%02X", b);
      if (shown++) out += ", ";
      out += buf;
      if (b >= 0x20 && b < 0x7F) out += std::string(" '") + char(b) + "'";
    }
  return out;
}

}  // namespace

void trim_dead_ends(Grammar &g, const ByteSet &bytes, const std::string &where) {
  const Productive before = productive(g);
  // 1. Byte edges keep only the bytes some token has (a range may split).
  std::vector<Grammar::ByteEdge> edges;
  edges.reserve(g.byte_edges.size());
  std::vector<ByteSet> lost(g.rules.size());
  bool any_lost = false;
  for (auto &nd : g.nodes) {
    const auto begin = std::uint32_t(edges.size());
    for (auto i = nd.bytes_begin; i < nd.bytes_end; ++i) {
      const auto e = g.byte_edges[i];
      int lo = -1;
      for (int b = e.lo; b <= int(e.hi) + 1; ++b) {
        const bool ok = b <= e.hi && bytes[b];
        if (b <= e.hi && !ok) lost[nd.rule].set(b), any_lost = true;
        if (ok && lo < 0) lo = b;
        if (!ok && lo >= 0) {
          edges.push_back({std::uint8_t(lo), std::uint8_t(b - 1), e.target});
          lo = -1;
        }
      }
    }
    nd.bytes_begin = begin;
    nd.bytes_end = std::uint32_t(edges.size());
  }
  g.byte_edges = std::move(edges);
  if (!any_lost) return;  // nothing removed: the grammar was built without dead ends
  const Productive after = productive(g);
  if (!after.rule[g.root]) {
    // Name a rule that lost bytes and can no longer finish (the deepest cause), else
    // the document.
    int culprit = -1;
    for (std::uint32_t r = 0; r < g.rules.size(); ++r)
      if (before.rule[r] && !after.rule[r] && lost[r].any()) {
        culprit = int(r);
        break;
      }
    ByteSet missing;
    if (culprit >= 0)
      missing = lost[culprit];
    else
      for (const auto &l : lost) missing |= l;
    const std::string rule = culprit >= 0 ? g.rules[culprit].name : g.rules[g.root].name;
    throw Error(ErrorCode::kInvalidArgument,
                (where.empty() ? std::string("grammar") : where) + ": '" + rule +
                    "' needs byte(s) " + byte_list(missing) +
                    " that no token of the model's vocabulary contains, so the output could "
                    "never be completed");
  }
  // 2. No edge may lead where the rule cannot finish (a dead end mid-document).
  std::vector<Grammar::ByteEdge> kept;
  std::vector<Grammar::CallEdge> calls;
  for (std::uint32_t x = 0; x < g.nodes.size(); ++x) {
    auto &nd = g.nodes[x];
    const auto b0 = std::uint32_t(kept.size()), c0 = std::uint32_t(calls.size());
    for (auto i = nd.bytes_begin; i < nd.bytes_end; ++i)
      if (after.node[g.byte_edges[i].target]) kept.push_back(g.byte_edges[i]);
    for (auto i = nd.calls_begin; i < nd.calls_end; ++i) {
      const auto &c = g.call_edges[i];
      if (after.rule[c.rule] && after.node[c.target]) calls.push_back(c);
    }
    nd.bytes_begin = b0, nd.bytes_end = std::uint32_t(kept.size());
    nd.calls_begin = c0, nd.calls_end = std::uint32_t(calls.size());
  }
  g.byte_edges = std::move(kept);
  g.call_edges = std::move(calls);
}

}  // namespace keel::grammar
