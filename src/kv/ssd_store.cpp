#include "kv/ssd_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace keel {
namespace {

constexpr char kExt[] = ".kvb";
constexpr std::size_t kHexLen = 32;

bool parse_hex64(const char *s, std::uint64_t &out) {
  std::uint64_t v = 0;
  for (int i = 0; i < 16; ++i) {
    const char c = s[i];
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else
      return false;
    v = (v << 4) | static_cast<std::uint64_t>(d);
  }
  out = v;
  return true;
}

// "<32 hex>.kvb" -> hash (hex() writes hi first).
bool parse_block_name(const char *name, BlockHash &out) {
  if (std::strlen(name) != kHexLen + sizeof kExt - 1) return false;
  if (std::strcmp(name + kHexLen, kExt) != 0) return false;
  return parse_hex64(name, out.hi) && parse_hex64(name + 16, out.lo);
}

bool ends_with(const char *s, const char *suffix) {
  const std::size_t n = std::strlen(s), m = std::strlen(suffix);
  return n >= m && std::strcmp(s + n - m, suffix) == 0;
}

// After a short pwritev/preadv: drops the `done` bytes from the front of iov[0..n).
void skip_done(iovec *&iov, int &n, std::size_t done) {
  while (n > 0 && done >= iov->iov_len) {
    done -= iov->iov_len;
    ++iov;
    --n;
  }
  if (n > 0) {
    iov->iov_base = static_cast<char *>(iov->iov_base) + done;
    iov->iov_len -= done;
  }
}

// Writes all of iov or returns errno.
int write_all(int fd, iovec *iov, int n) {
  off_t at = 0;
  while (n > 0) {
    const ssize_t w = ::pwritev(fd, iov, n, at);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;
    at += w;
    skip_done(iov, n, static_cast<std::size_t>(w));
  }
  return 0;
}

int read_all(int fd, iovec *iov, int n) {
  off_t at = 0;
  while (n > 0) {
    const ssize_t r = ::preadv(fd, iov, n, at);
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (r == 0) return ENODATA;  // shorter than fstat said: truncated under us
    at += r;
    skip_done(iov, n, static_cast<std::size_t>(r));
  }
  return 0;
}

}  // namespace

SsdStore::SsdStore(SsdStoreConfig config) : config_(std::move(config)) {
  dir_ = config_.root / ("kv-" + config_.layout.layout.hex());
  const auto file_bytes = static_cast<std::int64_t>(config_.layout.file_bytes());
  max_files_ = config_.capacity_bytes > 0 ? config_.capacity_bytes / file_bytes : 0;
  stats_.capacity_bytes = config_.capacity_bytes;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec)
    throw Error(ErrorCode::kInvalidArgument,
                "ssd cache: cannot create " + dir_.string() + ": " + ec.message());
  const auto t0 = std::chrono::steady_clock::now();
  scan();
  scan_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int n = std::max(1, config_.io_threads);
  for (int i = 0; i < n; ++i) workers_.emplace_back([this] { worker(); });
}

SsdStore::~SsdStore() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    for (auto *q : {&reads_, &writes_, &removes_}) {
      for (auto &job : *q) job->state_.store(2, std::memory_order_release);
      q->clear();
    }
  }
  work_cv_.notify_all();
  stop_cv_.notify_all();
  for (auto &t : workers_) t.join();
}

std::filesystem::path SsdStore::file_of(const BlockHash &hash) const {
  return dir_ / (hash.hex() + kExt);
}

void SsdStore::scan() {
  DIR *d = ::opendir(dir_.c_str());
  if (d == nullptr)
    throw Error(ErrorCode::kInvalidArgument,
                "ssd cache: cannot list " + dir_.string() + ": " + std::strerror(errno));
  const int dfd = ::dirfd(d);
  index_.reserve(1024);
  std::vector<BlockHash> over;
  while (dirent *e = ::readdir(d)) {
    BlockHash h;
    if (parse_block_name(e->d_name, h)) {
      if (index_.count(h)) continue;
      if (static_cast<std::int64_t>(index_.size()) >= max_files_) {
        over.push_back(h);  // the cap shrank since these were written
        continue;
      }
      lru_.push_back(h);
      index_.emplace(h, std::prev(lru_.end()));
    } else if (ends_with(e->d_name, ".tmp")) {
      ::unlinkat(dfd, e->d_name, 0);  // a write cut short by a crash
    }
  }
  ::closedir(d);
  for (const BlockHash &h : over) ::unlink(file_of(h).c_str());
  stats_.blocks = static_cast<std::int64_t>(index_.size());
}

bool SsdStore::contains(const BlockHash &hash) const {
  std::lock_guard lk(mu_);
  return index_.count(hash) != 0;
}

bool SsdStore::known(const BlockHash &hash) const {
  std::lock_guard lk(mu_);
  return index_.count(hash) != 0 || pending_.count(hash) != 0;
}

std::shared_ptr<SsdJob> SsdStore::enqueue(std::shared_ptr<SsdJob> job) {
  {
    std::lock_guard lk(mu_);
    if (stop_) return nullptr;
    job->generation = generation_;
    switch (job->kind) {
      case SsdJob::kRead:
        reads_.push_back(job);
        break;
      case SsdJob::kWrite:
        if (max_files_ == 0 || index_.count(job->hash) || pending_.count(job->hash)) return nullptr;
        if (writes_in_flight_ >= config_.max_pending_writes) {
          ++stats_.dropped_writes;
          return nullptr;
        }
        pending_.insert(job->hash);
        ++writes_in_flight_;
        writes_.push_back(job);
        break;
      case SsdJob::kRemove:
        removes_.push_back(job);
        break;
    }
  }
  work_cv_.notify_one();
  return job;
}

std::shared_ptr<const SsdJob> SsdStore::write(const BlockHash &hash, const std::byte *payload) {
  auto job = std::make_shared<SsdJob>();
  job->kind = SsdJob::kWrite;
  job->hash = hash;
  job->buffer = const_cast<std::byte *>(payload);  // only read by the write
  return enqueue(std::move(job));
}

std::shared_ptr<const SsdJob> SsdStore::read(const BlockHash &hash, std::byte *out) {
  auto job = std::make_shared<SsdJob>();
  job->kind = SsdJob::kRead;
  job->hash = hash;
  job->buffer = out;
  auto q = enqueue(job);
  if (!q) job->state_.store(2, std::memory_order_release);  // stopping: a miss
  return job;
}

void SsdStore::clear() {
  auto job = std::make_shared<SsdJob>();
  job->kind = SsdJob::kRemove;
  {
    std::lock_guard lk(mu_);
    ++generation_;
    job->victims.assign(lru_.begin(), lru_.end());
    lru_.clear();
    index_.clear();
    stats_.blocks = 0;
  }
  enqueue(std::move(job));
}

bool SsdStore::wait_idle(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock lk(mu_);
  return idle_cv_.wait_until(lk, deadline, [&] {
    return reads_.empty() && writes_.empty() && removes_.empty() && running_ == 0;
  });
}

SsdStoreStats SsdStore::stats() const {
  std::lock_guard lk(mu_);
  SsdStoreStats s = stats_;
  s.blocks = static_cast<std::int64_t>(index_.size());
  s.used_bytes = s.blocks * static_cast<std::int64_t>(config_.layout.file_bytes());
  s.pending_writes = writes_in_flight_;
  return s;
}

void SsdStore::drop_page_cache() const {
  std::vector<BlockHash> all;
  {
    std::lock_guard lk(mu_);
    all.assign(lru_.begin(), lru_.end());
  }
  for (const BlockHash &h : all) {
    const int fd = ::open(file_of(h).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);  // dirty pages cannot be dropped
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

void SsdStore::worker() {
  for (;;) {
    std::shared_ptr<SsdJob> job;
    {
      std::unique_lock lk(mu_);
      work_cv_.wait(
          lk, [&] { return stop_ || !reads_.empty() || !writes_.empty() || !removes_.empty(); });
      if (stop_) return;
      auto &q = !reads_.empty() ? reads_ : !removes_.empty() ? removes_ : writes_;
      job = std::move(q.front());
      q.pop_front();
      ++running_;
    }
    switch (job->kind) {
      case SsdJob::kRead:
        run_read(*job);
        break;
      case SsdJob::kWrite:
        run_write(*job);
        break;
      case SsdJob::kRemove:
        run_remove(*job);
        break;
    }
    {
      std::lock_guard lk(mu_);
      --running_;
    }
    idle_cv_.notify_all();
    if (config_.on_complete) config_.on_complete();
  }
}

void SsdStore::finish(SsdJob &job, bool ok) {
  job.state_.store(ok ? 1 : 2, std::memory_order_release);
}

void SsdStore::fail(SsdJob &job, const std::string &what) {
  bool log;
  {
    std::lock_guard lk(mu_);
    ++stats_.errors;
    log = logged_errors_++ < 20;
  }
  if (log) std::fprintf(stderr, "keel kv: ssd cache: %s\n", what.c_str());
  finish(job, false);
}

void SsdStore::forget(const BlockHash &hash, std::uint64_t generation) {
  std::lock_guard lk(mu_);
  if (generation != generation_) return;
  auto it = index_.find(hash);
  if (it == index_.end()) return;
  lru_.erase(it->second);
  index_.erase(it);
}

void SsdStore::run_write(SsdJob &job) {
  const std::string name = file_of(job.hash).string();
  auto done = [&](bool ok, const std::string &err) {
    {
      std::lock_guard lk(mu_);
      pending_.erase(job.hash);
      --writes_in_flight_;
    }
    if (ok)
      finish(job, true);
    else
      fail(job, "write " + name + ": " + err);
  };
  if (config_.faults != nullptr) {
    // A slow disk: the store takes longer, on this worker only.
    if (const double s = config_.faults->take_slow_store(); s > 0) {
      std::unique_lock lk(mu_);
      stop_cv_.wait_for(lk, std::chrono::duration<double>(std::min(s, 3600.0)),
                        [&] { return stop_; });
    }
    if (config_.faults->take_ssd_write_error()) return done(false, "injected write error");
  }
  const std::size_t bytes = config_.layout.block_bytes;
  std::byte header[kBlockFileHeaderBytes];
  encode_block_header(config_.layout, job.hash, {job.buffer, bytes}, header);
  const std::string tmp = dir_.string() + "/" + job.hash.hex() + "." + std::to_string(::getpid()) +
                          "." + std::to_string(tmp_counter_.fetch_add(1)) + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return done(false, std::string("open: ") + std::strerror(errno));
  iovec iov[2] = {{header, sizeof header}, {job.buffer, bytes}};
  int err = write_all(fd, iov, 2);
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), name.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return done(false, std::strerror(err));
  }
  std::vector<BlockHash> victims;
  bool stale = false;
  {
    std::lock_guard lk(mu_);
    if (job.generation != generation_) {
      stale = true;  // cleared while this write was in flight
    } else if (!index_.count(job.hash)) {
      lru_.push_back(job.hash);
      index_.emplace(job.hash, std::prev(lru_.end()));
      ++stats_.stored_blocks;
      while (static_cast<std::int64_t>(index_.size()) > max_files_) {
        const BlockHash v = lru_.front();
        lru_.pop_front();
        index_.erase(v);
        victims.push_back(v);
        ++stats_.evicted_blocks;
      }
    }
  }
  if (stale) ::unlink(name.c_str());
  for (const BlockHash &v : victims) ::unlink(file_of(v).c_str());
  done(true, {});
}

void SsdStore::run_read(SsdJob &job) {
  const std::string name = file_of(job.hash).string();
  const std::size_t bytes = config_.layout.block_bytes;
  // Any failure: a miss, counted; the file is removed so that it is not tried again.
  auto bad = [&](const std::string &why, bool remove) {
    forget(job.hash, job.generation);
    if (remove) ::unlink(name.c_str());
    fail(job, "read " + name + ": " + why);
  };
  const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return bad(std::string("open: ") + std::strerror(errno), false);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return bad(std::string("stat: ") + std::strerror(e), false);
  }
  if (static_cast<std::size_t>(st.st_size) != config_.layout.file_bytes()) {
    ::close(fd);
    return bad("size " + std::to_string(st.st_size) + ", expected " +
                   std::to_string(config_.layout.file_bytes()) + " (truncated or foreign)",
               true);
  }
  std::byte header[kBlockFileHeaderBytes];
  iovec iov[2] = {{header, sizeof header}, {job.buffer, bytes}};
  const int err = read_all(fd, iov, 2);
  ::close(fd);
  if (err != 0) return bad(std::strerror(err), true);
  if (config_.faults != nullptr && config_.faults->take_ssd_read_corrupt() && bytes > 0) {
    job.buffer[0] ^= std::byte{0x5a};  // as a flipped bit on the medium would
    job.buffer[bytes - 1] ^= std::byte{0xa5};
  }
  const std::string why = verify_block_file(config_.layout, job.hash, header, {job.buffer, bytes});
  if (!why.empty()) return bad(why, true);
  {
    std::lock_guard lk(mu_);
    ++stats_.read_blocks;
    if (job.generation == generation_)
      if (auto it = index_.find(job.hash); it != index_.end())
        lru_.splice(lru_.end(), lru_, it->second);  // most recently used
  }
  finish(job, true);
}

void SsdStore::run_remove(SsdJob &job) {
  for (const BlockHash &h : job.victims) ::unlink(file_of(h).c_str());
  finish(job, true);
}

}  // namespace keel
