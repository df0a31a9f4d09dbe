#include "exec/cuda/cuda_kv_store.h"

#include <algorithm>
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
                                  cudaMemcpyDeviceToDevice, ctx_.compute().get("cudaMemcpyAsync")));
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
                                  cudaMemcpyDeviceToHost, ctx_.copy_d2h().get("cudaMemcpyAsync")));
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
                                  ctx_.copy_h2d().get("cudaMemcpyAsync")));
  loaded_[slot].record(ctx_.copy_h2d());
  loaded_[slot].make_wait(ctx_.compute());
  load_pending_[slot] = true;
}

// ---- batched asynchronous transfers ----

namespace {

// True when [p, p + n) lies in page-locked memory the device can DMA from directly.
bool is_pinned(const void *p, std::size_t n) {
  auto pinned = [](const void *q) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, q) != cudaSuccess) {
      cudaGetLastError();  // pageable memory can report an error on old drivers
      return false;
    }
    return a.type == cudaMemoryTypeHost;
  };
  return n > 0 && pinned(p) && pinned(static_cast<const std::byte *>(p) + (n - 1));
}

}  // namespace

void CudaKvStore::check_transfer(std::span<const std::int32_t> blocks, std::size_t host_bytes,
                                 const char *what) const {
  for (const std::int32_t b : blocks) check_block(b, what);
  if (host_bytes / block_bytes() != blocks.size() || host_bytes % block_bytes() != 0)
    throw Error(ErrorCode::kInvalidArgument,
                std::string("kv store: ") + what + ": host buffer has " +
                    std::to_string(host_bytes) + " bytes, " + std::to_string(blocks.size()) +
                    " blocks need " + std::to_string(blocks.size() * block_bytes()));
}

void CudaKvStore::issue_copies(std::span<const std::int32_t> blocks, std::byte *host, bool to_host,
                               StreamRef stream_ref) {
  const cudaStream_t stream = stream_ref.get("CudaKvStore::issue_copies");
  const std::size_t bb = block_bytes();
  const cudaMemcpyKind kind = to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
  batch_dst_.clear();
  batch_src_.clear();
  batch_size_.clear();
  // Runs of consecutive block ids are contiguous on both sides: one copy each.
  for (std::size_t i = 0; i < blocks.size();) {
    std::size_t j = i + 1;
    while (j < blocks.size() && blocks[j] == blocks[j - 1] + 1) ++j;
    std::byte *dev = block_ptr(blocks[i]);
    std::byte *hst = host + i * bb;
    const std::size_t bytes = (j - i) * bb;
    if (copy_method_ == CopyMethod::kPerRun) {
      KEEL_CUDA_CHECK(cudaMemcpyAsync(to_host ? static_cast<void *>(hst) : dev,
                                      to_host ? static_cast<void *>(dev) : hst, bytes, kind,
                                      stream));
    } else {
      batch_dst_.push_back(to_host ? static_cast<void *>(hst) : dev);
      batch_src_.push_back(to_host ? static_cast<const void *>(dev) : hst);
      batch_size_.push_back(bytes);
    }
    i = j;
  }
  if (copy_method_ == CopyMethod::kBatch && !batch_dst_.empty()) {
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    std::size_t attr_idx = 0;
    KEEL_CUDA_CHECK(cudaMemcpyBatchAsync(batch_dst_.data(), batch_src_.data(), batch_size_.data(),
                                         batch_dst_.size(), &attr, &attr_idx, 1, stream));
  }
}

KvBlockStore::TransferId CudaKvStore::finish_transfer(StreamRef stream) {
  Transfer t;
  t.id = next_id_++;
  if (!spare_events_.empty()) {
    t.done = std::move(spare_events_.back());
    spare_events_.pop_back();
  }
  t.done.record(stream);
  // Every later forward (and, through the compute stream, every later transfer) waits.
  t.done.make_wait(ctx_.compute());
  in_flight_.push_back(std::move(t));
  return in_flight_.back().id;
}

KvBlockStore::TransferId CudaKvStore::begin_save(std::span<const std::int32_t> blocks,
                                                 std::span<std::byte> host_out) {
  ctx_.check_owner("CudaKvStore::begin_save");
  check_transfer(blocks, host_out.size(), "begin_save");
  reap();
  if (blocks.empty()) return 0;
  if (!is_pinned(host_out.data(), host_out.size()))
    return KvBlockStore::begin_save(blocks, host_out);  // synchronous, block by block
  compute_done_.record(ctx_.compute());
  compute_done_.make_wait(ctx_.copy_d2h());
  issue_copies(blocks, host_out.data(), /*to_host=*/true, ctx_.copy_d2h());
  return finish_transfer(ctx_.copy_d2h());
}

KvBlockStore::TransferId CudaKvStore::begin_load(std::span<const std::int32_t> blocks,
                                                 std::span<const std::byte> host_in) {
  ctx_.check_owner("CudaKvStore::begin_load");
  check_transfer(blocks, host_in.size(), "begin_load");
  reap();
  if (blocks.empty()) return 0;
  if (!is_pinned(host_in.data(), host_in.size())) return KvBlockStore::begin_load(blocks, host_in);
  // Earlier forwards may still read the blocks' old contents.
  compute_done_.record(ctx_.compute());
  compute_done_.make_wait(ctx_.copy_h2d());
  issue_copies(blocks, const_cast<std::byte *>(host_in.data()), /*to_host=*/false, ctx_.copy_h2d());
  return finish_transfer(ctx_.copy_h2d());
}

void CudaKvStore::reap() {
  // Transfers on the two copy streams finish out of order: check each.
  auto it = std::remove_if(in_flight_.begin(), in_flight_.end(), [&](Transfer &t) {
    if (!t.done.done()) return false;
    spare_events_.push_back(std::move(t.done));
    return true;
  });
  in_flight_.erase(it, in_flight_.end());
}

bool CudaKvStore::transfer_done(TransferId id) {
  ctx_.check_owner("CudaKvStore::transfer_done");
  for (std::size_t i = 0; i < in_flight_.size(); ++i) {
    if (in_flight_[i].id != id) continue;
    if (!in_flight_[i].done.done()) return false;
    spare_events_.push_back(std::move(in_flight_[i].done));
    in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(i));
    return true;
  }
  return true;  // id 0 (synchronous), already retired, or never issued
}

void CudaKvStore::wait_transfer(TransferId id) {
  ctx_.check_owner("CudaKvStore::wait_transfer");
  for (const Transfer &t : in_flight_)
    if (t.id == id) t.done.wait(ctx_.wait_timeout(), "kv store: wait_transfer");
  transfer_done(id);
}

std::shared_ptr<std::byte[]> CudaKvStore::allocate_host(std::size_t bytes) {
  ctx_.activate();
  void *p = nullptr;
  // Portable: pinned for every context (two engines, two devices); mapped: a kernel may
  // read it directly.
  KEEL_CUDA_CHECK(cudaHostAlloc(&p, std::max<std::size_t>(bytes, 1),
                                cudaHostAllocPortable | cudaHostAllocMapped));
  std::memset(p, 0, bytes);
  return std::shared_ptr<std::byte[]>(static_cast<std::byte *>(p),
                                      [](std::byte *q) { cudaFreeHost(q); });
}

}  // namespace keel::cuda
