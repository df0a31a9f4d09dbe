// The cache tiers below the device blocks: host RAM (HostTier) and SSD (SsdStore), and
// the moves between them and the device (KvBlockStore's batched transfers).
//
//   offload: a cached device block about to be reused ──begin_save──▶ host slot
//            ──(save done)──▶ ready in RAM ──write-behind (worker)──▶ SSD file
//   restore: host slot ─────────────────────────────┐
//            SSD file ──read+verify (worker)──▶ host slot ──begin_load──▶ device blocks
//
// Ordering: a save is issued in the step that reuses its block, before that step's
// copies and forward (KvBlockStore orders it before them). Loads are issued only by
// poll() at the start of a later engine pass, and never into a block whose save is
// still in flight, so a load can never overtake a save of the same block.
//
// Engine thread only (the SSD store's workers report through jobs, polled here, and
// call `wake` so an idle engine loop looks again). Nothing here waits on the device
// except flush() and the destructor, which are meant to block.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/fault_injector.h"
#include "core/ids.h"
#include "kv/block_store.h"
#include "kv/block_pool.h"
#include "kv/host_tier.h"
#include "kv/ssd_store.h"
#include "kv/tier_index.h"

namespace keel {

struct KvTierConfig {
  std::int64_t host_bytes = 0;            // host-RAM tier; 0: none (but see min_host_blocks)
  std::filesystem::path ssd_dir;          // SSD tier root; empty: none
  std::int64_t ssd_bytes = 0;             // SSD tier cap
  int io_threads = 4;                     // SSD workers
  std::int32_t max_pending_writes = 256;  // SSD write-behind queue bound (blocks)
  // Host RAM that an SSD tier may use for staging beyond host_bytes (pinned on CUDA).
  std::int64_t max_staging_bytes = std::int64_t{1} << 30;
  bool enabled() const { return host_bytes > 0 || (!ssd_dir.empty() && ssd_bytes > 0); }
};

struct TierStats {
  std::int64_t capacity_bytes = 0, used_bytes = 0, blocks = 0;
  std::int64_t hit_blocks = 0, stored_blocks = 0, errors = 0, pending = 0;
  std::int64_t dropped = 0;  // offloads or writes refused for lack of room
};

class KvTiers final : public TierIndex {
 public:
  // With an SSD tier, the host tier holds at least `min_host_blocks` (the staging room
  // for SSD reads and writes of one longest request), capped by max_staging_bytes.
  KvTiers(const KvTierConfig &config, KvBlockStore &store, const ModelFingerprint &model,
          FaultInjector *faults, std::function<void()> wake, std::int32_t min_host_blocks);
  // Waits for transfers in flight (their host memory must outlive them), then stops
  // the SSD workers; queued writes that have not started are dropped.
  ~KvTiers() override;
  KvTiers(const KvTiers &) = delete;
  KvTiers &operator=(const KvTiers &) = delete;

  bool contains(const BlockHash &hash) const override;

  // Saves the blocks this step's allocations are about to reuse, unless a lower tier
  // already has them; one transfer per run of consecutive host slots.
  void offload(std::span<const EvictedBlock> evicted);
  // Starts restoring `hashes` into device `blocks` (same length) for a request in
  // LOADING_CACHE. The result comes from a later poll(): ok with the number of leading
  // blocks restored (fewer than asked when host slots ran short), or failed.
  void start_restore(RequestId id, std::span<const BlockId> blocks,
                     std::span<const BlockHash> hashes);
  // The request is gone: its restore ends without a result (transfers still drain).
  void cancel_restore(RequestId id);

  struct RestoreDone {
    RequestId id;
    bool ok = false;
    std::int32_t from_host = 0, from_ssd = 0;  // blocks
    double seconds = 0.0;                      // start_restore to landed on the device
  };
  // Advances every move; returns the restores that finished.
  std::vector<RestoreDone> poll();
  bool restoring() const { return !restores_.empty(); }
  bool busy() const { return !saves_.empty() || !writes_.empty() || !restores_.empty(); }
  // The SSD write-behind queue is full: the engine slows admission until it drains.
  bool write_backlogged() const {
    return ssd_ != nullptr &&
           static_cast<std::int64_t>(writes_.size()) >= std::max(config_.max_pending_writes, 1);
  }

  // Blocking: moves `blocks` (cached device blocks) into host and SSD, and waits until
  // the SSD writes landed or the deadline passed. For shutdown and cache demotion.
  void flush(std::span<const EvictedBlock> blocks, std::chrono::steady_clock::time_point deadline);
  void clear();       // every tier (SSD files of this model and layout removed)
  void clear_host();  // host RAM only

  TierStats host_stats() const;
  TierStats ssd_stats() const;
  SsdStore *ssd() { return ssd_.get(); }
  HostTier &host() { return *host_; }

 private:
  struct Save {
    KvBlockStore::TransferId id = 0;
    std::vector<std::int32_t> blocks, slots;
  };
  struct Write {
    std::int32_t slot = 0;
    std::shared_ptr<const SsdJob> job;
  };
  struct Restore {
    RequestId id;
    std::vector<std::int32_t> blocks, slots;
    std::vector<std::shared_ptr<const SsdJob>> reads;  // [blocks], null: in RAM already
    std::vector<KvBlockStore::TransferId> transfers;
    bool loading = false, cancelled = false, failed = false;
    std::int32_t from_host = 0, from_ssd = 0;
    std::chrono::steady_clock::time_point started;
  };
  // Restore step; true when it is finished (ok or not).
  bool advance(Restore &r, std::vector<RestoreDone> &done);
  void finish_saves(bool wait);
  void finish_writes();

  KvTierConfig config_;
  KvBlockStore &store_;
  std::size_t block_bytes_;
  std::unique_ptr<HostTier> host_;  // before ssd_: the SSD workers read host slots
  std::unique_ptr<SsdStore> ssd_;
  std::vector<Save> saves_;
  std::vector<Write> writes_;
  std::vector<Restore> restores_;
  std::int64_t host_stored_ = 0, host_hits_ = 0, ssd_hits_ = 0, dropped_ = 0;
};

}  // namespace keel
