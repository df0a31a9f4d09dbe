#include "engine/mtp_drafter.h"

#include <algorithm>

namespace keel {

MtpDrafter::MtpDrafter(ModelRunner &runner)
    : runner_(runner), hidden_(runner.config().hidden_size) {}

void MtpDrafter::observe_hidden(RequestId id, std::int32_t start_pos, std::int32_t n,
                                std::span<const float> rows) {
  State &s = state_[id];
  const std::int32_t base = s.cache.length;
  for (std::int32_t j = 0; j < n; ++j) {
    const std::int32_t at = start_pos + j - base;  // row index in `pending`
    if (at < 0) continue;  // consumed already (a preempted request computes it again)
    // Positions the target never computed (a prefix-cache hit) have no hidden state:
    // zero rows stand in, so the layer's context there is approximate. Drafts stay
    // proposals the target verifies, so output is unchanged; only acceptance may drop.
    if (at >= s.pending_rows) {
      s.pending_rows = at + 1;
      s.pending.resize(static_cast<std::size_t>(s.pending_rows * hidden_), 0.0f);
    }
    std::copy(rows.begin() + j * hidden_, rows.begin() + (j + 1) * hidden_,
              s.pending.begin() + at * hidden_);
  }
}

void MtpDrafter::propose(RequestId id, std::span<const TokenId> tokens, std::int32_t max_tokens,
                         std::vector<TokenId> &out) {
  auto it = state_.find(id);
  if (it == state_.end() || max_tokens <= 0) return;
  State &s = it->second;
  const auto n = static_cast<std::int32_t>(tokens.size());
  // Positions [cache.length, n - 1) have their h_t (computed by the target) and x_{t+1}.
  const std::int32_t start = s.cache.length, rows = n - 1 - start;
  if (rows <= 0 || s.pending_rows < rows) return;
  MtpInput in;
  in.start_pos = start;
  in.hidden = std::span<const float>(s.pending.data(), static_cast<std::size_t>(rows * hidden_));
  in.tokens = tokens.subspan(static_cast<std::size_t>(start + 1), static_cast<std::size_t>(rows));
  runner_.mtp_forward(s.cache, in, out_);
  // Rows past n - 2 were the target's over drafts it may have rejected: computed again.
  s.pending.clear();
  s.pending_rows = 0;
  const std::int32_t kept = s.cache.length;
  std::vector<float> h(out_.hidden.end() - hidden_, out_.hidden.end());
  TokenId guess = out_.argmax.back();
  out.push_back(guess);
  for (std::int32_t i = 1; i < max_tokens; ++i) {
    MtpInput chain;
    chain.start_pos = s.cache.length;
    chain.hidden = h;
    chain.tokens = std::span<const TokenId>(&guess, 1);
    runner_.mtp_forward(s.cache, chain, out_);
    h.assign(out_.hidden.begin(), out_.hidden.end());
    guess = out_.argmax.back();
    out.push_back(guess);
  }
  s.cache.length = kept;  // chained positions fed on guesses: dropped
}

}  // namespace keel
