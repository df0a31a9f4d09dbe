// Causal attention of a ragged batch over the paged KV cache (GQA/MQA/MHA, optional
// sliding window). Each (token, head) is computed alone with a fixed order of
// operations, so results do not depend on the batch. Long prefill chunks go to the
// blocked path instead (attention_blocked.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "exec/cpu/kv_store.h"
#include "exec/forward_batch.h"

namespace keel::cpu {

struct AttentionShape {
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 0;          // usually 1 / sqrt(head_dim)
  std::int64_t window = 0;  // 0: none; else a token at p sees positions > p - window
  // Prefill chunks of at least kBlockedMinTokens tokens take the blocked path
  // (attention_blocked.h); false keeps every token on the per-token path (the reference
  // the blocked path is measured against).
  bool blocked_prefill = true;
};

inline constexpr std::int32_t kBlockedMinTokens = 16;

// q: [T, heads, head_dim]; out: [T, heads, head_dim]; token_seq / token_pos: [T].
// The batch's K/V for `layer` must already be in the cache.
void paged_attention(const float *q, float *out, const ForwardBatch &batch,
                     const std::int32_t *token_seq, const std::int32_t *token_pos,
                     const CpuKvStore &kv, std::int64_t layer, const AttentionShape &shape,
                     ThreadPool &pool, std::vector<std::vector<float>> &thread_scores);

// Reference over plain contiguous K/V of one sequence: k, v: [len, kv_heads, head_dim];
// q, out: [n, heads, head_dim] for positions len - n .. len - 1.
void attention_reference(const float *q, const float *k, const float *v, float *out, std::int64_t n,
                         std::int64_t len, const AttentionShape &shape);

}  // namespace keel::cpu
