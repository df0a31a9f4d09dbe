#include "engine/weight_prefetch.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <thread>

namespace keel {

namespace fs = std::filesystem;

std::vector<fs::path> weight_files_of(const fs::path &model) {
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_regular_file(model, ec)) return {model};
  for (const auto &f : fs::directory_iterator(model, ec)) {
    const auto ext = f.path().extension();
    if ((ext == ".safetensors" || ext == ".gguf") && f.is_regular_file(ec))
      files.push_back(f.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

namespace {

// An open weight file with a read-only mapping, for mincore (RAII).
class ProbedFile {
 public:
  explicit ProbedFile(const fs::path &path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) return;
    const off_t end = ::lseek(fd_, 0, SEEK_END);
    size_ = end > 0 ? static_cast<std::size_t>(end) : 0;
    if (size_ == 0) return;
    void *m = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
    if (m != MAP_FAILED) map_ = static_cast<unsigned char *>(m);
  }
  ~ProbedFile() {
    if (map_) ::munmap(map_, size_);
    if (fd_ >= 0) ::close(fd_);
  }
  ProbedFile(const ProbedFile &) = delete;
  ProbedFile &operator=(const ProbedFile &) = delete;

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  std::size_t size() const { return size_; }
  // Bytes of [offset, offset + len) in the page cache (all of it when unknown: no
  // mapping to ask, so nothing is read for it).
  std::size_t cached(std::size_t offset, std::size_t len) const {
    if (!map_) return len;
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t pages = (len + page - 1) / page;
    std::vector<unsigned char> vec(pages);
    if (::mincore(map_ + offset, len, vec.data()) != 0) return len;
    std::size_t in = 0;
    for (std::size_t i = 0; i < pages; ++i)
      if (vec[i] & 1) in += std::min(page, len - i * page);
    return in;
  }

 private:
  int fd_ = -1;
  std::size_t size_ = 0;
  unsigned char *map_ = nullptr;
};

}  // namespace

PrefetchResult prefetch_weights(
    const std::vector<fs::path> &files, const PrefetchOptions &options,
    const std::function<void(std::int64_t, std::int64_t)> &on_progress) {
  PrefetchResult r;
  std::vector<std::unique_ptr<ProbedFile>> open;
  for (const auto &f : files) {
    auto p = std::make_unique<ProbedFile>(f);
    if (!p->ok()) continue;
    r.total_bytes += static_cast<std::int64_t>(p->size());
    r.cached_bytes += static_cast<std::int64_t>(p->cached(0, p->size()));
    open.push_back(std::move(p));
  }
  if (options.max_bytes > 0 && r.total_bytes - r.cached_bytes > options.max_bytes) {
    r.skipped = true;
    return r;
  }
  std::size_t chunk = std::max<std::size_t>(options.chunk_bytes, 4096);
  // Slowed (tests): at least 64 steps, so that the progress has figures to show.
  if (options.slow_down.count() > 0)
    chunk = std::min(chunk,
                     std::max<std::size_t>(
                         static_cast<std::size_t>(r.total_bytes / 64) & ~std::size_t{4095}, 4096));
  std::size_t chunks = 0;
  for (const auto &p : open) chunks += (p->size() + chunk - 1) / chunk;
  const auto pause =
      chunks > 0 ? options.slow_down / static_cast<std::int64_t>(chunks) : options.slow_down;
  std::vector<char> buf(chunk);
  std::int64_t done = 0;
  for (const auto &p : open) {
    ::posix_fadvise(p->fd(), 0, 0, POSIX_FADV_SEQUENTIAL);
    for (std::size_t off = 0; off < p->size(); off += chunk) {
      const std::size_t len = std::min(chunk, p->size() - off);
      if (p->cached(off, len) < len) {
        std::size_t got = 0;
        while (got < len) {
          const ssize_t n = ::pread(p->fd(), buf.data(), len - got, static_cast<off_t>(off + got));
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) return r;  // the runner will name the problem
          got += static_cast<std::size_t>(n);
        }
        r.read_bytes += static_cast<std::int64_t>(len);
      }
      done += static_cast<std::int64_t>(len);
      if (pause.count() > 0) std::this_thread::sleep_for(pause);
      if (on_progress) on_progress(done, r.total_bytes);
    }
  }
  return r;
}

}  // namespace keel
