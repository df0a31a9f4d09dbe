#include "exec/parallel/shard_plan.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace keel::parallel {

ShardPlan make_shard_plan(const ModelConfig &cfg, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error(ErrorCode::kInvalidArgument,
                "tensor parallel: rank " + std::to_string(rank) + " of " + std::to_string(size));
  auto need_divisible = [&](std::int64_t n, const char *what) {
    if (n <= 0 || n % size != 0)
      throw Error(ErrorCode::kUnsupported,
                  std::string("tensor parallel: ") + what + " = " + std::to_string(n) +
                      " is not divisible by --tensor-parallel " + std::to_string(size));
  };
  need_divisible(cfg.num_kv_heads, "num_key_value_heads");
  need_divisible(cfg.num_heads, "num_attention_heads");
  need_divisible(cfg.intermediate_size, "intermediate_size");
  ShardPlan p;
  p.rank = rank;
  p.size = size;
  p.heads = cfg.num_heads / size;
  p.kv_heads = cfg.num_kv_heads / size;
  p.intermediate = cfg.intermediate_size / size;
  p.head_dim = cfg.head_dim;
  const std::int64_t per = (cfg.vocab_size + size - 1) / size;
  p.vocab_begin = std::min<std::int64_t>(cfg.vocab_size, rank * per);
  p.vocab_count = std::min<std::int64_t>(cfg.vocab_size, p.vocab_begin + per) - p.vocab_begin;
  return p;
}

namespace {
void refuse_fp8(const TensorView &w) {
  if (w.dtype == DType::kF8_E4M3)
    throw Error(ErrorCode::kUnsupported,
                w.name + ": fp8 weights are not sharded for tensor parallelism yet");
}
}  // namespace

TensorView slice_rows(const TensorView &w, std::int64_t begin, std::int64_t count) {
  KEEL_CHECK(w.shape.size() == 2 && begin >= 0 && count >= 0 && begin + count <= w.shape[0]);
  refuse_fp8(w);
  const std::int64_t row_bytes = dtype_bytes(w.dtype, w.shape[1]);
  TensorView v = w;
  v.shape = {count, w.shape[1]};
  v.data = w.data + begin * row_bytes;
  v.nbytes = static_cast<std::size_t>(count * row_bytes);
  return v;
}

TensorView slice_cols(const TensorView &w, std::int64_t begin, std::int64_t count,
                      std::string &storage) {
  KEEL_CHECK(w.shape.size() == 2 && begin >= 0 && count >= 0 && begin + count <= w.shape[1]);
  refuse_fp8(w);
  const std::int64_t block = dtype_info(w.dtype).block_elems;
  if (begin % block != 0 || count % block != 0)
    throw Error(ErrorCode::kUnsupported, w.name + ": columns [" + std::to_string(begin) + ", " +
                                             std::to_string(begin + count) + ") of a " +
                                             std::string(dtype_name(w.dtype)) +
                                             " weight do not fall on its " + std::to_string(block) +
                                             "-element blocks; use fewer tensor-parallel ranks");
  const std::int64_t rows = w.shape[0];
  const std::int64_t src_row = dtype_bytes(w.dtype, w.shape[1]);
  const std::int64_t dst_row = dtype_bytes(w.dtype, count);
  const std::int64_t offset = dtype_bytes(w.dtype, begin);
  // 64 bytes of slack so the view can start 64-byte aligned, as mapped tensors usually do.
  storage.assign(static_cast<std::size_t>(rows * dst_row + 64), '\0');
  const auto addr = reinterpret_cast<std::uintptr_t>(storage.data());
  std::byte *dst = reinterpret_cast<std::byte *>(storage.data()) + (64 - addr % 64) % 64;
  for (std::int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * dst_row, w.data + r * src_row + offset,
                static_cast<std::size_t>(dst_row));
  TensorView v = w;
  v.shape = {rows, count};
  v.data = dst;
  v.nbytes = static_cast<std::size_t>(rows * dst_row);
  return v;
}

}  // namespace keel::parallel
