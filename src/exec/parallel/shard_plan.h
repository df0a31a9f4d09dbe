// How one rank of a tensor-parallel group splits a Llama-family model (Megatron style):
//
//   q/k/v, gate/up   column-parallel: rank r keeps a contiguous block of output rows
//                    (its heads, its slice of the intermediate size); zero-copy views.
//   o, down          row-parallel: rank r keeps the matching block of input columns
//                    (a copy: a column block of a row-major matrix is strided), and
//                    the partial outputs are summed with one all-reduce each.
//   embedding        replicated (each rank looks up its tokens' rows).
//   lm_head          vocab-parallel: rank r computes its block of every logits row
//                    (ceil(vocab / size) rows of lm_head, the last block shorter), and
//                    an all-reduce of the zero-padded rows (exact: x + 0 == x) gives
//                    every rank the whole rows; rank 0 samples. (On a large vocabulary
//                    the head is a large share of the weights read per token: 0.5 GB of
//                    a Llama 3 8B's 16 GB; replicating it would cap the speed-up.)
//   norms, q/k norms replicated; q/k/v biases sliced with their rows.
//
// KV heads are sharded with the query heads that use them, so rank r's KV cache holds
// kv_heads / size heads: num_kv_heads % size == 0 is required (and so is
// num_heads % size, intermediate_size % size).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor_view.h"
#include "formats/model_config.h"

namespace keel::parallel {

struct ShardPlan {
  int rank = 0, size = 1;
  std::int64_t heads = 0;         // this rank's query heads
  std::int64_t kv_heads = 0;      // this rank's KV heads
  std::int64_t intermediate = 0;  // this rank's slice of the MLP
  std::int64_t head_dim = 0;
  std::int64_t vocab_begin = 0, vocab_count = 0;  // this rank's rows of lm_head
  // First row (column-parallel) or column (row-parallel) of this rank's block.
  std::int64_t q_begin() const { return rank * heads * head_dim; }
  std::int64_t kv_begin() const { return rank * kv_heads * head_dim; }
  std::int64_t ffn_begin() const { return rank * intermediate; }
};

// Throws Error(kUnsupported) naming the dimension that does not divide by `size`.
ShardPlan make_shard_plan(const ModelConfig &cfg, int rank, int size);

// Rows [begin, begin + count) of a 2-D weight: a view into the same memory.
TensorView slice_rows(const TensorView &w, std::int64_t begin, std::int64_t count);

// Columns [begin, begin + count) of a 2-D weight, copied into `storage` (resized; the
// view points into it, so it must outlive the view). Block-quantized dtypes need begin
// and count on block boundaries: Error(kUnsupported) otherwise.
TensorView slice_cols(const TensorView &w, std::int64_t begin, std::int64_t count,
                      std::string &storage);

}  // namespace keel::parallel
