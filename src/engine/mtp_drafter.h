// Drafting with the checkpoint's own multi-token-prediction layer (`--speculative mtp`;
// exec/mtp_step.h has the math). Per request it keeps the target's hidden states of the
// positions the MTP layer has not consumed yet, and the layer's cache over the positions
// it has: position t needs h_t and the token x_{t+1}, so when the request holds n
// tokens the layer can run up to position n - 2 (the last token's hidden state comes
// with the next step), and that row's argmax guesses x_n. Further drafts chain: the
// layer's own output h' and its guess feed the next position. Those chained positions
// never stay in the cache (their input is a guess, not the target's h), so only
// positions whose inputs the target confirmed are kept, and nothing needs rolling back
// when the target rejects a draft. Positions served from the prefix cache bring no
// hidden state; zero rows stand in for them (approximate drafts, never wrong output).
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
  void observe_hidden(RequestId id, std::int32_t start_pos, std::int32_t n,
                      std::span<const float> rows) override;

  // Requests with state kept (tests: forget frees).
  std::size_t num_tracked() const { return state_.size(); }

 private:
  struct State {
    MtpCache cache;  // positions [0, cache.length) consumed by the layer
    // The target's hidden rows of positions [cache.length, cache.length + pending rows).
    std::vector<float> pending;
    std::int32_t pending_rows = 0;
  };
  ModelRunner &runner_;
  std::int64_t hidden_;
  std::unordered_map<RequestId, State> state_;
  MtpOutput out_;
};

}  // namespace keel
