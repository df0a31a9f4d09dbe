// Drafting with a smaller model that shares the target's tokenizer (`--speculative
// draft:PATH`). The drafter owns the draft model's runner and that runner's KV cache,
// with its own block pool: it never takes blocks from the target's KV manager.
//
// Per request it remembers the tokens its KV holds. propose() keeps the longest prefix
// they share with the request's tokens (what the target rejected is truncated), runs the
// draft over the new tokens, then drafts greedily (argmax) one forward a token. Every
// draft but the last is fed back and stays in the KV, to be kept if accepted or
// truncated next time. A request whose blocks do not fit the pool gets no drafts (it
// never waits, and a failure is logged and ends only that request's drafting).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/speculative.h"
#include "exec/model_runner.h"
#include "kv/block_pool.h"

namespace keel {

class DraftModelDrafter final : public Drafter {
 public:
  // Opens the model at `path` beside `target`, on its device (ModelRunner::open_sibling:
  // the CPU runner's threads, the CUDA runner's context and stream; the engine thread
  // drafts between the target's steps), with a pool of `num_blocks` KV blocks of the
  // target's block size (0: the target runner's choice). Throws Error naming
  // `--speculative draft:PATH` when the path cannot be read, the target's runner cannot
  // host a second model (tensor-parallel), or the vocabularies differ in size.
  static std::unique_ptr<DraftModelDrafter> open(const std::filesystem::path &path,
                                                 ModelRunner &target, std::int32_t num_blocks);
  // `runner` is the draft model with a KV cache of its own; `weights_bytes` its files.
  DraftModelDrafter(std::unique_ptr<ModelRunner> runner, std::int64_t weights_bytes);

  const char *name() const override { return "draft"; }
  void propose(RequestId id, std::span<const TokenId> tokens, std::int32_t max_tokens,
               std::vector<TokenId> &out) override;
  void forget(RequestId id) override;
  std::int64_t weights_bytes() const override { return weights_bytes_; }
  std::int64_t kv_bytes() const override;

  // Tests: the requests with state, the tokens a request's KV holds, the pool.
  std::size_t num_tracked() const { return state_.size(); }
  std::vector<TokenId> held_tokens(RequestId id) const;
  const BlockPool &pool() const { return pool_; }

 private:
  struct State {
    std::vector<TokenId> tokens;  // positions [0, tokens.size()) computed in the KV
    std::vector<BlockId> blocks;  // covering them (and the positions about to be)
  };
  void draft(State &s, std::span<const TokenId> tokens, std::int32_t max_tokens,
             std::vector<TokenId> &out);
  // Keeps the first `n` blocks of `s`, releasing the rest.
  void shrink(State &s, std::size_t n);
  // Computes `tokens` at positions [start, start + size) in chunks; returns the argmax
  // of the last position's logits.
  TokenId run(const State &s, std::span<const TokenId> tokens, std::int32_t start);

  std::unique_ptr<ModelRunner> runner_;
  std::int64_t weights_bytes_;
  std::int32_t block_size_;
  BlockPool pool_;
  std::unordered_map<RequestId, State> state_;
  SamplingParams greedy_;
  ForwardBatch batch_;
  ForwardOutput out_;
};

}  // namespace keel
