#include "core/thinking_budget.h"

#include <algorithm>

namespace keel {

namespace {
// The model may write a little before opening its block (a newline, a BOS echo): the
// start tokens are looked for among this many tokens beyond their own length.
constexpr std::size_t kOpenSlack = 4;
}  // namespace

ThinkingBudget::ThinkingBudget(const SamplingParams &s)
    : budget_(s.thinking_budget),
      start_(s.thinking_start),
      end_(s.thinking_end),
      state_(!wanted(s)        ? State::kDone
             : s.thinking_open ? State::kThinking
                               : State::kBefore) {
  if (state_ == State::kBefore && start_.empty()) state_ = State::kDone;
}

TokenId ThinkingBudget::choose(TokenId sampled) {
  if (state_ == State::kThinking && thought_ >= budget_) {
    state_ = State::kClosing;
    closing_ = 0;
  }
  TokenId t = sampled;
  if (state_ == State::kClosing) {
    t = end_[closing_++];
    if (t != sampled) ++forced_;
  }
  observe(t);
  return t;
}

bool ThinkingBudget::ends_with(const std::vector<TokenId> &tail) const {
  return !tail.empty() && out_.size() >= tail.size() &&
         std::equal(tail.begin(), tail.end(),
                    out_.end() - static_cast<std::ptrdiff_t>(tail.size()));
}

void ThinkingBudget::observe(TokenId t) {
  switch (state_) {
    case State::kBefore:
      out_.push_back(t);
      if (ends_with(start_)) {
        state_ = State::kThinking;
        out_.clear();
      } else if (out_.size() >= start_.size() + kOpenSlack) {
        state_ = State::kDone;  // no think block: nothing to bound
        out_.clear();
      }
      break;
    case State::kThinking:
      ++thought_;
      out_.push_back(t);
      if (ends_with(end_)) {
        state_ = State::kDone;  // the model closed it itself
        out_.clear();
      } else if (out_.size() > 2 * end_.size() + 64) {
        out_.erase(out_.begin(), out_.end() - static_cast<std::ptrdiff_t>(end_.size()));
      }
      break;
    case State::kClosing:
      if (closing_ == end_.size()) state_ = State::kDone;
      break;
    case State::kDone:
      break;
  }
}

}  // namespace keel
