// The device-side KV block store as the cache tiers see it: kv/ owns this interface,
// each backend in exec/ implements it (the layering rule: kv never includes exec).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

namespace keel {

// The device-side KV block store. Blocks are addressed by index; what a block holds is
// decided by the engine's cache manager. A block's bytes are [layers][K|V][block_size]
// [kv_heads][head_dim] in the runner's KV dtype; save/load move them to and from host
// memory bit-exactly (the tier and SSD code treat them as opaque bytes).
class KvBlockStore {
 public:
  virtual ~KvBlockStore() = default;
  virtual std::int32_t num_blocks() const = 0;
  virtual std::int32_t block_size() const = 0;  // tokens per block
  virtual std::size_t block_bytes() const = 0;  // bytes of one block, all layers
  virtual void copy_block(std::int32_t src, std::int32_t dst) = 0;  // copy-on-write
  virtual void save_block(std::int32_t block, std::span<std::byte> host_out) = 0;
  virtual void load_block(std::int32_t block, std::span<const std::byte> host_in) = 0;

  // ---- batched, asynchronous moves for the cache tiers ----
  // A transfer moves whole blocks between the device and host memory laid out as
  // blocks.size() consecutive block images. It is ordered after every forward and copy
  // already issued, and every later forward and copy is ordered after it (on CUDA: a
  // copy stream and events; the host thread never waits). The host memory must stay
  // alive and untouched until transfer_done() says so. The defaults run synchronously.
  using TransferId = std::uint64_t;
  // host_out: [blocks.size()][block_bytes()]
  virtual TransferId begin_save(std::span<const std::int32_t> blocks,
                                std::span<std::byte> host_out) {
    for (std::size_t i = 0; i < blocks.size(); ++i)
      save_block(blocks[i], host_out.subspan(i * block_bytes(), block_bytes()));
    return 0;
  }
  // host_in: [blocks.size()][block_bytes()]
  virtual TransferId begin_load(std::span<const std::int32_t> blocks,
                                std::span<const std::byte> host_in) {
    for (std::size_t i = 0; i < blocks.size(); ++i)
      load_block(blocks[i], host_in.subspan(i * block_bytes(), block_bytes()));
    return 0;
  }
  // Non-blocking poll.
  virtual bool transfer_done(TransferId) { return true; }
  // Blocks until done (shutdown and tests only).
  virtual void wait_transfer(TransferId) {}
  // Host memory that transfers move fastest from and to (pinned on CUDA); zeroed.
  virtual std::shared_ptr<std::byte[]> allocate_host(std::size_t bytes) {
    std::shared_ptr<std::byte[]> p(new std::byte[bytes]);
    std::memset(p.get(), 0, bytes);
    return p;
  }
};

}  // namespace keel
