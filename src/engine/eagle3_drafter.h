// Drafting with an EAGLE-3 head (`--speculative eagle3:PATH`; exec/arch/eagle3_head.h has
// the math): a HiddenStateDrafter (hidden_state_drafter.h: the per-request state, drafting
// and chaining) whose head needs, at position t, the target's hidden states of its aux
// layers (Drafter::hidden_layers: the runner returns their concatenation) and x_{t+1}; a
// chained position takes the head's own output h' (before its norm) in place of fc(aux
// rows). The head runs on the target runner's device (ModelRunner::open_eagle3_head: the
// CPU runner's ExecContext, or the CUDA runner's context and stream), between the target's
// steps.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "engine/hidden_state_drafter.h"
#include "exec/eagle3_runner.h"
#include "exec/model_runner.h"

namespace keel {

class Eagle3Drafter final : public HiddenStateDrafter {
 public:
  // Opens the head at `path` beside `target` (ModelRunner::open_eagle3_head), which must
  // be a Llama-family model on a runner that can run one (MLA models are refused by name,
  // and so are runners that cannot, with their reason). Errors name `--speculative
  // eagle3:PATH` and the tensor or field at fault.
  static std::unique_ptr<Eagle3Drafter> open(const std::filesystem::path &path,
                                             ModelRunner &target);
  explicit Eagle3Drafter(std::unique_ptr<Eagle3Runner> head);

  const char *name() const override { return "eagle3"; }
  std::int64_t weights_bytes() const override { return head_->weights_bytes(); }
  // The head's KV caches, over every request it tracks.
  std::int64_t kv_bytes() const override { return cache_bytes(); }
  std::vector<std::int32_t> hidden_layers() const override { return head_->aux_layers(); }
  const Eagle3Runner &head() const { return *head_; }

 private:
  void run_head(MtpCache &cache, const MtpInput &in, MtpOutput &out) override {
    head_->forward(cache, in, out);
  }
  void truncate(MtpCache &cache, std::int32_t kept) override { head_->truncate(cache, kept); }

  std::unique_ptr<Eagle3Runner> head_;
};

}  // namespace keel
