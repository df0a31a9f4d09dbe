// CudaKvStore's batched asynchronous transfers: bit-exact round trips of random block
// subsets (both copy methods, pinned and pageable host memory), ordering against the
// compute stream both ways without host syncs, polling, and rejection of bad arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>
#include <thread>

#include "cuda_test_util.h"
#include "exec/cuda/cuda_model_runner.h"
#include "stream_blocker.h"
#include "tiny_llama.h"

namespace keel::cuda {
namespace {

using namespace std::chrono_literals;
using Method = CudaKvStore::CopyMethod;

KvLayout small_layout() {
  KvLayout l;
  l.num_layers = 3;
  l.block_size = 4;
  l.num_kv_heads = 2;
  l.head_dim = 32;
  return l;
}

void fill_random(std::span<std::byte> bytes, std::mt19937_64 &rng) {
  for (auto &b : bytes) b = static_cast<std::byte>(rng());
}

// Random subset of [0, n) of size k: shuffled, with a sorted stretch so that runs of
// consecutive ids (merged copies) and single blocks both occur.
std::vector<std::int32_t> random_subset(int n, int k, std::mt19937_64 &rng) {
  std::vector<std::int32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  ids.resize(k);
  std::sort(ids.begin(), ids.begin() + k / 2);
  return ids;
}

void poll_until_done(KvBlockStore &kv, KvBlockStore::TransferId id) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!kv.transfer_done(id)) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "transfer never finished";
    std::this_thread::sleep_for(50us);
  }
}

void round_trip(Method method, bool pinned) {
  CudaContext ctx;
  const int n = 48;
  CudaKvStore kv(ctx, small_layout(), n);
  kv.set_copy_method(method);
  const std::size_t bb = kv.block_bytes();
  std::mt19937_64 rng(pinned ? 11 : 12);
  // The expected device image, kept on the host.
  std::vector<std::byte> model(n * bb);
  fill_random(model, rng);
  std::shared_ptr<std::byte[]> pin = kv.allocate_host(n * bb);
  std::vector<std::byte> pageable(n * bb);
  std::byte *host = pinned ? pin.get() : pageable.data();
  // Load everything, in a shuffled order.
  {
    auto all = random_subset(n, n, rng);
    for (int i = 0; i < n; ++i) std::memcpy(host + i * bb, &model[all[i] * bb], bb);
    auto id = kv.begin_load(all, std::span<const std::byte>(host, n * bb));
    kv.wait_transfer(id);
    EXPECT_TRUE(kv.transfer_done(id));
  }
  for (int round = 0; round < 12; ++round) {
    const int k = 1 + static_cast<int>(rng() % n);
    auto ids = random_subset(n, k, rng);
    const std::span<std::byte> buf(host, k * bb);
    if (round % 2 == 0) {  // overwrite a subset with fresh bytes
      fill_random(buf, rng);
      for (int i = 0; i < k; ++i) std::memcpy(&model[ids[i] * bb], host + i * bb, bb);
      auto id = kv.begin_load(ids, buf);
      poll_until_done(kv, id);
    }
    ids = random_subset(n, k, rng);
    std::fill(buf.begin(), buf.end(), std::byte{0xEE});
    auto id = kv.begin_save(ids, buf);
    poll_until_done(kv, id);
    for (int i = 0; i < k; ++i)
      ASSERT_EQ(0, std::memcmp(host + i * bb, &model[ids[i] * bb], bb))
          << "round " << round << " block " << ids[i];
  }
  EXPECT_EQ(kv.transfers_in_flight(), 0u);
}

TEST(CudaKvTransfer, RoundTripRandomSubsetsPerRunCopies) {
  KEEL_REQUIRE_CUDA_DEVICE();
  round_trip(Method::kPerRun, true);
}

TEST(CudaKvTransfer, RoundTripRandomSubsetsBatchCopies) {
  KEEL_REQUIRE_CUDA_DEVICE();
  round_trip(Method::kBatch, true);
}

TEST(CudaKvTransfer, RoundTripPageableHostMemory) {
  KEEL_REQUIRE_CUDA_DEVICE();
  round_trip(Method::kPerRun, false);
}

// A save waits for compute work issued before it; a load waits for it too, and compute
// work issued after a load sees the loaded bytes, with no host sync in between.
TEST(CudaKvTransfer, OrderedWithTheComputeStreamBothWays) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  KvLayout l;  // 2 MiB blocks (the 8B shape): a large load that an unordered read would race
  l.num_layers = 32;
  l.block_size = 16;
  l.num_kv_heads = 8;
  l.head_dim = 128;
  const int n = 64;
  CudaKvStore kv(ctx, l, n);
  const std::size_t bb = kv.block_bytes();
  std::vector<std::int32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937_64 rng(5);
  std::shuffle(ids.begin(), ids.end(), rng);
  auto host = kv.allocate_host(n * bb);
  const std::span<std::byte> buf(host.get(), n * bb);

  // Save after a (blocked) compute write.
  {
    test::StreamBlocker blocker(ctx);
    KEEL_CUDA_CHECK(cudaMemsetAsync(kv.data(), 0x5A, n * bb, ctx.compute().get("cudaMemsetAsync")));
    const auto id = kv.begin_save(ids, buf);
    std::this_thread::sleep_for(100ms);
    EXPECT_FALSE(kv.transfer_done(id)) << "save ran before earlier compute work";
    EXPECT_EQ(kv.transfers_in_flight(), 1u);
    blocker.release();
    poll_until_done(kv, id);
    EXPECT_TRUE(
        std::all_of(buf.begin(), buf.end(), [](std::byte b) { return b == std::byte{0x5A}; }));
  }
  // Load after blocked compute work, then a compute-stream read of every block.
  fill_random(buf, rng);
  DeviceBuffer readback(n * bb);
  KEEL_CUDA_CHECK(
      cudaMemsetAsync(readback.data(), 0, n * bb, ctx.compute().get("cudaMemsetAsync")));
  KvBlockStore::TransferId id = 0;
  {
    test::StreamBlocker blocker(ctx);
    id = kv.begin_load(ids, buf);
    std::this_thread::sleep_for(100ms);
    EXPECT_FALSE(kv.transfer_done(id)) << "load overtook earlier compute work";
    blocker.release();
  }
  KEEL_CUDA_CHECK(cudaMemcpyAsync(readback.data(), kv.data(), n * bb, cudaMemcpyDeviceToDevice,
                                  ctx.compute().get("cudaMemcpyAsync")));
  const auto got = test::download<std::byte>(ctx, readback, n * bb);
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(0, std::memcmp(&got[std::size_t(ids[i]) * bb], buf.data() + i * bb, bb))
        << "block " << ids[i];
  EXPECT_TRUE(kv.transfer_done(id));
}

CudaRunnerOptions runner_options() {
  CudaRunnerOptions o;
  o.block_size = 4;
  o.num_kv_blocks = 64;
  o.max_batch_tokens = 64;
  o.max_seqs = 8;
  o.max_logits_rows = 8;
  o.max_model_len = 128;
  return o;
}

ForwardBatch one_seq(const std::vector<TokenId> &tokens, int from, int n,
                     const std::vector<int> &blocks, SequenceSlice::Logits logits) {
  ForwardBatch b;
  SequenceSlice s;
  s.token_offset = 0;
  s.num_tokens = n;
  s.start_pos = from;
  s.block_offset = 0;
  s.num_blocks = (from + n + 3) / 4;
  s.logits = logits;
  for (int i = 0; i < s.num_blocks; ++i) b.block_table.push_back(blocks[i]);
  b.tokens.assign(tokens.begin() + from, tokens.begin() + from + n);
  b.seqs.push_back(s);
  return b;
}

// The engine's restore path: snapshot a prefilled prefix, restore it into other blocks
// and decode from there at once; the logits equal those of the computed prefix.
TEST(CudaKvTransfer, ForwardAfterLoadSeesRestoredPrefixWithoutHostSync) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  test::TinyLlama m(61);
  CudaModelRunner runner(
      ctx, m.cfg, [&](const std::string &n) { return m.view(n); }, runner_options());
  KvBlockStore &kv = runner.kv();
  const std::size_t bb = kv.block_bytes();
  std::mt19937 trng(3);
  std::vector<TokenId> a(17);
  for (auto &t : a) t = static_cast<TokenId>(trng() % 512);
  ForwardOutput o;
  runner.forward(one_seq(a, 0, 16, {0, 1, 2, 3, 4}, SequenceSlice::Logits::kNone), o);
  const std::vector<std::int32_t> src = {0, 1, 2, 3}, dst = {40, 17, 33, 8};
  auto snap = kv.allocate_host(4 * bb);
  auto garbage = kv.allocate_host(4 * bb);
  std::mt19937_64 rng(4);
  fill_random({garbage.get(), 4 * bb}, rng);
  // No waits between these: the save, the clobber, the restore and the forward are all
  // ordered by events alone.
  const auto s = kv.begin_save(src, {snap.get(), 4 * bb});
  const auto g = kv.begin_load(dst, {garbage.get(), 4 * bb});
  const auto l = kv.begin_load(dst, {snap.get(), 4 * bb});
  ForwardOutput restored, computed;
  runner.forward(one_seq(a, 16, 1, {40, 17, 33, 8, 9}, SequenceSlice::Logits::kLast), restored);
  runner.forward(one_seq(a, 16, 1, {0, 1, 2, 3, 4}, SequenceSlice::Logits::kLast), computed);
  EXPECT_EQ(restored.logits, computed.logits);
  for (auto id : {s, g, l}) {
    kv.wait_transfer(id);
    EXPECT_TRUE(kv.transfer_done(id));
  }
}

TEST(CudaKvTransfer, RejectsBadArgumentsAndAllocatesPinnedZeroedMemory) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::shared_ptr<std::byte[]> keep;
  {
    CudaKvStore kv(ctx, small_layout(), 8);
    const std::size_t bb = kv.block_bytes();
    auto host = kv.allocate_host(3 * bb);
    EXPECT_TRUE(std::all_of(host.get(), host.get() + 3 * bb,
                            [](std::byte b) { return b == std::byte{0}; }));
    cudaPointerAttributes attr{};
    ASSERT_EQ(cudaPointerGetAttributes(&attr, host.get()), cudaSuccess);
    EXPECT_EQ(attr.type, cudaMemoryTypeHost);
    const std::vector<std::int32_t> ok = {1, 2}, bad = {1, 8}, neg = {-1};
    auto expect_invalid = [](auto &&f) {
      try {
        f();
        ADD_FAILURE() << "accepted bad arguments";
      } catch (const Error &e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      }
    };
    expect_invalid([&] { kv.begin_save(bad, {host.get(), 2 * bb}); });
    expect_invalid([&] { kv.begin_load(neg, {host.get(), bb}); });
    expect_invalid([&] { kv.begin_save(ok, {host.get(), 2 * bb - 1}); });
    expect_invalid([&] { kv.begin_load(ok, {host.get(), 3 * bb}); });
    EXPECT_EQ(kv.transfers_in_flight(), 0u);
    const auto none = kv.begin_save({}, {});
    EXPECT_TRUE(kv.transfer_done(none));
    EXPECT_TRUE(kv.transfer_done(12345));  // never issued: nothing to wait for
    keep = kv.allocate_host(16);
  }
  keep[3] = std::byte{7};  // outlives the store; freed by its deleter
  EXPECT_EQ(keep[3], std::byte{7});
}

}  // namespace
}  // namespace keel::cuda
