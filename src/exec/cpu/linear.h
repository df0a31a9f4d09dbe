// The linear layer y = x W^T for every weight dtype, for decode (one token) and
// prefill (many) alike.
//
// Batch invariance: y[t, n] is always computed by the same sequence of operations (one
// 8- or 16-lane accumulator chain over K, then a fixed horizontal sum), whatever T is and
// however the work is tiled over threads, so a token's logits do not depend on the
// other tokens in its batch. Register tiles (several tokens x several weight rows)
// only share loads between such chains.
//
// Q8_0, Q4_0, MXFP4 and K-quant (Q4_K, Q5_K, Q6_K: kquant_rows.h) weights multiply 8-bit
// quantized activations with integer dot products (as llama.cpp does); F32/F16/BF16 weights
// multiply float32 activations; FP8 rows are dequantized to float32 tiles first.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor_view.h"
#include "core/thread_pool.h"
#include "exec/cpu/quant_blocks.h"

namespace keel::cpu {

// The instruction-set family of the tile kernels (exec/cpu/linear_tiles.h), chosen at run
// time so that a portable build uses the SIMD kernels too. Results are batch-invariant
// within a family; families round differently.
enum class LinearIsa { kPortable, kAvx2, kAvx512 };
LinearIsa best_linear_isa();  // the best family this CPU runs
const char *linear_isa_name(LinearIsa isa);

// Reusable buffers, so that steady-state decode allocates nothing.
struct LinearScratch {
  LinearIsa isa = best_linear_isa();             // tests lower it to check every family
  std::vector<BlockQ8Act> xq;                    // [T, K / 32]
  std::vector<std::vector<float>> tiles;         // per thread: [rows of a tile, K]
  std::vector<std::vector<float>> argmax_tiles;  // per thread: [T, rows of a tile]
};

bool uses_q8_activations(DType w);

// w: [N, K] (any weight dtype; K a multiple of its block size); x: [T, K]; y: [T, N].
void linear(const TensorView &w, const float *x, std::int64_t T, float *y, ThreadPool &pool,
            LinearScratch &scratch);

// Several weights that read the same input (q/k/v, gate/up), computed in one parallel
// region; results are bit-identical to separate linear() calls.
struct LinearJob {
  const TensorView *w;  // [N_j, K], K shared by all jobs
  float *y;             // [T, N_j]
};
void linear_multi(std::span<const LinearJob> jobs, const float *x, std::int64_t T, ThreadPool &pool,
                  LinearScratch &scratch);

// Greedy rows without their logits: ids[t] = the first n with the largest y[t, n] of
// linear(w, x, T) (the same values; NaN never wins; 0 when every value is NaN, as
// cpu::first_argmax), found tile by tile so that the [T, N] result is never stored.
void linear_argmax(const TensorView &w, const float *x, std::int64_t T, std::int32_t *ids,
                   ThreadPool &pool, LinearScratch &scratch);

// Scalar reference: dequantized weights (and, where linear() uses them, the same
// quantized activations) with double accumulation.
void linear_reference(const TensorView &w, const float *x, std::int64_t T, float *y);

}  // namespace keel::cpu
