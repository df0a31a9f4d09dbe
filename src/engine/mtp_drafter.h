// Drafting with the checkpoint's own multi-token-prediction layer (`--speculative mtp`;
// exec/mtp_step.h has the math). Position t of the layer needs the target's hidden
// state h_t and the token x_{t+1}. Per request the drafter keeps the layer's cache over
// the positions it has consumed and the target's hidden rows of the few it has not yet:
// after each step it runs the layer (without its head) over every position whose next
// token is known, so what it holds stays one step's rows, whether or not it drafts.
// When asked to draft for a request of n tokens, the one position left, n - 2, runs with
// the head: its argmax guesses x_n. Further drafts chain: the layer's own output h' and
// its guess feed the next position (MtpInput::chained: the target's final norm, which the
// layer applies to the target's rows, is not applied to h'). Those chained positions never stay in
// the cache (their input is a guess, not the target's h), so nothing needs rolling back when the
// target rejects a draft. Positions served from the prefix cache bring no hidden state;
// zero rows stand in for them (approximate drafts, never wrong output: the target
// verifies every draft).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/speculative.h"
#include "exec/model_runner.h"

namespace keel {

class MtpDrafter final : public Drafter {
 public:
  // `runner` must have loaded its MTP layer (ModelRunner::load_mtp) and outlive this.
  explicit MtpDrafter(ModelRunner &runner);
  const char *name() const override { return "mtp"; }
  void propose(RequestId id, std::span<const TokenId> tokens, std::int32_t max_tokens,
               std::vector<TokenId> &out) override;
  void forget(RequestId id) override { state_.erase(id); }
  bool wants_hidden() const override { return true; }
  void observe_hidden(RequestId id, std::span<const TokenId> tokens, std::int32_t start_pos,
                      std::int32_t n, std::span<const float> rows) override;

  // Requests with state kept, and the hidden rows held for one (tests: bounded, freed).
  std::size_t num_tracked() const { return state_.size(); }
  std::int32_t pending_rows(RequestId id) const;

 private:
  struct State {
    MtpCache cache;  // positions [0, cache.length) consumed by the layer
    // The target's hidden rows of positions [cache.length, cache.length + pending_rows).
    std::vector<float> pending;
    std::int32_t pending_rows = 0;
  };
  // Runs the layer over the pending positions before `end` (their next tokens known),
  // the last of them through the head when `head`; false when there is none.
  bool advance(State &s, std::span<const TokenId> tokens, std::int32_t end, bool head);

  ModelRunner &runner_;
  std::int64_t hidden_;
  std::unordered_map<RequestId, State> state_;
  MtpOutput out_;
};

}  // namespace keel
