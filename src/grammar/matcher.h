// One request's position in its grammar: accepts bytes or tokens, says whether the
// document is complete, fills the next step's token mask, and rolls back.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "grammar/compiled_grammar.h"

namespace keel::grammar {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Accepts all of `bytes` or none (returns false and keeps the state).
  bool accept_bytes(std::string_view bytes);
  // Accepts a token of the grammar's vocabulary: an EOS id only when the document is
  // complete (the matcher is then terminated), another only when its bytes fit.
  bool accept_token(TokenId id);
  // Undoes the last `steps` successful accept_* calls (clamped to what there is).
  void rollback(std::size_t steps);
  std::size_t history_size() const { return history_.size(); }

  // The document may end here (EOS would be accepted).
  bool is_complete() const { return !terminated_ && state_.can_end; }
  // Some further byte is accepted.
  bool can_continue() const { return !terminated_ && !state_.tops.empty(); }
  bool is_terminated() const { return terminated_; }

  // The tokens allowed next; nothing when terminated.
  void fill_next_token_bitmask(TokenBitmask &mask);

  const CompiledGrammar &compiled() const { return *grammar_; }

 private:
  struct Saved {
    StateSet state;
    std::size_t arena_size;
    bool terminated;
  };

  std::shared_ptr<const CompiledGrammar> grammar_;
  FrameArena arena_;
  StateSet state_, next_;
  bool terminated_ = false;
  std::vector<Saved> history_;
};

}  // namespace keel::grammar
