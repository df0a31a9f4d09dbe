// Drafting with the checkpoint's own multi-token-prediction layer (`--speculative mtp`;
// exec/mtp_step.h has the math): a HiddenStateDrafter (hidden_state_drafter.h: the
// per-request state, drafting and chaining) whose head is the runner's MTP layer, fed the
// target's final hidden state h_t (MtpInput::chained: the target's final norm, which the
// layer applies to the target's rows, is not applied to its own h').
#pragma once

#include <cstdint>
#include <memory>

#include "engine/hidden_state_drafter.h"
#include "exec/model_runner.h"

namespace keel {

class MtpDrafter final : public HiddenStateDrafter {
 public:
  // Loads `runner`'s MTP layer (ModelRunner::load_mtp: on the CPU runner, or on the CUDA
  // runner's device), its errors prefixed with `--speculative mtp` and the model's
  // architecture; logs the device memory it holds, if any.
  static std::unique_ptr<MtpDrafter> open(ModelRunner &runner);
  // `runner` must have loaded its MTP layer (ModelRunner::load_mtp) and outlive this.
  explicit MtpDrafter(ModelRunner &runner);
  const char *name() const override { return "mtp"; }
  std::int64_t weights_bytes() const override { return runner_.mtp_weights_bytes(); }
  // The layer's caches over every request it tracks (a device layer's blocks).
  std::int64_t kv_bytes() const override { return cache_bytes(); }

 private:
  void run_head(MtpCache &cache, const MtpInput &in, MtpOutput &out) override {
    runner_.mtp_forward(cache, in, out);
  }

  ModelRunner &runner_;
};

}  // namespace keel
