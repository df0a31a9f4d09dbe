#include "exec/cuda/cuda_kv_store.h"

#include <cstring>
#include <string>

#include "exec/cuda/cuda_check.h"

namespace keel::cuda {

CudaKvStore::CudaKvStore(CudaContext &ctx, const KvLayout &layout, std::int32_t num_blocks)
    : ctx_(ctx),
      layout_(layout),
      num_blocks_(num_blocks),
      cache_(static_cast<std::size_t>(num_blocks) * layout.block_elems() * sizeof(bf16)),
      save_staging_(layout.block_elems() * sizeof(bf16)),
      load_staging_(kLoadSlots * layout.block_elems() * sizeof(bf16)) {
  if (num_blocks <= 0)
    throw Error(ErrorCode::kInvalidArgument, "kv store: num_blocks must be positive");
}

void CudaKvStore::check_block(std::int32_t block, const char *what) const {
  if (block < 0 || block >= num_blocks_)
    throw Error(ErrorCode::kInvalidArgument, std::string("kv store: ") + what + ": block " +
                                                 std::to_string(block) + " out of range [0, " +
                                                 std::to_string(num_blocks_) + ")");
}

std::byte *CudaKvStore::block_ptr(std::int32_t block) const {
  return cache_.as<std::byte>() + static_cast<std::size_t>(block) * block_bytes();
}

void CudaKvStore::copy_block(std::int32_t src, std::int32_t dst) {
  ctx_.check_owner("CudaKvStore::copy_block");
  check_block(src, "copy_block src");
  check_block(dst, "copy_block dst");
  if (src == dst) return;
  KEEL_CUDA_CHECK(cudaMemcpyAsync(block_ptr(dst), block_ptr(src), block_bytes(),
                                  cudaMemcpyDeviceToDevice, ctx_.compute()));
}

void CudaKvStore::save_block(std::int32_t block, std::span<std::byte> host_out) {
  ctx_.check_owner("CudaKvStore::save_block");
  check_block(block, "save_block");
  if (host_out.size() != block_bytes())
    throw Error(ErrorCode::kInvalidArgument,
                "kv store: save_block: host buffer has " + std::to_string(host_out.size()) +
                    " bytes, block has " + std::to_string(block_bytes()));
  // The snapshot must see every write the compute stream enqueued before it.
  compute_done_.record(ctx_.compute());
  compute_done_.make_wait(ctx_.copy_d2h());
  KEEL_CUDA_CHECK(cudaMemcpyAsync(save_staging_.data(), block_ptr(block), block_bytes(),
                                  cudaMemcpyDeviceToHost, ctx_.copy_d2h()));
  saved_.record(ctx_.copy_d2h());
  saved_.wait(ctx_.wait_timeout(), "kv store: save_block");
  std::memcpy(host_out.data(), save_staging_.data(), block_bytes());
}

void CudaKvStore::load_block(std::int32_t block, std::span<const std::byte> host_in) {
  ctx_.check_owner("CudaKvStore::load_block");
  check_block(block, "load_block");
  if (host_in.size() != block_bytes())
    throw Error(ErrorCode::kInvalidArgument,
                "kv store: load_block: host buffer has " + std::to_string(host_in.size()) +
                    " bytes, block has " + std::to_string(block_bytes()));
  const int slot = next_load_slot_;
  next_load_slot_ = (next_load_slot_ + 1) % kLoadSlots;
  // The staging slot is reused only after its previous copy has landed.
  if (load_pending_[slot]) loaded_[slot].wait(ctx_.wait_timeout(), "kv store: load_block staging");
  std::byte *staging =
      load_staging_.as<std::byte>() + static_cast<std::size_t>(slot) * block_bytes();
  std::memcpy(staging, host_in.data(), block_bytes());
  // Earlier compute work may still read the block's old contents: the copy waits for it,
  // and later compute work waits for the copy.
  compute_done_.record(ctx_.compute());
  compute_done_.make_wait(ctx_.copy_h2d());
  KEEL_CUDA_CHECK(cudaMemcpyAsync(block_ptr(block), staging, block_bytes(), cudaMemcpyHostToDevice,
                                  ctx_.copy_h2d()));
  loaded_[slot].record(ctx_.copy_h2d());
  loaded_[slot].make_wait(ctx_.compute());
  load_pending_[slot] = true;
}

}  // namespace keel::cuda
