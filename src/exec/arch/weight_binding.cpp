#include "exec/arch/weight_binding.h"

#include "core/error.h"
#include "exec/cpu/fp8_row.h"
#include "exec/cpu/quant_blocks.h"

namespace keel::arch {

TensorView need_tensor(const WeightLookup &lookup, const std::string &name,
                       std::vector<std::int64_t> shape) {
  auto t = lookup(name);
  if (!t) throw Error(ErrorCode::kFormat, name + ": tensor missing");
  if (t->shape != shape) {
    std::string want, got;
    for (auto d : shape) want += std::to_string(d) + ",";
    for (auto d : t->shape) got += std::to_string(d) + ",";
    throw Error(ErrorCode::kFormat,
                name + ": shape [" + got + "] where [" + want + "] was expected");
  }
  if (static_cast<std::int64_t>(t->nbytes) < dtype_bytes(t->dtype, t->numel()) ||
      (t->cols() % dtype_info(t->dtype).block_elems) != 0)
    throw Error(ErrorCode::kFormat, name + ": data size does not match shape and dtype");
  return *t;
}

std::vector<float> tensor_f32(const TensorView &t) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  if (t.dtype == DType::kF8_E4M3 && t.scale.present()) {  // row by row, with its scales
    const std::int64_t rows = t.shape.size() == 1 ? 1 : t.shape[0], cols = t.numel() / rows;
    for (std::int64_t r = 0; r < rows; ++r)
      cpu::fp8_row_to_f32(reinterpret_cast<const std::uint8_t *>(t.data) + r * cols,
                          v.data() + r * cols, cols, t.scale.row(r), t.scale.block_cols, false);
    return v;
  }
  cpu::dequantize_row(t.dtype, t.data, v.data(), t.numel());
  return v;
}

std::vector<float> need_vector(const WeightLookup &lookup, const std::string &name,
                               std::int64_t n) {
  return tensor_f32(need_tensor(lookup, name, {n}));
}

void check_forward_batch(const ForwardBatch &batch, std::int32_t num_blocks,
                         std::int32_t block_size, std::int64_t vocab) {
  auto bad = [](const std::string &why) {
    throw Error(ErrorCode::kInvalidArgument, "forward batch: " + why);
  };
  const std::int64_t T = batch.total_tokens();
  std::int64_t covered = 0;
  std::vector<char> seen(static_cast<std::size_t>(T), 0);
  for (std::size_t i = 0; i < batch.seqs.size(); ++i) {
    const SequenceSlice &s = batch.seqs[i];
    if (s.num_tokens <= 0 || s.token_offset < 0 || s.start_pos < 0 || s.num_blocks < 0 ||
        s.block_offset < 0)
      bad("sequence " + std::to_string(i) + " has negative or empty fields");
    if (static_cast<std::int64_t>(s.token_offset) + s.num_tokens > T)
      bad("sequence tokens out of range");
    if (static_cast<std::int64_t>(s.block_offset) + s.num_blocks >
        static_cast<std::int64_t>(batch.block_table.size()))
      bad("sequence blocks out of the block table");
    const std::int64_t end = static_cast<std::int64_t>(s.start_pos) + s.num_tokens;
    if (end > static_cast<std::int64_t>(s.num_blocks) * block_size)
      bad("sequence " + std::to_string(i) + " needs more blocks");
    for (std::int32_t b = 0; b < s.num_blocks; ++b) {
      const std::int32_t id = batch.block_table[s.block_offset + b];
      if (id < 0 || id >= num_blocks) bad("block id " + std::to_string(id) + " out of range");
    }
    for (std::int32_t j = 0; j < s.num_tokens; ++j)
      if (seen[s.token_offset + j]++) bad("sequences overlap");
    covered += s.num_tokens;
  }
  if (covered != T) bad("sequences do not cover the tokens exactly once");
  for (TokenId t : batch.tokens)
    if (t < 0 || t >= vocab) bad("token id " + std::to_string(t) + " out of the vocabulary");
}

std::vector<std::int64_t> logit_rows(const ForwardBatch &batch, ForwardOutput &out) {
  out.row_seq.clear();
  out.row_pos.clear();
  std::vector<std::int64_t> rows;
  for (std::size_t i = 0; i < batch.seqs.size(); ++i) {
    const auto &s = batch.seqs[i];
    if (s.logits == SequenceSlice::Logits::kTail &&
        (s.num_logits < 1 || s.num_logits > s.num_tokens))
      throw Error(ErrorCode::kInvalidArgument, "forward: num_logits outside the slice");
    const std::int32_t first = s.first_logits_token();
    for (std::int32_t j = first; j < s.num_tokens; ++j) {
      rows.push_back(s.token_offset + j);
      out.row_seq.push_back(static_cast<std::int32_t>(i));
      out.row_pos.push_back(s.start_pos + j);
    }
  }
  return rows;
}

}  // namespace keel::arch
