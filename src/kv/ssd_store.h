// The SSD tier: one file per KV block in a directory of its own per model and KV
// layout, size-capped with LRU eviction, written behind by worker threads, verified on
// every read, and indexed again on start by one directory listing.
//
//   <root>/kv-<layout hash>/<block hash, 32 hex>.kvb     (block_file.h: header + bytes)
//
// Why files and plain pread/pwrite (not a log, not liburing): a block is large (tens of
// KB to MBs), so a syscall per block costs nothing beside the copy; one file per block
// makes eviction an unlink, makes the index the directory listing itself (names encode
// the hashes, so a restart reads no payloads and stats nothing), and makes atomicity the
// filesystem's rename. Buffered I/O, no O_DIRECT: it works on every filesystem (tmpfs
// too) and the write-behind runs on workers anyway; reads of freshly written blocks may
// come from the page cache (the benchmark says which).
//
// Durability: a block is written to "<hash>.<pid>.<n>.tmp" and renamed into place; no
// fsync. A killed process leaves at most .tmp files (removed by the next scan); a power
// loss may leave renamed files with torn contents, which the checksum turns into misses.
// Either way no wrong block is ever served.
//
// Errors never propagate: a failed write (ENOSPC, EFBIG, EIO, an injected fault) or a
// failed read (missing, truncated, corrupt, another layout) is counted, the bad file is
// removed, and the job reports failure (a miss).
//
// Backpressure: at most max_pending_writes writes are queued or running; write()
// refuses more (the block stays only in host RAM, counted as dropped), so memory never
// grows with a slow disk. Reads go before writes.
//
// Thread-safe. Jobs point at caller memory that must stay valid until the job is done.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/fault_injector.h"
#include "kv/block_file.h"

namespace keel {

struct SsdStoreConfig {
  std::filesystem::path root;  // --cache-dir; the store uses root/kv-<layout>
  std::int64_t capacity_bytes = 0;
  BlockFileLayout layout;
  int io_threads = 2;
  std::int32_t max_pending_writes = 256;
  FaultInjector *faults = nullptr;    // may be null
  std::function<void()> on_complete;  // runs on a worker after each job; must not block
};

struct SsdStoreStats {
  std::int64_t capacity_bytes = 0, used_bytes = 0, blocks = 0;
  std::int64_t stored_blocks = 0, read_blocks = 0, errors = 0;
  std::int64_t pending_writes = 0, dropped_writes = 0, evicted_blocks = 0;
};

class SsdJob {
 public:
  bool done() const { return state_.load(std::memory_order_acquire) != 0; }
  bool ok() const { return state_.load(std::memory_order_acquire) == 1; }

 private:
  friend class SsdStore;
  enum Kind { kRead, kWrite, kRemove };
  Kind kind = kRead;
  BlockHash hash;
  std::byte *buffer = nullptr;  // [block_bytes]
  std::uint64_t generation = 0;
  std::vector<BlockHash> victims;  // kRemove
  std::atomic<int> state_{0};      // 0 queued or running, 1 ok, 2 failed
};

class SsdStore {
 public:
  // Creates the directory if needed and indexes what is there. Throws Error(kIo...)
  // only when the directory cannot be created or listed.
  explicit SsdStore(SsdStoreConfig config);
  // Queued jobs that have not started are dropped; running ones finish.
  ~SsdStore();
  SsdStore(const SsdStore &) = delete;
  SsdStore &operator=(const SsdStore &) = delete;

  const std::filesystem::path &dir() const { return dir_; }
  std::filesystem::path file_of(const BlockHash &hash) const;
  const BlockFileLayout &layout() const { return config_.layout; }

  bool contains(const BlockHash &hash) const;  // written and indexed
  bool known(const BlockHash &hash) const;     // indexed, or a write queued
  // Queues a write of `payload` ([block_bytes], valid until the job is done). Null when
  // refused: already known, the queue is full (counted as dropped), or no capacity.
  std::shared_ptr<const SsdJob> write(const BlockHash &hash, const std::byte *payload);
  // Queues a verified read into `out` ([block_bytes]).
  std::shared_ptr<const SsdJob> read(const BlockHash &hash, std::byte *out);
  // Forgets every block and removes their files (on a worker). Writes still in flight
  // remove their own files when they land.
  void clear();
  // Waits until no job is queued or running; false at the deadline.
  bool wait_idle(std::chrono::steady_clock::time_point deadline) const;

  SsdStoreStats stats() const;
  double scan_seconds() const { return scan_seconds_; }
  std::int64_t max_blocks() const { return max_files_; }
  // Asks the kernel to drop the indexed files from the page cache (benchmarks: cold reads).
  void drop_page_cache() const;

 private:
  void scan();
  void worker();
  void run_write(SsdJob &job);
  void run_read(SsdJob &job);
  void run_remove(SsdJob &job);
  void fail(SsdJob &job, const std::string &what);
  void forget(const BlockHash &hash, std::uint64_t generation);  // index only, under no lock
  void finish(SsdJob &job, bool ok);
  std::shared_ptr<SsdJob> enqueue(std::shared_ptr<SsdJob> job);

  SsdStoreConfig config_;
  std::filesystem::path dir_;
  std::int64_t max_files_ = 0;
  double scan_seconds_ = 0.0;
  std::atomic<std::uint64_t> tmp_counter_{0};

  mutable std::mutex mu_;
  std::condition_variable work_cv_;          // workers wait for jobs
  std::condition_variable stop_cv_;          // an injected slow store sleeps on it
  mutable std::condition_variable idle_cv_;  // wait_idle
  bool stop_ = false;
  std::deque<std::shared_ptr<SsdJob>> reads_, writes_, removes_;
  std::int32_t running_ = 0, writes_in_flight_ = 0;
  std::uint64_t generation_ = 0;
  std::list<BlockHash> lru_;  // front: least recently used
  std::unordered_map<BlockHash, std::list<BlockHash>::iterator> index_;
  std::unordered_set<BlockHash> pending_;  // writes queued or running
  SsdStoreStats stats_;
  std::int32_t logged_errors_ = 0;

  std::vector<std::thread> workers_;  // last: started when everything above exists
};

}  // namespace keel
