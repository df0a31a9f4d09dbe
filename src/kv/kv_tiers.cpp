#include "kv/kv_tiers.h"

#include <algorithm>
#include <thread>
#include <unordered_set>

#include "core/error.h"

namespace keel {

KvTiers::KvTiers(const KvTierConfig &config, KvBlockStore &store, const ModelFingerprint &model,
                 FaultInjector *faults, std::function<void()> wake, std::int32_t min_host_blocks)
    : config_(config), store_(store), block_bytes_(store.block_bytes()) {
  const bool with_ssd = !config.ssd_dir.empty() && config.ssd_bytes > 0;
  std::int64_t host_bytes = std::max<std::int64_t>(config.host_bytes, 0);
  // SSD reads and writes pass through host slots: at least one longest request's worth,
  // but at most config.max_staging_bytes (a longer restore is restored in part).
  const std::int32_t staging = static_cast<std::int32_t>(std::clamp<std::int64_t>(
      std::min<std::int64_t>(min_host_blocks,
                             config.max_staging_bytes / static_cast<std::int64_t>(block_bytes_)),
      1, std::int64_t{1} << 30));
  if (with_ssd)
    host_bytes =
        std::max<std::int64_t>(host_bytes, static_cast<std::int64_t>(staging) * block_bytes_);
  host_ = std::make_unique<HostTier>(host_bytes, block_bytes_,
                                     [&store](std::size_t n) { return store.allocate_host(n); });
  if (with_ssd) {
    SsdStoreConfig sc;
    sc.root = config.ssd_dir;
    sc.capacity_bytes = config.ssd_bytes;
    sc.layout = BlockFileLayout::of(model, store.block_size(), block_bytes_);
    sc.io_threads = config.io_threads;
    sc.max_pending_writes = std::max(config.max_pending_writes, 1);
    sc.faults = faults;
    sc.on_complete = std::move(wake);
    ssd_ = std::make_unique<SsdStore>(std::move(sc));
    host_->reserve(staging);
  }
}

KvTiers::~KvTiers() {
  try {
    for (const Save &s : saves_) store_.wait_transfer(s.id);
    for (const Restore &r : restores_)
      for (auto t : r.transfers) store_.wait_transfer(t);
  } catch (...) {
  }
  ssd_.reset();  // joins the workers before the host slots they read go away
  host_.reset();
}

bool KvTiers::contains(const BlockHash &hash) const {
  return host_->find_ready(hash) >= 0 || (ssd_ && ssd_->contains(hash));
}

void KvTiers::offload(std::span<const EvictedBlock> evicted) {
  std::vector<std::int32_t> blocks, slots;
  for (const EvictedBlock &e : evicted) {
    if (host_->has(e.hash)) {
      if (const std::int32_t s = host_->find_ready(e.hash); s >= 0) host_->touch(s);
      continue;
    }
    if (ssd_ && ssd_->known(e.hash)) continue;
    const std::int32_t s = host_->insert(e.hash);
    if (s < 0) {
      ++dropped_;
      continue;
    }
    blocks.push_back(e.block.value);
    slots.push_back(s);
  }
  // One transfer per run of slots that are consecutive in host memory.
  for (std::size_t i = 0; i < blocks.size();) {
    std::size_t j = i + 1;
    while (j < blocks.size() && host_->adjacent(slots[j - 1], slots[j])) ++j;
    Save save;
    save.blocks.assign(blocks.begin() + i, blocks.begin() + j);
    save.slots.assign(slots.begin() + i, slots.begin() + j);
    save.id = store_.begin_save(save.blocks, {host_->data(slots[i]), (j - i) * block_bytes_});
    saves_.push_back(std::move(save));
    i = j;
  }
}

void KvTiers::start_restore(RequestId id, std::span<const BlockId> blocks,
                            std::span<const BlockHash> hashes) {
  KEEL_CHECK(blocks.size() == hashes.size());
  Restore r;
  r.id = id;
  r.started = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    std::shared_ptr<const SsdJob> read;
    std::int32_t s = host_->find_ready(hashes[i]);
    if (s >= 0) {
      host_->pin(s);
      host_->touch(s);
      ++r.from_host;
    } else if (ssd_ && (s = host_->insert(hashes[i])) >= 0) {
      read = ssd_->read(hashes[i], host_->data(s));
      ++r.from_ssd;
    } else {
      // Gone since the lookup, or no room to stage it (every host slot pinned): the
      // restore stops here; the blocks before it are restored, the rest recomputed.
      break;
    }
    r.blocks.push_back(blocks[i].value);
    r.slots.push_back(s);
    r.reads.push_back(std::move(read));
  }
  restores_.push_back(std::move(r));
}

void KvTiers::cancel_restore(RequestId id) {
  for (Restore &r : restores_)
    if (r.id == id) r.cancelled = true;
}

void KvTiers::finish_saves(bool wait) {
  for (auto it = saves_.begin(); it != saves_.end();) {
    if (wait) store_.wait_transfer(it->id);
    if (!wait && !store_.transfer_done(it->id)) {
      ++it;
      continue;
    }
    for (std::int32_t s : it->slots) {
      if (host_->is_filling(s)) {  // not dropped by a clear meanwhile
        host_->mark_ready(s);
        ++host_stored_;
        const BlockHash h = host_->hash_of(s);
        if (ssd_ && !ssd_->known(h)) {
          host_->pin(s);  // the worker reads the slot until the write is done
          if (auto job = ssd_->write(h, host_->data(s)))
            writes_.push_back(Write{s, std::move(job)});
          else
            host_->unpin(s);
        }
      }
      host_->unpin(s);
    }
    it = saves_.erase(it);
  }
}

void KvTiers::finish_writes() {
  for (auto it = writes_.begin(); it != writes_.end();) {
    if (!it->job->done()) {
      ++it;
      continue;
    }
    host_->unpin(it->slot);
    it = writes_.erase(it);
  }
}

bool KvTiers::advance(Restore &r, std::vector<RestoreDone> &done) {
  auto release = [&] {
    for (std::int32_t s : r.slots) host_->unpin(s);
  };
  if (!r.loading) {
    // Reads of our own first: a verified read makes the block ready in RAM too.
    for (std::size_t i = 0; i < r.reads.size(); ++i) {
      if (!r.reads[i]) continue;
      if (!r.reads[i]->done()) return false;
      if (host_->is_filling(r.slots[i])) {
        if (r.reads[i]->ok())
          host_->mark_ready(r.slots[i]);
        else
          host_->drop(r.slots[i]);
      }
    }
    bool failed = r.failed;
    for (std::size_t i = 0; i < r.slots.size(); ++i) {
      if (r.reads[i] && !r.reads[i]->ok()) failed = true;
      if (host_->is_filling(r.slots[i])) return false;  // another move is filling it
    }
    for (std::size_t i = 0; i < r.slots.size(); ++i)
      if (!r.reads[i] && !host_->is_ready(r.slots[i])) failed = true;  // cleared meanwhile
    if (failed || r.cancelled) {
      release();
      if (!r.cancelled) done.push_back(RestoreDone{r.id, false, 0, 0});
      return true;
    }
    // Never load into a block whose save has not finished.
    std::unordered_set<std::int32_t> saving;
    for (const Save &s : saves_) saving.insert(s.blocks.begin(), s.blocks.end());
    for (std::int32_t b : r.blocks)
      if (saving.count(b)) return false;
    for (std::size_t i = 0; i < r.blocks.size();) {
      std::size_t j = i + 1;
      while (j < r.blocks.size() && host_->adjacent(r.slots[j - 1], r.slots[j])) ++j;
      r.transfers.push_back(
          store_.begin_load(std::span<const std::int32_t>(r.blocks).subspan(i, j - i),
                            {host_->data(r.slots[i]), (j - i) * block_bytes_}));
      i = j;
    }
    r.loading = true;
  }
  for (auto t : r.transfers)
    if (!store_.transfer_done(t)) return false;
  release();
  if (!r.cancelled) {
    host_hits_ += r.from_host;
    ssd_hits_ += r.from_ssd;
    done.push_back(RestoreDone{
        r.id, true, r.from_host, r.from_ssd,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - r.started).count()});
  }
  return true;
}

std::vector<KvTiers::RestoreDone> KvTiers::poll() {
  std::vector<RestoreDone> done;
  finish_saves(false);
  finish_writes();
  for (auto it = restores_.begin(); it != restores_.end();)
    it = advance(*it, done) ? restores_.erase(it) : it + 1;
  return done;
}

void KvTiers::flush(std::span<const EvictedBlock> blocks,
                    std::chrono::steady_clock::time_point deadline) {
  // In rounds no larger than the host tier and the write queue can take at once.
  const std::size_t round = static_cast<std::size_t>(std::max<std::int32_t>(
      1, std::min(host_->capacity() / 2,
                  ssd_ ? std::max(config_.max_pending_writes, 1) : host_->capacity())));
  for (std::size_t i = 0; i < blocks.size(); i += round) {
    if (std::chrono::steady_clock::now() >= deadline) break;
    offload(blocks.subspan(i, std::min(round, blocks.size() - i)));
    finish_saves(true);
    if (ssd_) ssd_->wait_idle(deadline);
    finish_writes();
  }
  finish_saves(true);
  if (ssd_) ssd_->wait_idle(deadline);
  finish_writes();
}

void KvTiers::clear() {
  host_->clear();
  if (ssd_) ssd_->clear();
}

void KvTiers::clear_host() { host_->clear(); }

TierStats KvTiers::host_stats() const {
  TierStats s;
  s.capacity_bytes = static_cast<std::int64_t>(host_->capacity()) * block_bytes_;
  s.blocks = host_->num_ready();
  s.used_bytes = static_cast<std::int64_t>(host_->num_entries()) * block_bytes_;
  s.hit_blocks = host_hits_;
  s.stored_blocks = host_stored_;
  for (const Save &v : saves_) s.pending += static_cast<std::int64_t>(v.slots.size());
  s.dropped = dropped_;
  return s;
}

TierStats KvTiers::ssd_stats() const {
  TierStats s;
  if (!ssd_) return s;
  const SsdStoreStats d = ssd_->stats();
  s.capacity_bytes = d.capacity_bytes;
  s.used_bytes = d.used_bytes;
  s.blocks = d.blocks;
  s.hit_blocks = ssd_hits_;
  s.stored_blocks = d.stored_blocks;
  s.errors = d.errors;
  s.pending = d.pending_writes;
  s.dropped = d.dropped_writes;
  return s;
}

}  // namespace keel
