// Drafting with an EAGLE-3 head (`--speculative eagle3:PATH`; exec/arch/eagle3_head.h has
// the math): a HiddenStateDrafter (hidden_state_drafter.h: the per-request state, drafting
// and chaining) whose head needs, at position t, the target's hidden states of its aux
// layers (Drafter::hidden_layers: the runner returns their concatenation) and x_{t+1}; a
// chained position takes the head's own output h' (before its norm) in place of fc(aux
// rows). The head runs on the target's CPU context, between the target's steps.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "engine/hidden_state_drafter.h"
#include "exec/arch/eagle3_head.h"
#include "exec/model_runner.h"

namespace keel {

class Eagle3Drafter final : public HiddenStateDrafter {
 public:
  // Opens the head at `path` for `target`, which must be the CPU runner of a Llama-family
  // model (MLA models, the CUDA and tensor-parallel runners are refused by name), running
  // on `ctx`. Errors name `--speculative eagle3:PATH` and the tensor or field at fault.
  static std::unique_ptr<Eagle3Drafter> open(const std::filesystem::path &path, ModelRunner &target,
                                             ExecContext *ctx);
  Eagle3Drafter(std::unique_ptr<arch::Eagle3Head> head, ExecContext &ctx);

  const char *name() const override { return "eagle3"; }
  std::int64_t weights_bytes() const override { return head_->weights_bytes(); }
  // The head's KV caches, over every request it tracks.
  std::int64_t kv_bytes() const override { return cache_bytes(); }
  std::vector<std::int32_t> hidden_layers() const override { return head_->aux_layers(); }
  const arch::Eagle3Head &head() const { return *head_; }

 private:
  void run_head(MtpCache &cache, const MtpInput &in, MtpOutput &out) override {
    head_->forward(cache, in, out, ctx_);
  }
  void truncate(MtpCache &cache, std::int32_t kept) override {
    cache.length = kept;
    cache.rows.resize(static_cast<std::size_t>(kept * head_->cache_row_floats()));
  }

  std::unique_ptr<arch::Eagle3Head> head_;
  ExecContext &ctx_;
};

}  // namespace keel
