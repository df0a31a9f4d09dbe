// The paged KV cache in device memory, as a KvBlockStore. Copy-on-write runs on the
// compute stream (ordered with forward passes); save and load run on the context's copy
// streams through pinned staging, ordered against the compute stream by events both ways,
// and every host wait is bounded.
#pragma once

#include <array>
#include <cstdint>

#include "exec/cuda/cuda_context.h"
#include "exec/cuda/kernels.h"
#include "exec/model_runner.h"

namespace keel::cuda {

class CudaKvStore : public KvBlockStore {
 public:
  CudaKvStore(CudaContext &ctx, const KvLayout &layout, std::int32_t num_blocks);

  std::int32_t num_blocks() const override { return num_blocks_; }
  std::int32_t block_size() const override { return layout_.block_size; }
  std::size_t block_bytes() const override {
    return static_cast<std::size_t>(layout_.block_elems()) * sizeof(bf16);
  }
  void copy_block(std::int32_t src, std::int32_t dst) override;
  void save_block(std::int32_t block, std::span<std::byte> host_out) override;
  void load_block(std::int32_t block, std::span<const std::byte> host_in) override;

  const KvLayout &layout() const { return layout_; }
  bf16 *data() const {
    return cache_.as<bf16>();
  }  // [num_blocks][layers][2][block_size][kv_heads][head_dim]

 private:
  void check_block(std::int32_t block, const char *what) const;
  std::byte *block_ptr(std::int32_t block) const;

  static constexpr int kLoadSlots = 4;  // loads in flight before one must land
  CudaContext &ctx_;
  KvLayout layout_;
  std::int32_t num_blocks_;
  DeviceBuffer cache_;
  PinnedBuffer save_staging_;  // [block_bytes]
  PinnedBuffer load_staging_;  // [kLoadSlots][block_bytes]
  Event compute_done_, saved_;
  std::array<Event, kLoadSlots> loaded_;
  std::array<bool, kLoadSlots> load_pending_{};
  int next_load_slot_ = 0;
};

}  // namespace keel::cuda
