#include "grammar/matcher.h"

#include "core/error.h"

namespace keel::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)) {
  state_ = grammar_->pda().start(arena_);
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (terminated_) return false;
  Saved saved{state_, arena_.size(), terminated_};
  StateSet cur = state_;
  for (char c : bytes) {
    grammar_->pda().advance(arena_, cur, std::uint8_t(c), next_);
    if (next_.empty()) {
      arena_.truncate(saved.arena_size);
      return false;
    }
    std::swap(cur, next_);
  }
  history_.push_back(std::move(saved));
  state_ = std::move(cur);
  return true;
}

bool GrammarMatcher::accept_token(TokenId id) {
  const TokenVocab *vocab = grammar_->vocab();
  KEEL_CHECK(vocab != nullptr);
  if (terminated_ || id < 0 || std::size_t(id) >= vocab->size()) return false;
  if (vocab->is_eos(id)) {
    if (!state_.can_end) return false;
    history_.push_back({state_, arena_.size(), terminated_});
    terminated_ = true;
    return true;
  }
  const std::string &b = vocab->bytes(id);
  if (b.empty()) return false;  // special tokens never belong to a document
  return accept_bytes(b);
}

void GrammarMatcher::rollback(std::size_t steps) {
  if (steps == 0 || history_.empty()) return;
  steps = std::min(steps, history_.size());
  Saved &s = history_[history_.size() - steps];
  state_ = std::move(s.state);
  arena_.truncate(s.arena_size);
  terminated_ = s.terminated;
  history_.resize(history_.size() - steps);
}

void GrammarMatcher::fill_next_token_bitmask(TokenBitmask &mask) {
  if (terminated_) {
    if (grammar_->vocab() && mask.vocab_size() != grammar_->vocab()->size())
      mask = TokenBitmask(grammar_->vocab()->size());
    mask.clear();
    return;
  }
  grammar_->fill_mask(arena_, state_, mask);
}

}  // namespace keel::grammar
