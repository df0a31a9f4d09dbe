// Blocked (flash-style) causal attention: a tile of query rows of one KV head's
// group walks the keys in blocks of kKeyBlock, computes the score tile as a small GEMM,
// keeps a running max and sum per row (online softmax) and accumulates P x V as a tile.
// Each K/V block is loaded once for all query heads of the group. Key blocks are aligned
// to absolute positions and rows never mix, so a row's result does not depend on the tile
// it sits in, the chunking of the prompt or the other sequences of the batch (within one
// instruction-set family; it differs from the per-token path by float rounding). Decode
// tokens take it too (tiles of one token), so that a prompt's logits do not depend on
// how it was chunked.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "exec/cpu/attention.h"
#include "exec/cpu/kv_store.h"
#include "exec/forward_batch.h"

namespace keel::cpu {

// Attention of the tokens of the sequences `seqs` (indices into batch.seqs), each with
// consecutive positions start_pos, start_pos + 1, ...
void blocked_attention(const float *q, float *out, const ForwardBatch &batch,
                       const std::vector<std::int32_t> &seqs, const CpuKvStore &kv,
                       std::int64_t layer, const AttentionShape &shape, ThreadPool &pool,
                       std::vector<std::vector<float>> &thread_scratch);

}  // namespace keel::cpu
