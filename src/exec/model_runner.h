// A loaded model on one backend together with its paged KV cache. Every method runs on
// the engine thread that owns the ExecContext it was made with (checked in debug
// builds); nothing here is thread-safe by design, since exactly one thread drives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

#include "core/error.h"
#include "core/sampling_params.h"
#include "exec/forward_batch.h"
#include "formats/model_config.h"

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

// One logits row to sample where the logits are (ModelRunner::forward_sample): the
// request's parameters; u = uniform_real_distribution<double>(0, 1) drawn from the
// request's RNG exactly where Sampler::sample would draw it (Sampler::draw_uniform;
// unused when greedy); the request's tokens so far (for the penalties).
struct DeviceSampleRow {
  const SamplingParams *params = nullptr;
  double u = 0;
  std::span<const TokenId> prompt, generated;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const ModelConfig &config() const = 0;
  virtual KvBlockStore &kv() = 0;
  // Computes the batch, writes its new K/V into the blocks its block tables name, and
  // fills `out` with the requested logits rows.
  virtual void forward(const ForwardBatch &batch, ForwardOutput &out) = 0;

  // Runners that sample on their device (no logits cross to the host) say so here.
  virtual bool samples_on_device() const { return false; }
  // forward(), then every requested logits row i sampled with rows[i] (the Sampler's
  // semantics, bit-for-bit its choice given the same u): fills out.row_seq, row_pos,
  // sampled and sampled_logprobs, leaves out.logits empty. Top-N alternatives are not
  // computed: steps that need them use forward() and the host Sampler.
  virtual void forward_sample(const ForwardBatch &, std::span<const DeviceSampleRow>,
                              ForwardOutput &) {
    throw Error(ErrorCode::kUnsupported, "model runner: no device sampling");
  }
};

}  // namespace keel
