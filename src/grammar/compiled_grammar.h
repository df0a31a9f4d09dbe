// A grammar ready for decoding against one vocabulary. For every grammar node it
// lazily precomputes which tokens are accepted whatever lies below the node on the
// stack (context-independent), and which depend on it (the token's bytes run past
// the end of the node's rule): those few are checked at mask time against the real
// stacks. Shared by every request with the same constraint; thread-safe.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/pda.h"
#include "grammar/token_bitmask.h"
#include "grammar/token_vocab.h"

namespace keel::grammar {

// What one grammar node admits, whatever its context.
struct NodeTokenTable {
  std::vector<std::uint32_t> accepted_bits;  // a bitmask over the vocabulary, or empty
  std::vector<TokenId> accepted_list;        // when few tokens are accepted
  std::vector<std::uint32_t> uncertain;      // trie nodes (sorted) to check on the fly
};

class CompiledGrammar {
 public:
  // `vocab` may be null: the grammar then matches bytes only (no token masks). With a
  // vocabulary, what it cannot write is trimmed (grammar/dead_ends.h): throws
  // Error(kInvalidArgument) when the document could then never be completed.
  CompiledGrammar(Grammar g, std::shared_ptr<const TokenVocab> vocab);
  CompiledGrammar(const CompiledGrammar &) = delete;
  CompiledGrammar &operator=(const CompiledGrammar &) = delete;

  const Grammar &grammar() const { return grammar_; }
  const Pda &pda() const { return pda_; }
  const TokenVocab *vocab() const { return vocab_.get(); }
  const std::shared_ptr<const TokenVocab> &vocab_ptr() const { return vocab_; }

  // The node's table, computed on first use.
  const NodeTokenTable &table(std::uint32_t node) const;
  // Computes every node's table now (to move the cost out of the first requests);
  // returns early once *stop is set.
  void precompute_all(const std::atomic<bool> *stop = nullptr) const;
  // How many nodes have their table (for tests and status).
  std::size_t num_tables() const;

  // The mask for `state` (whose frames live in `arena`; frames pushed here are
  // truncated again before returning). EOS ids are allowed only when can_end.
  void fill_mask(FrameArena &arena, const StateSet &state, TokenBitmask &mask) const;

 private:
  std::unique_ptr<NodeTokenTable> compute_table(std::uint32_t node) const;

  Grammar grammar_;
  Pda pda_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::vector<char> call_free_;  // per node: no call reachable (tables via a lazy DFA)
  // Masks of states whose tokens needed checking on the fly, by the states' stacks.
  struct KeyHash {
    std::size_t operator()(const std::vector<std::uint32_t> &k) const {
      std::size_t h = 1469598103934665603ull;
      for (auto x : k) h = (h ^ x) * 1099511628211ull;
      return h;
    }
  };
  static constexpr std::size_t kMaskCacheEntries = 128;  // 128 x vocab/8 bytes at most

  // The shape of what can follow a call-free node (its reachable byte automaton,
  // numbered breadth first), empty past a size cap: nodes of one shape (every string
  // body, whitespace, number of a schema) share one table.
  std::vector<std::uint32_t> shape(std::uint32_t node) const;

  mutable std::mutex mu_;
  mutable std::vector<std::shared_ptr<const NodeTokenTable>> tables_;
  mutable std::map<std::vector<std::uint32_t>, std::shared_ptr<const NodeTokenTable>> by_shape_;
  mutable std::unordered_map<std::vector<std::uint32_t>, std::vector<std::uint32_t>, KeyHash>
      mask_cache_;
};

}  // namespace keel::grammar
