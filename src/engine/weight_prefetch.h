// Reads a model's weight files into the page cache before a runner opens them, counting
// bytes as it goes: the "reading weights" phase of a load (issue 22). The runners map
// the files (formats/mapped_file.h) and touch each page later, in the CPU's first
// forward pass or the CUDA upload, where nothing counts it; reading them here, in large
// sequential reads, makes that disk time visible as progress, and the runner then finds
// the pages cached. Pages already cached are counted as done without a read (mincore),
// so a warm restart costs no copy. When the uncached bytes would not fit in `max_bytes`
// (the files would push each other out of the cache) nothing is read: the runner reads
// as it did before.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <vector>

namespace keel {

// The files a runner maps for `model` (an HF directory, a .gguf file, or a directory
// holding one): *.safetensors and *.gguf, sorted.
std::vector<std::filesystem::path> weight_files_of(const std::filesystem::path &model);

struct PrefetchOptions {
  std::size_t chunk_bytes = std::size_t{8} << 20;
  std::int64_t max_bytes = 0;  // uncached bytes it may read; 0: no limit
  // Tests only (--fault-slow-load): the whole read takes at least this long, spread
  // over its chunks, so that a small model's load can be watched.
  std::chrono::milliseconds slow_down{0};
};

struct PrefetchResult {
  std::int64_t total_bytes = 0;   // of the files
  std::int64_t cached_bytes = 0;  // already in the page cache before
  std::int64_t read_bytes = 0;    // read here
  bool skipped = false;           // over max_bytes: nothing read
};

// Calls `on_progress(done, total)` (bytes) after each chunk, the last time with
// done == total (not at all when skipped). A file that cannot be opened or read ends the prefetch
// quietly: the runner reports the real error.
PrefetchResult prefetch_weights(const std::vector<std::filesystem::path> &files,
                                const PrefetchOptions &options,
                                const std::function<void(std::int64_t, std::int64_t)> &on_progress);

}  // namespace keel
