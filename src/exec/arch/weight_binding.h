// What every CPU model forward shares: binding a tensor by name with its shape checked,
// small vectors widened to float32, a forward batch checked against the cache, and the
// rows whose logits a batch asks for.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor_view.h"
#include "exec/forward_batch.h"

namespace keel::arch {

// Finds a tensor by its HF name ("model.layers.0.self_attn.q_proj.weight").
using WeightLookup = std::function<std::optional<TensorView>(const std::string &)>;

// The tensor `name` of exactly `shape`, its bytes covering shape and dtype; throws
// Error(kFormat) naming it otherwise.
TensorView need_tensor(const WeightLookup &lookup, const std::string &name,
                       std::vector<std::int64_t> shape);
// A tensor of any dtype as float32 values.
std::vector<float> tensor_f32(const TensorView &t);
// need_tensor(name, {n}) as float32.
std::vector<float> need_vector(const WeightLookup &lookup, const std::string &name, std::int64_t n);

// Throws Error(kInvalidArgument) naming what is wrong with `batch` for a cache of
// `num_blocks` blocks of `block_size` tokens and a vocabulary of `vocab` ids.
void check_forward_batch(const ForwardBatch &batch, std::int32_t num_blocks,
                         std::int32_t block_size, std::int64_t vocab);

// The flattened token rows whose logits the batch asks for, in order; fills
// out.row_seq / out.row_pos to match.
std::vector<std::int64_t> logit_rows(const ForwardBatch &batch, ForwardOutput &out);

}  // namespace keel::arch
