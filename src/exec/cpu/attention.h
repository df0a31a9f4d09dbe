// Causal attention of a ragged batch over the paged KV cache (GQA/MQA/MHA, optional
// sliding window), by the blocked path (attention_blocked.h) or, as a reference, each
// (token, head) alone; either way with a fixed order of operations per (token, head), so
// results do not depend on the batch.
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
  // gpt-oss's attention sinks: [heads] logits that join each head's softmax denominator
  // (exp(sink - max) added to the sum) with no value row; null when the model has none.
  const float *sinks = nullptr;
  // true: the blocked path (attention_blocked.h) for every token; false: each (token,
  // head) alone, the path the blocked one is measured against.
  bool blocked = true;
};

// Chunks of at least this many tokens are tiled several tokens at a time.
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
