// The SSD tier's store on real files in a temporary directory: round trip, restart,
// every kind of bad file read as a counted miss (and removed), LRU cap, the write
// queue bound, injected faults, a file-size limit (ENOSPC's sibling EFBIG) and the
// index rebuild of 100,000 blocks.
#include "kv/ssd_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>

#include "tier_test_util.h"

namespace keel::test {
namespace {

constexpr std::size_t kBytes = 4096;

BlockFileLayout layout_of(const std::string &model, std::size_t bytes = kBytes) {
  return BlockFileLayout::of(ModelFingerprint::of(model), 16, bytes);
}

SsdStoreConfig config(const TempDir &dir, std::int64_t blocks = 1000,
                      const std::string &model = "model-a", FaultInjector *faults = nullptr) {
  SsdStoreConfig c;
  c.root = dir.path();
  c.layout = layout_of(model);
  c.capacity_bytes = blocks * static_cast<std::int64_t>(c.layout.file_bytes());
  c.faults = faults;
  return c;
}

bool wait_job(const std::shared_ptr<const SsdJob> &job) {
  return eventually_true([&] { return job->done(); });
}

// Writes blocks [0, n) and waits for them.
void write_blocks(SsdStore &s, int first, int n, std::vector<std::vector<std::byte>> &keep) {
  for (int i = first; i < first + n; ++i) {
    keep.push_back(payload_of(test_hash(i), kBytes));
    auto job = s.write(test_hash(i), keep.back().data());
    ASSERT_NE(job, nullptr);
    ASSERT_TRUE(wait_job(job));
    ASSERT_TRUE(job->ok());
  }
}

bool read_ok(SsdStore &s, int i) {
  std::vector<std::byte> out(kBytes);
  auto job = s.read(test_hash(i), out.data());
  EXPECT_TRUE(wait_job(job));
  if (!job->ok()) return false;
  EXPECT_EQ(out, payload_of(test_hash(i), kBytes)) << "block " << i << " served wrong bytes";
  return true;
}

TEST(SsdStore, RoundTripAndRestart) {
  TempDir dir;
  std::vector<std::vector<std::byte>> keep;
  {
    SsdStore s(config(dir));
    write_blocks(s, 0, 20, keep);
    EXPECT_TRUE(s.contains(test_hash(3)));
    EXPECT_FALSE(s.contains(test_hash(99)));
    EXPECT_EQ(s.write(test_hash(3), keep[3].data()), nullptr);  // already there
    for (int i = 0; i < 20; ++i) EXPECT_TRUE(read_ok(s, i));
    const auto st = s.stats();
    EXPECT_EQ(st.blocks, 20);
    EXPECT_EQ(st.stored_blocks, 20);
    EXPECT_EQ(st.read_blocks, 20);
    EXPECT_EQ(st.errors, 0);
    EXPECT_EQ(st.used_bytes, 20 * static_cast<std::int64_t>(s.layout().file_bytes()));
  }
  SsdStore again(config(dir));
  EXPECT_EQ(again.stats().blocks, 20);
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(read_ok(again, i));
  EXPECT_FALSE(read_ok(again, 20));  // never written: a miss, counted
}

TEST(SsdStore, CorruptTruncatedAndForeignFilesAreCountedMissesAndRemoved) {
  TempDir dir;
  std::vector<std::vector<std::byte>> keep;
  SsdStore s(config(dir));
  write_blocks(s, 0, 4, keep);
  // 0: a flipped payload bit; 1: truncated; 2: a flipped header byte; 3: another
  // model's block under this name.
  {
    std::fstream f(s.file_of(test_hash(0)), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kBlockFileHeaderBytes + 100);
    f.put('\x7f');
  }
  std::filesystem::resize_file(s.file_of(test_hash(1)), kBlockFileHeaderBytes + kBytes / 2);
  {
    std::fstream f(s.file_of(test_hash(2)), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(50);
    f.put('\x01');
  }
  {
    TempDir other;
    SsdStore b(config(other, 1000, "model-b"));
    std::vector<std::vector<std::byte>> k2;
    write_blocks(b, 3, 1, k2);
    std::filesystem::copy_file(b.file_of(test_hash(3)), s.file_of(test_hash(3)),
                               std::filesystem::copy_options::overwrite_existing);
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_FALSE(read_ok(s, i)) << i;
    EXPECT_FALSE(s.contains(test_hash(i)));
    EXPECT_FALSE(std::filesystem::exists(s.file_of(test_hash(i)))) << i;
  }
  EXPECT_EQ(s.stats().errors, 4);
}

TEST(SsdStore, AnotherModelOrLayoutUsesAnotherDirectory) {
  TempDir dir;
  std::vector<std::vector<std::byte>> keep;
  {
    SsdStore a(config(dir));
    write_blocks(a, 0, 3, keep);
  }
  SsdStore b(config(dir, 1000, "model-b"));
  EXPECT_EQ(b.stats().blocks, 0);
  EXPECT_FALSE(b.contains(test_hash(0)));
  auto c = config(dir);
  c.layout = BlockFileLayout::of(ModelFingerprint::of("model-a"), 32, kBytes);  // block size
  SsdStore d(c);
  EXPECT_EQ(d.stats().blocks, 0);
  EXPECT_NE(d.dir(), b.dir());
}

TEST(SsdStore, LruCapEvictsOldestFiles) {
  TempDir dir;
  std::vector<std::vector<std::byte>> keep;
  SsdStore s(config(dir, 5));
  write_blocks(s, 0, 5, keep);
  EXPECT_TRUE(read_ok(s, 0));  // 0 becomes the most recent
  write_blocks(s, 5, 2, keep);
  EXPECT_EQ(s.stats().blocks, 5);
  EXPECT_TRUE(s.contains(test_hash(0)));
  EXPECT_FALSE(s.contains(test_hash(1)));
  EXPECT_FALSE(s.contains(test_hash(2)));
  EXPECT_FALSE(std::filesystem::exists(s.file_of(test_hash(1))));
  EXPECT_EQ(s.stats().evicted_blocks, 2);
  SsdStore smaller(config(dir, 3));  // a smaller cap after restart trims at scan
  EXPECT_EQ(smaller.stats().blocks, 3);
}

TEST(SsdStore, WriteQueueIsBoundedUnderASlowDisk) {
  TempDir dir;
  FaultInjector faults;
  faults.arm(FaultSpec{FaultKind::kSlowStore, 0.05, 1000});
  auto c = config(dir, 1000, "model-a", &faults);
  c.max_pending_writes = 4;
  SsdStore s(c);
  std::vector<std::vector<std::byte>> keep(40);
  int accepted = 0;
  for (int i = 0; i < 40; ++i) {
    keep[i] = payload_of(test_hash(i), kBytes);
    if (s.write(test_hash(i), keep[i].data())) ++accepted;
    EXPECT_LE(s.stats().pending_writes, 4);
  }
  EXPECT_EQ(accepted, 4);
  EXPECT_EQ(s.stats().dropped_writes, 36);
  ASSERT_TRUE(s.wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(20)));
  EXPECT_EQ(s.stats().blocks, 4);
}

TEST(SsdStore, InjectedWriteErrorAndReadCorruptionAreCountedMisses) {
  TempDir dir;
  FaultInjector faults;
  SsdStore s(config(dir, 1000, "model-a", &faults));
  faults.arm(FaultSpec{FaultKind::kSsdWriteError, std::nullopt, 1});
  auto p = payload_of(test_hash(0), kBytes);
  auto job = s.write(test_hash(0), p.data());
  ASSERT_TRUE(wait_job(job));
  EXPECT_FALSE(job->ok());
  EXPECT_FALSE(s.contains(test_hash(0)));
  EXPECT_EQ(s.stats().errors, 1);
  std::vector<std::vector<std::byte>> keep;
  write_blocks(s, 1, 1, keep);  // the fault was one shot
  faults.arm(FaultSpec{FaultKind::kSsdReadCorrupt, std::nullopt, 1});
  EXPECT_FALSE(read_ok(s, 1));
  EXPECT_EQ(s.stats().errors, 2);
  EXPECT_FALSE(s.contains(test_hash(1)));
}

TEST(SsdStore, FileSizeLimitMakesWritesFailNotCrash) {
  TempDir dir;
  SsdStore s(config(dir));
  // Like a full disk: every write fails part-way (EFBIG under RLIMIT_FSIZE).
  struct sigaction ign {
  }, old{};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGXFSZ, &ign, &old);
  rlimit lim{}, saved{};
  ::getrlimit(RLIMIT_FSIZE, &saved);
  lim.rlim_cur = kBlockFileHeaderBytes + kBytes / 2;
  lim.rlim_max = saved.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
  std::vector<std::vector<std::byte>> keep(5);
  for (int i = 0; i < 5; ++i) {
    keep[i] = payload_of(test_hash(i), kBytes);
    auto job = s.write(test_hash(i), keep[i].data());
    ASSERT_NE(job, nullptr);
    ASSERT_TRUE(wait_job(job));
    EXPECT_FALSE(job->ok());
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::sigaction(SIGXFSZ, &old, nullptr);
  EXPECT_EQ(s.stats().errors, 5);
  EXPECT_EQ(s.stats().blocks, 0);
  for (const auto &e : std::filesystem::directory_iterator(s.dir()))
    ADD_FAILURE() << "left behind: " << e.path();
}

TEST(SsdStore, ClearRemovesThisModelsFiles) {
  TempDir dir;
  std::vector<std::vector<std::byte>> keep;
  SsdStore s(config(dir));
  write_blocks(s, 0, 10, keep);
  s.clear();
  EXPECT_EQ(s.stats().blocks, 0);
  ASSERT_TRUE(s.wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  EXPECT_TRUE(std::filesystem::is_empty(s.dir()));
}

TEST(SsdStore, LeftoverTempFilesAreRemovedAtStart) {
  TempDir dir;
  const auto c = config(dir);
  const auto d = c.root / ("kv-" + c.layout.layout.hex());
  std::filesystem::create_directories(d);
  std::ofstream(d / (test_hash(1).hex() + ".123.0.tmp")) << "torn";
  std::ofstream(d / "unrelated.txt") << "kept";
  SsdStore s(c);
  EXPECT_FALSE(std::filesystem::exists(d / (test_hash(1).hex() + ".123.0.tmp")));
  EXPECT_TRUE(std::filesystem::exists(d / "unrelated.txt"));
  EXPECT_EQ(s.stats().blocks, 0);
}

// The index is the directory listing: 100,000 blocks come back in well under a second.
TEST(SsdStore, IndexRebuildOf100kBlocksUnderOneSecond) {
  TempDir dir;
  auto c = config(dir, 200000);
  c.layout = layout_of("model-a", 64);
  c.capacity_bytes = 200000 * static_cast<std::int64_t>(c.layout.file_bytes());
  const auto d = c.root / ("kv-" + c.layout.layout.hex());
  std::filesystem::create_directories(d);
  // Names are all the scan reads; contents are checked only when a block is read.
  for (int i = 0; i < 100000; ++i) {
    const std::string name = (d / (test_hash(i).hex() + ".kvb")).string();
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ::close(fd);
  }
  SsdStore s(c);
  EXPECT_EQ(s.stats().blocks, 100000);
  EXPECT_TRUE(s.contains(test_hash(99999)));
  std::printf("index rebuild: 100000 blocks in %.3f s\n", s.scan_seconds());
  EXPECT_LT(s.scan_seconds(), 1.0);
}

}  // namespace
}  // namespace keel::test
