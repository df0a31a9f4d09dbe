// A thinking budget: closes a model's think block after N tokens of thinking. The
// engine passes every sampled token through choose(); once the block has been open for
// `budget` tokens, it writes the end-of-thinking tokens in place of what was sampled,
// and the model, reading its own closed block, goes on with the answer. The block is
// open from the start when the prompt opened it (a template ending in "<think>\n"), or
// from when the model writes the start tokens among its first few tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "core/ids.h"
#include "core/sampling_params.h"

namespace keel {

class ThinkingBudget {
 public:
  // From s.thinking_budget (< 0: no budget), s.thinking_start / s.thinking_end (token
  // ids) and s.thinking_open (the prompt opened the block).
  explicit ThinkingBudget(const SamplingParams &s);

  // True when the request has a budget to enforce.
  static bool wanted(const SamplingParams &s) {
    return s.thinking_budget >= 0 && !s.thinking_end.empty();
  }

  // The token to emit for this step: `sampled`, or the next end-of-thinking token when
  // the budget is spent (then the emitted token, not the sampled one, is what counts).
  TokenId choose(TokenId sampled);
  // Tokens written in place of sampled ones so far.
  std::int32_t forced() const { return forced_; }

 private:
  enum class State : std::uint8_t { kBefore, kThinking, kClosing, kDone };
  void observe(TokenId t);
  bool ends_with(const std::vector<TokenId> &tail) const;

  std::int32_t budget_;
  std::vector<TokenId> start_, end_;
  State state_;
  std::vector<TokenId> out_;  // emitted tokens (only while they matter)
  std::int32_t thought_ = 0;  // tokens inside the block
  std::int32_t forced_ = 0;
  std::size_t closing_ = 0;  // end tokens written so far while closing
};

}  // namespace keel
