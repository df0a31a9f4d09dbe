// Drafting with an EAGLE-3 head (`--speculative eagle3:PATH`; exec/arch/eagle3_head.h has
// the math). Position t of the head needs the target's hidden states of the head's aux
// layers at t (Drafter::hidden_layers: the runner returns their concatenation) and the
// token x_{t+1}. As MtpDrafter does for an MTP layer, per request the drafter keeps the
// head's KV cache over the positions it has consumed and the target's aux rows of the few
// it has not yet: after each step it runs the head (without its lm_head) over every
// position whose next token is known, so what it holds stays one step's rows. A draft runs
// the last position through the lm_head; further drafts chain: the head's own output h'
// (before its norm) replaces fc(aux rows) at the next position, with the guess as its
// token. Chained positions never stay in the cache (their input is a guess), so a rejected
// draft needs no rollback. Positions served from the prefix cache bring no hidden rows;
// zero rows stand in (weaker drafts, never wrong output: the target verifies them).
// The head runs on the target's CPU context, between the target's steps.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/speculative.h"
#include "exec/arch/eagle3_head.h"
#include "exec/model_runner.h"

namespace keel {

class Eagle3Drafter final : public Drafter {
 public:
  // Opens the head at `path` for `target`, which must be the CPU runner of a Llama-family
  // model (MLA models, the CUDA and tensor-parallel runners are refused by name), running
  // on `ctx`. Errors name `--speculative eagle3:PATH` and the tensor or field at fault.
  static std::unique_ptr<Eagle3Drafter> open(const std::filesystem::path &path, ModelRunner &target,
                                             ExecContext *ctx);
  Eagle3Drafter(std::unique_ptr<arch::Eagle3Head> head, ExecContext &ctx);

  const char *name() const override { return "eagle3"; }
  void propose(RequestId id, std::span<const TokenId> tokens, std::int32_t max_tokens,
               std::vector<TokenId> &out) override;
  void forget(RequestId id) override { state_.erase(id); }
  std::int64_t weights_bytes() const override { return head_->weights_bytes(); }
  // The head's KV caches, over every request it tracks.
  std::int64_t kv_bytes() const override;
  bool wants_hidden() const override { return true; }
  std::vector<std::int32_t> hidden_layers() const override { return head_->aux_layers(); }
  void observe_hidden(RequestId id, std::span<const TokenId> tokens, std::int32_t start_pos,
                      std::int32_t n, std::span<const float> rows) override;

  // Tests: requests with state kept, the aux rows held for one, its cached positions.
  std::size_t num_tracked() const { return state_.size(); }
  std::int32_t pending_rows(RequestId id) const;
  std::int32_t cached_positions(RequestId id) const;
  const arch::Eagle3Head &head() const { return *head_; }

 private:
  struct State {
    MtpCache cache;  // positions [0, cache.length) consumed by the head
    // The target's aux rows of positions [cache.length, cache.length + pending_rows).
    std::vector<float> pending;
    std::int32_t pending_rows = 0;
  };
  // Runs the head over the pending positions before `end` (their next tokens known), the
  // last of them through the lm_head when `head`; false when there is none.
  bool advance(State &s, std::span<const TokenId> tokens, std::int32_t end, bool head);

  std::unique_ptr<arch::Eagle3Head> head_;
  ExecContext &ctx_;
  std::int64_t width_;  // aux row width
  std::unordered_map<RequestId, State> state_;
  MtpOutput out_;
};

}  // namespace keel
