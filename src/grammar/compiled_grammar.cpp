#include "grammar/compiled_grammar.h"

#include <algorithm>

#include "core/error.h"

namespace keel::grammar {

CompiledGrammar::CompiledGrammar(Grammar g, std::shared_ptr<const TokenVocab> vocab)
    : grammar_(std::move(g)), pda_(grammar_), vocab_(std::move(vocab)) {
  tables_.resize(grammar_.nodes.size());
}

const NodeTokenTable &CompiledGrammar::table(std::uint32_t node) const {
  {
    std::lock_guard lock(mu_);
    if (tables_[node]) return *tables_[node];
  }
  auto t = compute_table(node);  // outside the lock: other requests keep going
  std::lock_guard lock(mu_);
  if (!tables_[node]) tables_[node] = std::move(t);
  return *tables_[node];
}

void CompiledGrammar::precompute_all() const {
  for (std::uint32_t n = 0; n < grammar_.nodes.size(); ++n)
    if (grammar_.nodes[n].bytes_end > grammar_.nodes[n].bytes_begin) table(n);
}

// Walks the vocabulary trie from `node` alone. A token is accepted when a path inside
// the node's rule consumes all of it; it is uncertain when no path does but some path
// finished the rule (popped past the node) with bytes left over: the caller's rules
// decide. Finishing before any byte is not counted: the state's other frames, the
// callers', cover that case.
std::unique_ptr<NodeTokenTable> CompiledGrammar::compute_table(std::uint32_t node) const {
  KEEL_CHECK(vocab_ != nullptr);
  const auto &trie = vocab_->trie();
  const auto &toks = vocab_->trie_tokens();
  const std::size_t depth_cap = vocab_->max_token_len() + 2;
  FrameArena arena;
  std::vector<StateSet> states(depth_cap);
  std::vector<std::size_t> marks(depth_cap);
  std::vector<char> exited(depth_cap + 1, 0);  // exited[d]: the rule ended before byte d
  states[0] = pda_.at_node(arena, node);
  marks[0] = arena.size();
  std::vector<TokenId> accepted;
  auto out = std::make_unique<NodeTokenTable>();
  for (std::uint32_t i = 1; i < trie.size();) {
    const auto &t = trie[i];
    const std::size_t d = t.depth;
    arena.truncate(marks[d - 1]);
    StateSet &s = states[d];
    pda_.advance(arena, states[d - 1], t.byte, s);
    if (!s.empty()) {
      for (auto k = t.tokens_begin; k < t.tokens_end; ++k) accepted.push_back(toks[k]);
      exited[d + 1] = exited[d] || s.can_end;
      marks[d] = arena.size();
      if (!s.tops.empty()) {
        ++i;
        continue;
      }
      // The rule ended exactly here: longer tokens depend on the callers.
      for (auto j = i + 1; j < t.end; ++j)
        if (exited[d + 1] && trie[j].tokens_end > trie[j].tokens_begin) out->uncertain.push_back(j);
      i = t.end;
      continue;
    }
    if (exited[d])
      for (auto j = i; j < t.end; ++j)
        if (trie[j].tokens_end > trie[j].tokens_begin) out->uncertain.push_back(j);
    i = t.end;
  }
  const std::size_t words = (vocab_->size() + 31) / 32;
  if (accepted.size() * 32 < vocab_->size()) {
    std::sort(accepted.begin(), accepted.end());
    out->accepted_list = std::move(accepted);
  } else {
    out->accepted_bits.assign(words, 0);
    for (TokenId id : accepted) out->accepted_bits[id >> 5] |= 1u << (id & 31);
  }
  return out;
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
}

}  // namespace keel::grammar
