#include "exec/cpu/kv_store.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"

namespace keel::cpu {

CpuKvStore::CpuKvStore(std::int32_t num_blocks, std::int32_t block_size, std::int64_t layers,
                       std::int64_t kv_heads, std::int64_t head_dim, const ExecContext *owner)
    : CpuKvStore(num_blocks, block_size, layers, kv_heads * head_dim, 2, owner) {}

std::unique_ptr<CpuKvStore> CpuKvStore::latent(std::int32_t num_blocks, std::int32_t block_size,
                                               std::int64_t layers, std::int64_t values,
                                               const ExecContext *owner) {
  return std::unique_ptr<CpuKvStore>(
      new CpuKvStore(num_blocks, block_size, layers, values, 1, owner));
}

CpuKvStore::CpuKvStore(std::int32_t num_blocks, std::int32_t block_size, std::int64_t layers,
                       std::int64_t row_floats, int planes, const ExecContext *owner)
    : owner_(owner),
      num_blocks_(num_blocks),
      block_size_(block_size),
      row_floats_(row_floats),
      planes_(planes) {
  if (num_blocks <= 0 || block_size <= 0 || layers <= 0 || row_floats_ <= 0)
    throw Error(ErrorCode::kInvalidArgument, "kv cache: sizes must be positive");
  block_floats_ = static_cast<std::size_t>(layers * planes * block_size * row_floats_);
  data_ = static_cast<float *>(
      std::calloc(static_cast<std::size_t>(num_blocks) * block_floats_, sizeof(float)));
  if (!data_)
    throw Error(ErrorCode::kResourceExhausted, "kv cache: cannot allocate " +
                                                   std::to_string(num_blocks) + " blocks of " +
                                                   std::to_string(block_bytes()) + " bytes");
}

CpuKvStore::~CpuKvStore() { std::free(data_); }

void CpuKvStore::check_block(std::int32_t b, const char *what) const {
  if (b < 0 || b >= num_blocks_)
    throw Error(ErrorCode::kInvalidArgument,
                std::string("kv cache: ") + what + " block " + std::to_string(b) + " out of range");
}

void CpuKvStore::copy_block(std::int32_t src, std::int32_t dst) {
  if (owner_) owner_->check_owner("kv copy_block");
  check_block(src, "copy source");
  check_block(dst, "copy destination");
  if (src == dst) return;
  std::memcpy(data_ + dst * block_floats_, data_ + src * block_floats_, block_bytes());
}

void CpuKvStore::save_block(std::int32_t block, std::span<std::byte> host_out) {
  if (owner_) owner_->check_owner("kv save_block");
  check_block(block, "save");
  if (host_out.size() != block_bytes())
    throw Error(ErrorCode::kInvalidArgument, "kv cache: save buffer size");
  std::memcpy(host_out.data(), data_ + block * block_floats_, block_bytes());
}

void CpuKvStore::load_block(std::int32_t block, std::span<const std::byte> host_in) {
  if (owner_) owner_->check_owner("kv load_block");
  check_block(block, "load");
  if (host_in.size() != block_bytes())
    throw Error(ErrorCode::kInvalidArgument, "kv cache: load buffer size");
  std::memcpy(data_ + block * block_floats_, host_in.data(), block_bytes());
}

}  // namespace keel::cpu
