// Cache tier faults with a real engine (CPU runner, tiny model) and real files: a
// corrupted, truncated or unreadable block, failing writes (injected, and a file-size
// limit as a full disk), and a slow disk. Each time the request is still answered with
// exactly the cold output; the fault only shows as counted errors and fewer hits.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <fstream>

#include "unit/engine/tier_engine_util.h"

namespace keel::test {
namespace {

struct Persisted {
  TempDir dir;
  std::vector<TokenId> prompt = tier_prompt(51, 100);
  Collected cold;
  TierEngineOptions opts;
  // Runs the prompt once and stops the engine (which flushes its blocks to SSD).
  Persisted() {
    cold = cold_reference(prompt);
    opts.ssd_dir = dir.path();
    auto e = open_tier_engine(opts);
    run_one(*e, 1, prompt);
  }
};

void flip_payload_byte(const std::filesystem::path &f) {
  std::fstream s(f, std::ios::in | std::ios::out | std::ios::binary);
  s.seekg(200);
  char c = 0;
  s.get(c);
  s.seekp(200);
  s.put(static_cast<char>(c ^ 0x10));
}

#define SKIP_WITHOUT_MODEL() \
  if (!std::filesystem::exists(tier_model())) GTEST_SKIP() << "missing " << tier_model()

TEST(CacheFaults, CorruptedBlockFileIsAMissAndTheRequestIsAnsweredRight) {
  SKIP_WITHOUT_MODEL();
  Persisted p;
  auto files = block_files(p.dir.path());
  ASSERT_GE(files.size(), 6u);
  for (const auto &f : files) flip_payload_byte(f);
  auto e = open_tier_engine(p.opts);
  auto c = run_one(*e, 1, p.prompt);
  expect_same_output(c, p.cold);
  const auto s = e->status();
  EXPECT_GE(s.ssd_tier.errors, 1);
  EXPECT_EQ(s.ssd_tier.hit_blocks, 0);
  EXPECT_EQ(c.cached_prompt_tokens, 0);
  // The bad file that was read is gone.
  EXPECT_LT(block_files(p.dir.path()).size(), files.size());
}

TEST(CacheFaults, TruncatedBlockFileIsAMiss) {
  SKIP_WITHOUT_MODEL();
  Persisted p;
  for (const auto &f : block_files(p.dir.path()))
    std::filesystem::resize_file(f, std::filesystem::file_size(f) / 2);
  auto e = open_tier_engine(p.opts);
  expect_same_output(run_one(*e, 1, p.prompt), p.cold);
  EXPECT_GE(e->status().ssd_tier.errors, 1);
}

TEST(CacheFaults, InjectedReadCorruptionIsCaughtByTheChecksum) {
  SKIP_WITHOUT_MODEL();
  Persisted p;
  auto e = open_tier_engine(p.opts);
  e->inject_fault(FaultSpec{FaultKind::kSsdReadCorrupt, std::nullopt, 1});
  expect_same_output(run_one(*e, 1, p.prompt), p.cold);
  EXPECT_EQ(e->status().ssd_tier.errors, 1);
  // The next request finds the rest (all but the corrupt block) and stays right.
  expect_same_output(run_one(*e, 2, p.prompt), p.cold);
}

TEST(CacheFaults, InjectedWriteErrorsAreCountedNeverFailARequest) {
  SKIP_WITHOUT_MODEL();
  const auto prompt = tier_prompt(61, 100);
  const Collected cold = cold_reference(prompt);
  TempDir dir;
  TierEngineOptions o;
  o.ssd_dir = dir.path();
  auto e = open_tier_engine(o);
  e->inject_fault(FaultSpec{FaultKind::kSsdWriteError, std::nullopt, 1000});
  expect_same_output(run_one(*e, 1, prompt), cold);
  e->demote_cache(true).get();  // every SSD write fails; RAM dropped
  ASSERT_TRUE(eventually([&] { return e->status().ssd_tier.errors >= 6; }));
  EXPECT_EQ(e->status().ssd_tier.blocks, 0);
  auto c = run_one(*e, 2, prompt);
  expect_same_output(c, cold);
  EXPECT_EQ(c.cached_prompt_tokens, 0);
  EXPECT_TRUE(block_files(dir.path()).empty());
}

TEST(CacheFaults, FullDiskOnlyCountsErrors) {
  SKIP_WITHOUT_MODEL();
  const auto prompt = tier_prompt(71, 100);
  const Collected cold = cold_reference(prompt);
  TempDir dir;
  TierEngineOptions o;
  o.ssd_dir = dir.path();
  auto e = open_tier_engine(o);
  expect_same_output(run_one(*e, 1, prompt), cold);
  // Every block file write stops part-way, as on a full disk (EFBIG under RLIMIT_FSIZE;
  // SIGXFSZ ignored as keel engine would have to).
  struct sigaction ign {
  }, old{};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGXFSZ, &ign, &old);
  rlimit saved{}, lim{};
  ::getrlimit(RLIMIT_FSIZE, &saved);
  lim.rlim_cur = 1000;
  lim.rlim_max = saved.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
  e->demote_cache(true).get();
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::sigaction(SIGXFSZ, &old, nullptr);
  ASSERT_TRUE(eventually([&] { return e->status().ssd_tier.errors >= 6; }));
  auto c = run_one(*e, 2, prompt);
  expect_same_output(c, cold);
  EXPECT_TRUE(block_files(dir.path()).empty());
}

TEST(CacheFaults, SlowDiskNeverBlocksTheStepLoopAndTheQueueStaysBounded) {
  SKIP_WITHOUT_MODEL();
  TempDir dir;
  TierEngineOptions o;
  o.blocks = 16;  // every prompt evicts the last one's blocks
  o.ssd_dir = dir.path();
  o.max_pending_writes = 4;
  auto e = open_tier_engine(o);
  e->inject_fault(FaultSpec{FaultKind::kSlowStore, 2.0, 1000});  // each write takes 2 s
  std::int64_t max_pending = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 6; ++i) {
    const auto prompt = tier_prompt(80 + i, 120);
    auto c = run_one(*e, i + 1, prompt);
    EXPECT_EQ(c.tokens.size(), 8u);
    EXPECT_EQ(c.finish, FinishReason::kLength);
    max_pending = std::max(max_pending, e->status().ssd_tier.pending);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0) << "requests waited for the slow disk";
  EXPECT_LE(max_pending, 4);
  EXPECT_GT(e->status().host_tier.stored_blocks, 4);
}

}  // namespace
}  // namespace keel::test
