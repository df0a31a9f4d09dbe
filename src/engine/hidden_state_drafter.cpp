#include "engine/hidden_state_drafter.h"

#include <algorithm>

#include "core/error.h"

namespace keel {

std::int32_t HiddenStateDrafter::pending_rows(RequestId id) const {
  auto it = state_.find(id);
  return it == state_.end() ? 0 : it->second.pending_rows;
}

std::int32_t HiddenStateDrafter::cached_positions(RequestId id) const {
  auto it = state_.find(id);
  return it == state_.end() ? 0 : it->second.cache.length;
}

std::int64_t HiddenStateDrafter::cache_bytes() const {
  std::int64_t bytes = 0;
  for (const auto &[id, s] : state_) {
    bytes += static_cast<std::int64_t>(s.cache.rows.capacity() * sizeof(float));
    if (s.cache.device) bytes += s.cache.device->bytes();
  }
  return bytes;
}

bool HiddenStateDrafter::run(State &s, const MtpInput &in) {
  try {
    run_head(s.cache, in, out_);
    return true;
  } catch (const Error &e) {
    if (e.code() != ErrorCode::kResourceExhausted) throw;
    s = State{};  // frees its cache for the others
    s.refused = true;
    return false;
  }
}

void HiddenStateDrafter::observe_hidden(RequestId id, std::span<const TokenId> tokens,
                                        std::int32_t start_pos, std::int32_t n,
                                        std::span<const float> rows) {
  if (static_cast<std::int64_t>(rows.size()) != static_cast<std::int64_t>(n) * row_width_) return;
  State &s = state_[id];
  if (s.refused) return;
  const std::int32_t base = s.cache.length;
  for (std::int32_t j = 0; j < n; ++j) {
    const std::int32_t at = start_pos + j - base;  // row index in `pending`
    if (at < 0) continue;        // consumed already (a preempted request computes it again)
    if (at >= s.pending_rows) {  // zero rows for positions never computed (see the header)
      s.pending_rows = at + 1;
      s.pending.resize(static_cast<std::size_t>(s.pending_rows * row_width_), 0.0f);
    }
    std::copy(rows.begin() + j * row_width_, rows.begin() + (j + 1) * row_width_,
              s.pending.begin() + at * row_width_);
  }
  // Positions whose next token is known: consumed now, so `pending` stays one step's.
  advance(s, tokens, static_cast<std::int32_t>(tokens.size()) - 1, false);
}

bool HiddenStateDrafter::advance(State &s, std::span<const TokenId> tokens, std::int32_t end,
                                 bool head) {
  const std::int32_t start = s.cache.length, rows = std::min(end - start, s.pending_rows);
  if (rows <= 0) return false;
  MtpInput in;
  in.start_pos = start;
  in.hidden = std::span<const float>(s.pending.data(), static_cast<std::size_t>(rows * row_width_));
  in.tokens = tokens.subspan(static_cast<std::size_t>(start + 1), static_cast<std::size_t>(rows));
  in.head = head ? MtpInput::Head::kLast : MtpInput::Head::kNone;
  if (!run(s, in)) return false;
  s.pending.erase(s.pending.begin(), s.pending.begin() + rows * row_width_);
  s.pending_rows -= rows;
  return true;
}

void HiddenStateDrafter::propose(RequestId id, std::span<const TokenId> tokens,
                                 std::int32_t max_tokens, std::vector<TokenId> &out) {
  auto it = state_.find(id);
  if (it == state_.end() || max_tokens <= 0) return;
  State &s = it->second;
  const auto n = static_cast<std::int32_t>(tokens.size());
  // Position n - 2 (the target's rows from the last step, x_{n-1} just sampled) must be the
  // last one left; its output head guesses x_n.
  if (s.cache.length + s.pending_rows < n - 1 || !advance(s, tokens, n - 1, true) ||
      s.cache.length != n - 1)
    return;
  // Rows past n - 2 were the target's over drafts it may have rejected: computed again.
  s.pending.clear();
  s.pending_rows = 0;
  const std::int32_t kept = s.cache.length;
  std::vector<float> h(out_.hidden.end() - out_width_, out_.hidden.end());
  TokenId guess = out_.argmax.back();
  out.push_back(guess);
  for (std::int32_t i = 1; i < max_tokens; ++i) {
    MtpInput chain;
    chain.start_pos = s.cache.length;
    chain.hidden = h;
    chain.chained = true;
    chain.tokens = std::span<const TokenId>(&guess, 1);
    if (!run(s, chain)) return;  // the drafts so far stand
    h.assign(out_.hidden.begin(), out_.hidden.end());
    guess = out_.argmax.back();
    out.push_back(guess);
  }
  truncate(s.cache, kept);  // chained positions fed on guesses: dropped
}

}  // namespace keel
