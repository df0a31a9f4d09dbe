// What one engine step computes: plain data, made by the scheduler, read by the engine
// to build the forward batch. No tensors, no streams.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/ids.h"
#include "kv/kv_cache_manager.h"

namespace keel {

struct ScheduledSeq {
  RequestId id;
  std::int32_t start_pos = 0;   // tokens already in the KV cache
  std::int32_t num_tokens = 0;  // tokens to compute now: a prefill chunk, or 1 to decode
                                // (1 + draft.size() when it carries drafts)
  // The chunk reaches the last known token, so the step yields a next token to sample.
  bool samples = false;
  std::optional<BlockCopy> copy;  // copy-on-write to run before the forward
  // Speculative decoding: drafted tokens computed after the last known one (positions
  // start_pos + 1 ...); the engine verifies them against the step's logits rows and
  // accepts a prefix (Scheduler::append_token with kv_computed, then settle_drafts).
  std::vector<TokenId> draft;
};

// A request admitted into LOADING_CACHE in this step: `hashes` are to be restored from
// the tiers below the device into `blocks` (fresh, the request's own, same length).
struct TierLoad {
  RequestId id;
  std::vector<BlockId> blocks;
  std::vector<BlockHash> hashes;
};

struct StepPlan {
  std::uint64_t step = 0;
  std::vector<ScheduledSeq> seqs;    // running requests' next tokens first, then prefills
  std::vector<RequestId> preempted;  // lost their blocks in this step's scheduling
  std::vector<TierLoad> loads;       // restores to start (requests now LOADING_CACHE)
  std::int32_t total_tokens = 0;
  bool empty() const { return seqs.empty(); }
};

}  // namespace keel
