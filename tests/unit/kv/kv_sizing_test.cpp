// The KV pool sizing rules (kv/kv_sizing.h): explicit overrides, the CPU rule (context x
// sequences, capped by MemAvailable and the budget share) and the GPU rule (a share of
// the device minus what the engine holds), each with its refusal and byte figures.
#include "kv/kv_sizing.h"

#include <gtest/gtest.h>

#include "core/error.h"

using namespace keel;

namespace {
constexpr std::int64_t GiB = std::int64_t{1} << 30;
constexpr std::int64_t MiB = std::int64_t{1} << 20;

// A 1B-shaped model on the CPU: 16 layers x 8 kv heads x 64 dims, f32, K and V.
HostKvInputs host_1b() {
  HostKvInputs in;
  in.block_size = 16;
  in.block_bytes = 16 * 16 * 2 * 8 * 64 * 4;  // 1 MiB a block, 64 KiB a token
  in.context_tokens = 65536;
  in.weights_bytes = 2 * GiB;
  return in;
}
}  // namespace

TEST(KvSizing, ExplicitBlocksWinOverTokensAndEveryCap) {
  HostKvInputs in = host_1b();
  in.mem_available = 1 * GiB;
  in.override_ = {100, 5000};
  KvPlan p = plan_host_kv(in);
  EXPECT_EQ(p.blocks, 100);
  EXPECT_EQ(p.rule, "--kv-blocks");
  EXPECT_TRUE(p.refusal.empty());
  in.override_ = {0, 5000};  // rounded up to whole blocks
  p = plan_host_kv(in);
  EXPECT_EQ(p.blocks, 313);
  EXPECT_EQ(p.tokens(), 5008);
  EXPECT_EQ(p.bytes(), 313 * MiB);
  in.override_ = {-1, 0};
  EXPECT_THROW(plan_host_kv(in), Error);
  // Explicit, but more than the host has: refused with the figures.
  in.override_ = {2048, 0};  // 2 GiB > 1 GiB available
  p = plan_host_kv(in);
  EXPECT_NE(p.refusal.find("2048 blocks (--kv-blocks), 2.00 GiB (2147483648 bytes)"),
            std::string::npos)
      << p.refusal;
  EXPECT_NE(p.refusal.find("(1073741824 bytes) available"), std::string::npos) << p.refusal;
}

TEST(KvSizing, HostDefaultIsFourFullContextsWhenRamAllows) {
  HostKvInputs in = host_1b();
  in.mem_available = 64 * GiB;  // half is 32 GiB: 4 x 65536 tokens x 64 KiB = 16 GiB fits
  const KvPlan p = plan_host_kv(in);
  EXPECT_EQ(p.tokens(), 4 * 65536);
  EXPECT_EQ(p.bytes(), 16 * GiB);
  EXPECT_EQ(p.rule, "4 x context");
  EXPECT_TRUE(p.refusal.empty());
  EXPECT_EQ(offered_context(65536, p.tokens()), 65536);
}

TEST(KvSizing, HostPoolCappedByHalfOfMemAvailableInWholeBlocks) {
  HostKvInputs in = host_1b();
  in.mem_available = 10 * GiB + 123;  // half: 5 GiB and change -> 5120 whole blocks
  const KvPlan p = plan_host_kv(in);
  EXPECT_EQ(p.blocks, 5120);
  EXPECT_EQ(p.rule, "MemAvailable");
  EXPECT_LE(p.bytes(), in.mem_available / 2);
  // A 20,000-token prompt still fits one sequence: the context offered is the model's.
  EXPECT_EQ(offered_context(65536, p.tokens()), 65536);
  // Two models split the cap as they split a budget.
  in.ram_share = 0.5;
  EXPECT_EQ(plan_host_kv(in).blocks, 2560);
}

TEST(KvSizing, HostPoolCappedByBudgetShareAfterWeightsAndWorkspace) {
  HostKvInputs in = host_1b();
  in.mem_available = 64 * GiB;
  in.budget_share = 3 * GiB;
  in.other_bytes = 256 * MiB;
  const KvPlan p = plan_host_kv(in);
  EXPECT_EQ(p.rule, "budget");
  EXPECT_EQ(p.bytes(), 3 * GiB - 2 * GiB - 256 * MiB);
  EXPECT_EQ(in.weights_bytes + in.other_bytes + p.bytes(), in.budget_share);  // adds up
  EXPECT_EQ(offered_context(65536, p.tokens()), 768 * 16);  // capped by one sequence's room
}

TEST(KvSizing, HostRefusesAShareTooSmallForWeightsAndAMinimalPool) {
  HostKvInputs in = host_1b();
  in.mem_available = 64 * GiB;
  in.budget_share = 2 * GiB + 10 * MiB;  // room for 10 blocks; the floor is 128
  const KvPlan p = plan_host_kv(in);
  ASSERT_FALSE(p.refusal.empty());
  EXPECT_NE(p.refusal.find("2147483648 bytes"), std::string::npos) << p.refusal;  // weights
  EXPECT_NE(p.refusal.find("share of the memory budget"), std::string::npos) << p.refusal;
  EXPECT_NE(p.refusal.find(std::to_string(2 * GiB + 128 * MiB) + " bytes"), std::string::npos)
      << p.refusal;  // what it needs in all
}

TEST(KvSizing, HostShortContextGetsTheDefaultMinimumUnlessCapped) {
  HostKvInputs in = host_1b();
  in.context_tokens = 1024;  // 4 x 1024 is less than the old fixed default of 16,384 tokens
  KvPlan p = plan_host_kv(in);
  EXPECT_EQ(p.tokens(), kHostMinDefaultTokens);
  EXPECT_EQ(p.rule, "default minimum");
  in.context_tokens = 8192;  // 4 x 8192 is more
  p = plan_host_kv(in);
  EXPECT_EQ(p.tokens(), 4 * 8192);
}

TEST(KvSizing, HostShortContextFloorIsTheContext) {
  HostKvInputs in = host_1b();
  in.context_tokens = 512;
  in.budget_share = 2 * GiB + 32 * MiB;  // 32 blocks = 512 tokens: exactly one sequence
  const KvPlan p = plan_host_kv(in);
  EXPECT_TRUE(p.refusal.empty()) << p.refusal;
  EXPECT_EQ(p.blocks, 32);
}

// An 8B-shaped model on a 141 GB H200: bf16 KV, 32 layers x 8 kv heads x 128 dims.
namespace {
DeviceKvInputs h200_8b() {
  DeviceKvInputs in;
  in.block_size = 16;
  in.block_bytes = 16 * 32 * 2 * 8 * 128 * 2;  // 2 MiB a block
  in.total_bytes = 140 * GiB;
  in.free_at_open = 139 * GiB;         // 1 GiB: this process's context
  in.free_now = 139 * GiB - 18 * GiB;  // 16 GiB weights, 2 GiB activations and sampler
  return in;
}
}  // namespace

TEST(KvSizing, DeviceTakesItsShareMinusWhatItHolds) {
  const DeviceKvInputs in = h200_8b();
  const KvPlan p = plan_device_kv(in);
  EXPECT_TRUE(p.refusal.empty()) << p.refusal;
  const auto share = static_cast<std::int64_t>(140 * GiB * 0.9);
  EXPECT_EQ(p.blocks, (share - 18 * GiB - kDeviceReserveBytes) / (2 * MiB));
  EXPECT_GT(p.blocks, 40000);  // more than the best hand-picked --kv-blocks on the issue
  EXPECT_LE(p.bytes() + 18 * GiB + kDeviceReserveBytes, share);
  EXPECT_EQ(offered_context(131072, p.tokens()), 131072);
}

TEST(KvSizing, DeviceNeverTakesMoreThanIsFreeNow) {
  DeviceKvInputs in = h200_8b();
  in.fraction = 1.0;
  in.free_at_open = 140 * GiB;
  in.free_now = 10 * GiB;  // someone else allocated meanwhile
  const KvPlan p = plan_device_kv(in);
  EXPECT_EQ(p.blocks, (10 * GiB - kDeviceReserveBytes) / (2 * MiB));
}

TEST(KvSizing, TwoSharesOnOneDeviceAndAThirdRefused) {
  DeviceKvInputs a = h200_8b();
  a.fraction = 0.45;
  const KvPlan pa = plan_device_kv(a);
  ASSERT_TRUE(pa.refusal.empty()) << pa.refusal;
  const std::int64_t a_holds = 18 * GiB + pa.bytes();
  DeviceKvInputs b = h200_8b();
  b.fraction = 0.45;
  b.free_at_open = a.free_at_open - a_holds;
  b.free_now = b.free_at_open - 18 * GiB;
  const KvPlan pb = plan_device_kv(b);
  ASSERT_TRUE(pb.refusal.empty()) << pb.refusal;
  EXPECT_EQ(pb.blocks, pa.blocks);  // the order does not matter
  DeviceKvInputs c = h200_8b();
  c.fraction = 0.3;
  c.free_at_open = b.free_at_open - 18 * GiB - pb.bytes();
  c.free_now = c.free_at_open;
  const KvPlan pc = plan_device_kv(c);
  ASSERT_FALSE(pc.refusal.empty());
  EXPECT_NE(pc.refusal.find("only"), std::string::npos);
  EXPECT_NE(pc.refusal.find(std::to_string(c.total_bytes - c.free_at_open) + " bytes) is held"),
            std::string::npos)
      << pc.refusal;
}

TEST(KvSizing, DeviceShareSmallerThanTheWeightsIsRefused) {
  DeviceKvInputs in = h200_8b();
  in.fraction = 0.1;  // 14 GiB: less than 18 GiB of weights and buffers
  const KvPlan p = plan_device_kv(in);
  EXPECT_EQ(p.blocks, 0);
  EXPECT_NE(p.refusal.find("no room for a KV pool"), std::string::npos) << p.refusal;
  in.fraction = 0;
  EXPECT_THROW(plan_device_kv(in), Error);
  in.fraction = 1.5;
  EXPECT_THROW(plan_device_kv(in), Error);
}

// A Qwen3-30B-A3B-sized mixture of experts (61 GB of bf16 weights, 48 layers x 4 kv heads)
// whose share (0.3 of the device) is smaller than its weights: with its context given, it
// takes a minimal pool beyond the share when the device has it free, and otherwise the
// refusal names the bytes it needs.
TEST(KvSizing, DeviceModelLargerThanItsShareTakesAMinimalPoolBeyondIt) {
  DeviceKvInputs in = h200_8b();
  in.block_bytes = 16 * 48 * 2 * 4 * 128 * 2;  // 1.5 MiB a block
  in.fraction = 0.3;                           // 42 GiB
  in.free_now = in.free_at_open - 62 * GiB;    // weights and buffers
  EXPECT_NE(plan_device_kv(in).refusal.find("no room for a KV pool"), std::string::npos);
  in.context_tokens = 40960;
  KvPlan p = plan_device_kv(in);
  EXPECT_TRUE(p.refusal.empty()) << p.refusal;
  EXPECT_EQ(p.tokens(), kMinPoolTokens);
  EXPECT_EQ(p.rule, "beyond the device share");
  in.context_tokens = 100;  // a short context needs only its own blocks
  EXPECT_EQ(plan_device_kv(in).blocks, 7);
  in.context_tokens = 40960;
  in.free_now = kDeviceReserveBytes + 100 * MiB;  // less than 128 blocks of 1.5 MiB
  p = plan_device_kv(in);
  EXPECT_EQ(p.blocks, 0);
  const std::int64_t need =
      (in.free_at_open - in.free_now) + 128 * in.block_bytes + kDeviceReserveBytes;
  EXPECT_NE(p.refusal.find("needs " + describe_bytes(need)), std::string::npos) << p.refusal;
}

TEST(KvSizing, DeviceExplicitBlocksThatDoNotFitAreRefused) {
  DeviceKvInputs in = h200_8b();
  in.override_.blocks = 40000;  // 78 GiB: fits in 121 GiB free
  EXPECT_TRUE(plan_device_kv(in).refusal.empty());
  in.override_.blocks = 100000;  // 195 GiB
  EXPECT_FALSE(plan_device_kv(in).refusal.empty());
}

TEST(KvSizing, DescribeBytesGivesBoth) {
  EXPECT_EQ(describe_bytes(3 * GiB / 2), "1.50 GiB (1610612736 bytes)");
  EXPECT_EQ(describe_bytes(9178512), "8.75 MiB (9178512 bytes)");
  EXPECT_EQ(describe_bytes(2048), "2.00 KiB (2048 bytes)");
  EXPECT_TRUE(host_mem_available().value_or(1) > 0);
}

// The check the engine makes before its weights load (a share another process holds is
// a refusal with figures, not an out-of-memory crash in the upload).
TEST(KvSizing, ShareCheckedBeforeTheWeightsLoad) {
  constexpr std::int64_t GiB = 1LL << 30;
  EXPECT_EQ(device_share_refusal(140 * GiB, 130 * GiB, 0.9), "");  // 126 GiB share is free
  const std::string r = device_share_refusal(140 * GiB, 12 * GiB, 0.3);
  EXPECT_NE(r.find("42.00 GiB"), std::string::npos) << r;   // the share
  EXPECT_NE(r.find("12.00 GiB"), std::string::npos) << r;   // what is free
  EXPECT_NE(r.find("128.00 GiB"), std::string::npos) << r;  // what others hold
  // plan_device_kv gives the same refusal once the engine is up.
  DeviceKvInputs in;
  in.block_bytes = 2 << 20;
  in.total_bytes = 140 * GiB;
  in.free_at_open = 12 * GiB;
  in.free_now = 11 * GiB;
  in.fraction = 0.3;
  EXPECT_EQ(plan_device_kv(in).refusal, r);
}
