// The CPU paged KV cache. Blocks are [layers][K|V][block_size][kv_heads][head_dim]
// float32 (KvLayout::kSplit), or [layers][block_size][values] float32 for the latent
// layout (MLA: latent(), one plane, no V), exactly the bytes save_block/load_block move.
//
// Why float32 and not f16: the model tests hold logprobs to 1e-3 against a float32
// reference, and at the contexts a 2-core CPU serves, decode time is dominated by
// weight reads (a 1B model's f16 weights are 2.5 GB; its f32 KV is 32 KB a token), so
// halving KV bytes buys little there while costing accuracy.
#pragma once

#include <cstdint>
#include <memory>

#include "exec/exec_context.h"
#include "exec/model_runner.h"

namespace keel::cpu {

class CpuKvStore final : public KvBlockStore {
 public:
  CpuKvStore(std::int32_t num_blocks, std::int32_t block_size, std::int64_t layers,
             std::int64_t kv_heads, std::int64_t head_dim, const ExecContext *owner = nullptr);
  // The latent layout: one row of `values` floats per (layer, token).
  static std::unique_ptr<CpuKvStore> latent(std::int32_t num_blocks, std::int32_t block_size,
                                            std::int64_t layers, std::int64_t values,
                                            const ExecContext *owner = nullptr);
  ~CpuKvStore() override;
  CpuKvStore(const CpuKvStore &) = delete;
  CpuKvStore &operator=(const CpuKvStore &) = delete;

  std::int32_t num_blocks() const override { return num_blocks_; }
  std::int32_t block_size() const override { return block_size_; }
  std::size_t block_bytes() const override { return block_floats_ * sizeof(float); }
  void copy_block(std::int32_t src, std::int32_t dst) override;
  void save_block(std::int32_t block, std::span<std::byte> host_out) override;
  void load_block(std::int32_t block, std::span<const std::byte> host_in) override;

  // Row of head_dim * kv_heads floats for (block, layer, K or V, slot); the latent
  // layout has plane 0 only.
  float *row(std::int32_t block, std::int64_t layer, int kv, std::int32_t slot) {
    return data_ + block * block_floats_ +
           ((layer * planes_ + kv) * block_size_ + slot) * row_floats_;
  }
  const float *row(std::int32_t block, std::int64_t layer, int kv, std::int32_t slot) const {
    return data_ + block * block_floats_ +
           ((layer * planes_ + kv) * block_size_ + slot) * row_floats_;
  }
  std::int64_t row_floats() const { return row_floats_; }
  int planes() const { return planes_; }  // 2 (K, V) or 1 (latent)

 private:
  CpuKvStore(std::int32_t num_blocks, std::int32_t block_size, std::int64_t layers,
             std::int64_t row_floats, int planes, const ExecContext *owner);
  void check_block(std::int32_t b, const char *what) const;

  const ExecContext *owner_;  // checks the calling thread (every build); may be null
  std::int32_t num_blocks_, block_size_;
  std::int64_t row_floats_;   // kv_heads * head_dim, or the latent row's values
  int planes_;                // 2: K and V; 1: latent
  std::size_t block_floats_;  // layers * planes * block_size * row_floats
  float *data_ = nullptr;     // [num_blocks, block_floats], calloc'd: pages commit on first write
};

}  // namespace keel::cpu
