// Reading a model's weight files before the runner maps them: the files a runner maps,
// byte counts that only go up and end at the files' total, and no copy of what is cached.
#include "engine/weight_prefetch.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

namespace keel {
namespace {

namespace fs = std::filesystem;

struct ModelDir {
  fs::path dir = fs::temp_directory_path() / ("keel-prefetch-" + std::to_string(::getpid()));
  ModelDir() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~ModelDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  void write(const std::string &name, std::size_t bytes) {
    std::ofstream f(dir / name, std::ios::binary);
    std::string block(bytes, '\x5a');
    f.write(block.data(), static_cast<std::streamsize>(block.size()));
  }
};

TEST(WeightPrefetch, ListsTheFilesARunnerMaps) {
  ModelDir m;
  m.write("model-00002-of-00002.safetensors", 10);
  m.write("model-00001-of-00002.safetensors", 10);
  m.write("config.json", 10);
  m.write("tokenizer.json", 10);
  const auto files = weight_files_of(m.dir);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].filename(), "model-00001-of-00002.safetensors");
  EXPECT_EQ(files[1].filename(), "model-00002-of-00002.safetensors");
  m.write("one.gguf", 10);
  EXPECT_EQ(weight_files_of(m.dir / "one.gguf"), std::vector<fs::path>{m.dir / "one.gguf"});
}

TEST(WeightPrefetch, CountsEveryByteInOrderUpToTheTotal) {
  ModelDir m;
  m.write("a.safetensors", 3 * 65536 + 17);
  m.write("b.safetensors", 65536);
  const std::int64_t total = 4 * 65536 + 17;
  PrefetchOptions o;
  o.chunk_bytes = 65536;
  std::vector<std::pair<std::int64_t, std::int64_t>> seen;
  const PrefetchResult r = prefetch_weights(
      weight_files_of(m.dir), o, [&](std::int64_t d, std::int64_t t) { seen.emplace_back(d, t); });
  EXPECT_EQ(r.total_bytes, total);
  EXPECT_FALSE(r.skipped);
  EXPECT_EQ(r.cached_bytes + r.read_bytes, total);  // what was not cached was read
  ASSERT_EQ(seen.size(), 5u);                       // one per chunk: 4 + 1
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].second, total);
    if (i > 0) {
      EXPECT_GT(seen[i].first, seen[i - 1].first);
    }
  }
  EXPECT_EQ(seen.back().first, total);
}

TEST(WeightPrefetch, ACachedFileIsCountedWithoutACopy) {
  ModelDir m;
  m.write("w.safetensors", 1 << 20);
  const auto files = weight_files_of(m.dir);
  prefetch_weights(files, {}, nullptr);  // now surely in the page cache (just written and read)
  const PrefetchResult r = prefetch_weights(files, {}, nullptr);
  EXPECT_EQ(r.cached_bytes, 1 << 20);
  EXPECT_EQ(r.read_bytes, 0);
}

TEST(WeightPrefetch, MissingFilesAreLeftToTheRunner) {
  std::int64_t calls = 0;
  const PrefetchResult r = prefetch_weights({"/nonexistent/keel/model.safetensors"}, {},
                                            [&](std::int64_t, std::int64_t) { ++calls; });
  EXPECT_EQ(r.total_bytes, 0);
  EXPECT_EQ(calls, 0);
}

TEST(WeightPrefetch, TheTestSlowDownStretchesTheRead) {
  ModelDir m;
  m.write("w.safetensors", 4 * 4096);
  PrefetchOptions o;
  o.chunk_bytes = 4096;
  o.slow_down = std::chrono::milliseconds(200);
  const auto t0 = std::chrono::steady_clock::now();
  prefetch_weights(weight_files_of(m.dir), o, nullptr);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
}

}  // namespace
}  // namespace keel
