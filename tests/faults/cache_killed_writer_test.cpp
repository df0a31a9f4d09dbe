// kill -9 in the middle of heavy SSD cache writes: the next store on that directory
// serves only verified blocks, each with exactly the bytes written under its name.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kv/ssd_store.h"
#include "unit/kv/tier_test_util.h"

namespace keel::test {
namespace {

constexpr std::size_t kBytes = 64 << 10;

SsdStoreConfig store_config(const TempDir &dir) {
  SsdStoreConfig c;
  c.root = dir.path();
  c.layout = BlockFileLayout::of(ModelFingerprint::of("killed-writer"), 16, kBytes);
  c.capacity_bytes = std::int64_t{1} << 30;
  c.max_pending_writes = 64;
  c.io_threads = 4;
  return c;
}

TEST(CacheKilledWriter, NoWrongBlockAfterKillDuringWrites) {
  TempDir dir;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Writes forever (until killed): payloads are a function of the hash.
    SsdStore s(store_config(dir));
    std::vector<std::vector<std::byte>> ring(128);
    for (std::uint64_t i = 0;; ++i) {
      auto &buf = ring[i % ring.size()];
      buf = payload_of(test_hash(i), kBytes);
      while (!s.write(test_hash(i), buf.data())) ::usleep(100);
      if (i % ring.size() == ring.size() - 1)
        s.wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(5));
    }
  }
  ::usleep(400 * 1000);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));

  SsdStore s(store_config(dir));
  const auto n = s.stats().blocks;
  ASSERT_GT(n, 0) << "the child wrote nothing before it was killed";
  std::vector<std::byte> out(kBytes);
  std::int64_t ok = 0;
  for (std::uint64_t i = 0; i < static_cast<std::uint64_t>(n) + 256; ++i) {
    if (!s.contains(test_hash(i))) continue;
    auto job = s.read(test_hash(i), out.data());
    ASSERT_TRUE(eventually_true([&] { return job->done(); }));
    if (!job->ok()) continue;  // torn: a counted miss
    ++ok;
    ASSERT_EQ(out, payload_of(test_hash(i), kBytes)) << "wrong bytes served for block " << i;
  }
  std::printf("killed writer: %lld blocks indexed, %lld verified, %lld errors\n",
              static_cast<long long>(n), static_cast<long long>(ok),
              static_cast<long long>(s.stats().errors));
  EXPECT_GT(ok, 0);
  for (const auto &e : std::filesystem::directory_iterator(s.dir()))
    EXPECT_NE(e.path().extension(), ".tmp") << "a temp file survived the scan";
}

}  // namespace
}  // namespace keel::test
