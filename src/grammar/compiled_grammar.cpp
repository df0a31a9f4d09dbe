#include "grammar/compiled_grammar.h"

#include <algorithm>
#include <array>
#include <map>

#include "core/error.h"
#include "grammar/dead_ends.h"

namespace keel::grammar {

CompiledGrammar::CompiledGrammar(Grammar g, std::shared_ptr<const TokenVocab> vocab)
    : grammar_(std::move(g)), pda_(grammar_), vocab_(std::move(vocab)) {
  // Refuse now what this vocabulary cannot write, and cut paths that could not end.
  if (vocab_) trim_dead_ends(grammar_, vocab_bytes(*vocab_));
  tables_.resize(grammar_.nodes.size());
  // A node is call-free when no node reachable from it has a call edge.
  const std::size_t n = grammar_.nodes.size();
  std::vector<std::vector<std::uint32_t>> preds(n);
  std::vector<std::uint32_t> work;
  call_free_.assign(n, 1);
  for (std::uint32_t x = 0; x < n; ++x) {
    const auto &nd = grammar_.nodes[x];
    for (auto i = nd.bytes_begin; i < nd.bytes_end; ++i)
      preds[grammar_.byte_edges[i].target].push_back(x);
    if (nd.calls_end > nd.calls_begin) call_free_[x] = 0, work.push_back(x);
  }
  while (!work.empty()) {
    std::uint32_t x = work.back();
    work.pop_back();
    for (std::uint32_t p : preds[x])
      if (call_free_[p]) call_free_[p] = 0, work.push_back(p);
  }
}

std::vector<std::uint32_t> CompiledGrammar::shape(std::uint32_t node) const {
  constexpr std::size_t kMaxShapeNodes = 512;
  std::vector<std::uint32_t> order{node}, out;
  std::unordered_map<std::uint32_t, std::uint32_t> number{{node, 0}};
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto &nd = grammar_.nodes[order[i]];
    out.push_back((nd.bytes_end - nd.bytes_begin) * 2 + (nd.final ? 1 : 0));
    for (auto e = nd.bytes_begin; e < nd.bytes_end; ++e) {
      const auto &be = grammar_.byte_edges[e];
      auto [it, added] = number.try_emplace(be.target, std::uint32_t(order.size()));
      if (added) {
        if (order.size() == kMaxShapeNodes) return {};
        order.push_back(be.target);
      }
      out.push_back(std::uint32_t(be.lo) << 8 | be.hi);
      out.push_back(it->second);
    }
  }
  return out;
}

const NodeTokenTable &CompiledGrammar::table(std::uint32_t node) const {
  {
    std::lock_guard lock(mu_);
    if (tables_[node]) return *tables_[node];
  }
  std::vector<std::uint32_t> key;
  if (call_free_[node]) {
    key = shape(node);
    std::lock_guard lock(mu_);
    if (!key.empty())
      if (auto it = by_shape_.find(key); it != by_shape_.end()) {
        if (!tables_[node]) tables_[node] = it->second;
        return *tables_[node];
      }
  }
  std::shared_ptr<const NodeTokenTable> t = compute_table(node);  // outside the lock
  std::lock_guard lock(mu_);
  if (!key.empty()) by_shape_.try_emplace(std::move(key), t);
  if (!tables_[node]) tables_[node] = std::move(t);
  return *tables_[node];
}

void CompiledGrammar::precompute_all(const std::atomic<bool> *stop) const {
  for (std::uint32_t n = 0; n < grammar_.nodes.size(); ++n) {
    if (stop && stop->load(std::memory_order_relaxed)) return;
    if (grammar_.nodes[n].bytes_end > grammar_.nodes[n].bytes_begin) table(n);
  }
}

std::size_t CompiledGrammar::num_tables() const {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const auto &t : tables_) n += t != nullptr;
  return n;
}

namespace {

// Steps the pushdown automaton from a node, one state per trie depth. States are
// interned by the node sequences of their stacks, and each (state, byte) transition
// is computed once: walking 300k trie nodes mostly repeats a few transitions.
class PdaStepper {
 public:
  PdaStepper(const Pda &pda, std::uint32_t node, std::size_t depths) : pda_(pda), at_(depths) {
    StateSet s = pda_.at_node(arena_, node);
    s.can_end = false;  // ending before any byte is the callers' business
    at_[0] = intern(std::move(s), arena_.size()).first;
  }
  bool step(std::size_t d, std::uint8_t byte) {
    std::int32_t &next = states_[at_[d - 1]].next[byte];
    if (next == kUnknown) {
      const std::size_t mark = arena_.size();
      StateSet out;
      pda_.advance(arena_, states_[at_[d - 1]].rep, byte, out);
      if (out.empty()) {
        arena_.truncate(mark);
        next = kDead;
      } else {
        auto [id, added] = intern(std::move(out), mark);
        if (!added) arena_.truncate(mark);  // an existing state: drop the new frames
        next = id;
      }
      // `next` may dangle if intern grew states_: look it up again.
      states_[at_[d - 1]].next[byte] = next;
    }
    if (next == kDead) return false;
    at_[d] = next;
    return true;
  }
  bool can_end(std::size_t d) const { return states_[at_[d]].rep.can_end; }
  bool can_continue(std::size_t d) const { return !states_[at_[d]].rep.tops.empty(); }

 private:
  static constexpr std::int32_t kUnknown = -2, kDead = -1;
  struct State {
    StateSet rep;  // frames in arena_, kept
    std::array<std::int32_t, 256> next;
  };

  std::pair<std::int32_t, bool> intern(StateSet s, std::size_t) {
    // Key: can_end, then each stack's nodes top to bottom, stacks sorted.
    std::vector<std::vector<std::uint32_t>> stacks;
    for (std::int32_t t : s.tops) {
      std::vector<std::uint32_t> st;
      for (std::int32_t f = t; f != kBottom; f = arena_[f].parent) st.push_back(arena_[f].node);
      stacks.push_back(std::move(st));
    }
    std::sort(stacks.begin(), stacks.end());
    std::vector<std::uint32_t> key{s.can_end ? 1u : 0u};
    for (auto &st : stacks) {
      key.insert(key.end(), st.begin(), st.end());
      key.push_back(~0u);
    }
    auto [it, added] = index_.try_emplace(std::move(key), std::int32_t(states_.size()));
    if (added) {
      State st;
      st.rep = std::move(s);
      st.next.fill(kUnknown);
      states_.push_back(std::move(st));
    }
    return {it->second, added};
  }

  const Pda &pda_;
  FrameArena arena_;
  std::vector<std::int32_t> at_;  // state per depth
  std::vector<State> states_;
  std::map<std::vector<std::uint32_t>, std::int32_t> index_;
};

// For a node from which no call is reachable the state is a set of nodes of one rule:
// determinized lazily, a step is a table lookup.
class DfaStepper {
 public:
  DfaStepper(const Grammar &g, std::uint32_t node, std::size_t depths) : g_(g), at_(depths) {
    at_[0] = intern(close({node}));
  }
  bool step(std::size_t d, std::uint8_t byte) {
    std::int32_t &next = states_[at_[d - 1]].next[byte];
    if (next == kUnknown) {
      std::vector<std::uint32_t> targets;
      for (std::uint32_t n : states_[at_[d - 1]].nodes) {
        const auto &nd = g_.nodes[n];
        for (auto i = nd.bytes_begin; i < nd.bytes_end; ++i) {
          const auto &e = g_.byte_edges[i];
          if (byte >= e.lo && byte <= e.hi) targets.push_back(e.target);
        }
      }
      auto key = close(std::move(targets));
      next = key.first.empty() && !key.second ? kDead : intern(std::move(key));
    }
    if (next == kDead) return false;
    at_[d] = next;
    return true;
  }
  bool can_end(std::size_t d) const { return states_[at_[d]].can_end; }
  bool can_continue(std::size_t d) const { return !states_[at_[d]].nodes.empty(); }

 private:
  static constexpr std::int32_t kUnknown = -2, kDead = -1;
  struct State {
    std::vector<std::uint32_t> nodes;  // those with byte edges, sorted
    bool can_end = false;
    std::array<std::int32_t, 256> next;
  };
  using Key = std::pair<std::vector<std::uint32_t>, bool>;

  Key close(std::vector<std::uint32_t> nodes) const {
    Key k{{}, false};
    for (std::uint32_t n : nodes) {
      if (g_.nodes[n].final) k.second = true;
      if (g_.nodes[n].bytes_end > g_.nodes[n].bytes_begin) k.first.push_back(n);
    }
    std::sort(k.first.begin(), k.first.end());
    k.first.erase(std::unique(k.first.begin(), k.first.end()), k.first.end());
    return k;
  }
  std::int32_t intern(Key k) {
    auto [it, added] = index_.try_emplace(k, std::int32_t(states_.size()));
    if (added) {
      State s;
      s.nodes = std::move(k.first);
      s.can_end = k.second;
      s.next.fill(kUnknown);
      states_.push_back(std::move(s));
    }
    return it->second;
  }

  const Grammar &g_;
  std::vector<std::int32_t> at_;  // DFA state per depth
  std::vector<State> states_;
  std::map<Key, std::int32_t> index_;
};

// Walks the vocabulary trie from a node alone. A token is accepted when a path inside
// the node's rule consumes all of it; it is uncertain when no path does but some path
// finished the rule (popped past the node) with bytes left over: the caller's rules
// decide. Finishing before any byte is not counted: the state's other frames, the
// callers', cover that case.
template <typename Stepper>
std::unique_ptr<NodeTokenTable> walk_trie(const TokenVocab &vocab, Stepper &st) {
  const auto &trie = vocab.trie();
  const auto &toks = vocab.trie_tokens();
  std::vector<char> exited(vocab.max_token_len() + 3, 0);  // the rule ended before byte d
  std::vector<TokenId> accepted;
  auto out = std::make_unique<NodeTokenTable>();
  auto uncertain_from = [&](std::uint32_t from, std::uint32_t end) {
    for (auto j = from; j < end; ++j)
      if (trie[j].tokens_end > trie[j].tokens_begin) out->uncertain.push_back(j);
  };
  for (std::uint32_t i = 1; i < trie.size();) {
    const auto &t = trie[i];
    const std::size_t d = t.depth;
    if (!st.step(d, t.byte)) {
      if (exited[d]) uncertain_from(i, t.end);
      i = t.end;
      continue;
    }
    for (auto k = t.tokens_begin; k < t.tokens_end; ++k) accepted.push_back(toks[k]);
    exited[d + 1] = exited[d] || st.can_end(d);
    if (st.can_continue(d)) {
      ++i;
      continue;
    }
    if (exited[d + 1]) uncertain_from(i + 1, t.end);  // the rule ended exactly here
    i = t.end;
  }
  if (accepted.size() * 32 < vocab.size()) {
    std::sort(accepted.begin(), accepted.end());
    out->accepted_list = std::move(accepted);
  } else {
    out->accepted_bits.assign((vocab.size() + 31) / 32, 0);
    for (TokenId id : accepted) out->accepted_bits[id >> 5] |= 1u << (id & 31);
  }
  return out;
}

}  // namespace

std::unique_ptr<NodeTokenTable> CompiledGrammar::compute_table(std::uint32_t node) const {
  KEEL_CHECK(vocab_ != nullptr);
  const std::size_t depths = vocab_->max_token_len() + 2;
  if (call_free_[node]) {
    DfaStepper st(grammar_, node, depths);
    return walk_trie(*vocab_, st);
  }
  PdaStepper st(pda_, node, depths);
  return walk_trie(*vocab_, st);
}

void CompiledGrammar::fill_mask(FrameArena &arena, const StateSet &state,
                                TokenBitmask &mask) const {
  KEEL_CHECK(vocab_ != nullptr);
  if (mask.vocab_size() != vocab_->size()) mask = TokenBitmask(vocab_->size());
  mask.clear();
  auto words = mask.words();
  // Union over the distinct nodes on top of the stacks.
  std::vector<std::uint32_t> nodes;
  nodes.reserve(state.tops.size());
  for (std::int32_t t : state.tops) nodes.push_back(arena[t].node);
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  std::vector<std::uint32_t> uncertain;
  for (std::uint32_t n : nodes) {
    const NodeTokenTable &tab = table(n);
    if (!tab.accepted_bits.empty())
      for (std::size_t w = 0; w < words.size(); ++w) words[w] |= tab.accepted_bits[w];
    for (TokenId id : tab.accepted_list) mask.set(id);
    if (uncertain.empty())
      uncertain = tab.uncertain;
    else
      uncertain.insert(uncertain.end(), tab.uncertain.begin(), tab.uncertain.end());
  }
  if (nodes.size() > 1) {
    std::sort(uncertain.begin(), uncertain.end());
    uncertain.erase(std::unique(uncertain.begin(), uncertain.end()), uncertain.end());
  }
  // Checking uncertain tokens costs more than the rest: reuse the mask of a state
  // seen before (the same stacks, e.g. every step inside one string).
  std::vector<std::uint32_t> key;
  if (!uncertain.empty()) {
    key.push_back(state.can_end ? 1u : 0u);
    std::vector<std::vector<std::uint32_t>> stacks;
    for (std::int32_t t : state.tops) {
      std::vector<std::uint32_t> st;
      for (std::int32_t f = t; f != kBottom; f = arena[f].parent) st.push_back(arena[f].node);
      stacks.push_back(std::move(st));
    }
    std::sort(stacks.begin(), stacks.end());
    for (auto &st : stacks) {
      key.insert(key.end(), st.begin(), st.end());
      key.push_back(~0u);
    }
    std::lock_guard lock(mu_);
    if (auto it = mask_cache_.find(key); it != mask_cache_.end()) {
      std::copy(it->second.begin(), it->second.end(), words.begin());
      return;
    }
  }
  if (!uncertain.empty()) {
    // Check each uncertain token against the real stacks, walking shared prefixes once.
    const auto &trie = vocab_->trie();
    const auto &toks = vocab_->trie_tokens();
    const std::size_t base = arena.size();
    const std::size_t cap = vocab_->max_token_len() + 2;
    std::vector<StateSet> states(cap);
    std::vector<std::size_t> marks(cap);
    std::vector<std::uint32_t> on_path(cap, 0);  // trie node at each depth of the path
    std::size_t path_len = 1;                    // depths [0, path_len) are valid
    states[0] = state;
    marks[0] = base;
    std::uint32_t dead_until = 0;
    std::vector<std::uint32_t> chain;
    for (std::uint32_t u : uncertain) {
      if (u < dead_until) continue;
      chain.clear();
      std::uint32_t x = u;
      while (x != 0 && !(trie[x].depth < path_len && on_path[trie[x].depth] == x)) {
        chain.push_back(x);
        x = trie[x].parent;
      }
      path_len = trie[x].depth + 1;
      arena.truncate(marks[trie[x].depth]);
      bool alive = true;
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        const std::size_t d = trie[*it].depth;
        pda_.advance(arena, states[d - 1], trie[*it].byte, states[d]);
        if (states[d].empty()) {
          dead_until = trie[*it].end;
          alive = false;
          break;
        }
        on_path[d] = *it;
        marks[d] = arena.size();
        path_len = d + 1;
      }
      if (alive)
        for (auto k = trie[u].tokens_begin; k < trie[u].tokens_end; ++k) mask.set(toks[k]);
    }
    arena.truncate(base);
  }
  if (state.can_end)
    for (TokenId id : vocab_->eos_ids())
      if (id >= 0 && std::size_t(id) < vocab_->size()) mask.set(id);
  if (!key.empty()) {
    std::lock_guard lock(mu_);
    if (mask_cache_.size() >= kMaskCacheEntries) mask_cache_.clear();  // simple bound
    mask_cache_.emplace(std::move(key), std::vector<std::uint32_t>(words.begin(), words.end()));
  }
}

}  // namespace keel::grammar
