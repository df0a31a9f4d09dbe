// The part every drafter fed with the target's hidden states shares (MtpDrafter: an MTP
// layer; Eagle3Drafter: an EAGLE-3 head): position t of its head needs the target's row(s)
// at t and the token x_{t+1}. Per request it keeps the head's own cache over the positions
// consumed and the target's rows of the few not yet: after each step the head runs
// (without its output head) over every position whose next token is known, so what is held
// stays one step's rows. A draft runs the one position left, n - 2, through the output
// head: its argmax guesses x_n. Further drafts chain: the head's own output h' and its
// guess feed the next position (MtpInput::chained). Chained positions never stay in the
// cache (their input is a guess), so a rejected draft needs no rollback. Positions served
// from the prefix cache bring no rows; zero rows stand in for them (weaker drafts, never
// wrong output: the target verifies every draft). A head whose cache cannot grow (a device
// head's pool is full: Error(kResourceExhausted)) leaves that request without drafts
// until it ends, as a draft model does one whose blocks its pool cannot hold.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/speculative.h"
#include "exec/mtp_step.h"

namespace keel {

class HiddenStateDrafter : public Drafter {
 public:
  void propose(RequestId id, std::span<const TokenId> tokens, std::int32_t max_tokens,
               std::vector<TokenId> &out) override;
  void forget(RequestId id) override { state_.erase(id); }
  bool wants_hidden() const override { return true; }
  void observe_hidden(RequestId id, std::span<const TokenId> tokens, std::int32_t start_pos,
                      std::int32_t n, std::span<const float> rows) override;

  // Tests: requests with state kept, the target rows held for one, its cached positions.
  std::size_t num_tracked() const { return state_.size(); }
  std::int32_t pending_rows(RequestId id) const;
  std::int32_t cached_positions(RequestId id) const;

 protected:
  // row_width: floats of one observed target row; out_width: floats of the head's own
  // output h' (what a chained position is fed).
  HiddenStateDrafter(std::int64_t row_width, std::int64_t out_width)
      : row_width_(row_width), out_width_(out_width) {}
  // One forward of the head over `in` with `cache`; Error(kResourceExhausted), thrown before
  // it changes anything, when the cache cannot hold the positions.
  virtual void run_head(MtpCache &cache, const MtpInput &in, MtpOutput &out) = 0;
  // After chained drafts: forget the positions from `kept` on.
  virtual void truncate(MtpCache &cache, std::int32_t kept) { cache.length = kept; }
  // Bytes of every request's head cache.
  std::int64_t cache_bytes() const;

 private:
  struct State {
    MtpCache cache;  // positions [0, cache.length) consumed by the head
    // The target's rows of positions [cache.length, cache.length + pending_rows).
    std::vector<float> pending;
    std::int32_t pending_rows = 0;
    bool refused = false;  // the head's cache could not grow: no more drafts for it
  };
  // run_head; false (the state dropped, `refused` set) when the cache could not grow.
  bool run(State &s, const MtpInput &in);
  // Runs the head over the pending positions before `end` (their next tokens known), the
  // last of them through its output head when `head`; false when there is none.
  bool advance(State &s, std::span<const TokenId> tokens, std::int32_t end, bool head);

  std::int64_t row_width_, out_width_;
  std::unordered_map<RequestId, State> state_;
  MtpOutput out_;
};

}  // namespace keel
