// The NCCL communicator on a real GPU: one rank's collectives, and a rank that never
// joins ending in an error at the deadline instead of a hang. Skips where NCCL or a
// GPU is absent (CI); run on a GPU machine with libnccl.so.2 on the loader's path or
// KEEL_NCCL_LIBRARY.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "exec/parallel/nccl_communicator.h"

namespace keel::parallel {
namespace {

using namespace std::chrono_literals;

struct DeviceBuffer {
  std::shared_ptr<const nccl::Api> api;
  void *p = nullptr;
  DeviceBuffer(std::shared_ptr<const nccl::Api> a, std::size_t bytes) : api(std::move(a)) {
    if (api->Malloc(&p, bytes) != nccl::kCudaSuccess)
      throw Error(ErrorCode::kUnavailable, "cudaMalloc");
  }
  ~DeviceBuffer() { api->Free(p); }
};

void skip_without_nccl() {
  std::string why;
  if (!NcclCommunicator::available(&why)) GTEST_SKIP() << why;
}

TEST(TpNccl, OneRankCollectivesOnTheDevice) {
  skip_without_nccl();
  if (IsSkipped()) return;
  auto api = nccl::load();
  NcclCommunicator c(0, 1, NcclCommunicator::make_unique_id(), 0);
  std::printf("NCCL version code %d\n", c.nccl_version());
  const std::size_t n = 1 << 20;
  std::vector<float> host(n), back(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = 0.5f * static_cast<float>(i % 1000) - 7.0f;
  DeviceBuffer buf(api, n * sizeof(float));
  ASSERT_EQ(api->Memcpy(buf.p, host.data(), n * 4, 4), nccl::kCudaSuccess);
  c.all_reduce_sum(buf.p, n, DType::kF32);
  c.synchronize();
  ASSERT_EQ(api->Memcpy(back.data(), buf.p, n * 4, 4), nccl::kCudaSuccess);
  EXPECT_EQ(back, host);  // the sum over one rank

  std::vector<std::uint16_t> h16(4096), b16(4096);
  for (std::size_t i = 0; i < h16.size(); ++i) h16[i] = f32_to_bf16(static_cast<float>(i) / 7);
  DeviceBuffer buf16(api, h16.size() * 2);
  ASSERT_EQ(api->Memcpy(buf16.p, h16.data(), h16.size() * 2, 4), nccl::kCudaSuccess);
  c.all_reduce_sum(buf16.p, h16.size(), DType::kBF16);
  c.broadcast(buf16.p, h16.size() * 2, 0);
  c.barrier();
  ASSERT_EQ(api->Memcpy(b16.data(), buf16.p, b16.size() * 2, 4), nccl::kCudaSuccess);
  EXPECT_EQ(b16, h16);

  // Throughput of one-rank all-reduces of a 70B-sized activation row ([1, 8192] bf16):
  // only the launch and bookkeeping cost, as there is no peer.
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) c.all_reduce_sum(buf16.p, 4096, DType::kBF16);
  c.synchronize();
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
      1000;
  std::printf("one-rank all_reduce of 4096 bf16: %.2f us each (1000, one sync)\n", us);
  EXPECT_FALSE(c.broken());
}

TEST(TpNccl, JoinsAGroupOfOneThroughTheControlChannel) {
  skip_without_nccl();
  if (IsSkipped()) return;
  SocketCommunicator control(0, 1, {});
  auto c = join_nccl_group(control, 0);
  EXPECT_EQ(c->size(), 1);
  c->barrier();
}

TEST(TpNccl, RankThatNeverJoinsIsAnErrorAtTheDeadline) {
  skip_without_nccl();
  if (IsSkipped()) return;
  NcclOptions o;
  o.init_timeout = 3s;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    NcclCommunicator c(0, 2, NcclCommunicator::make_unique_id(), 0, nullptr,
                       o);  // rank 1 never comes
    FAIL() << "joined a group of two alone";
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    std::printf("%s\n", e.what());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("init of a 2-rank group with one rank gave up after %.2f s\n", s);
  EXPECT_LT(s, 10.0);
}

TEST(TpNccl, WithoutAGpuOrNcclItIsAClearError) {
  std::string why;
  if (NcclCommunicator::available(&why)) GTEST_SKIP() << "NCCL and a GPU are present here";
  EXPECT_FALSE(why.empty());
  try {
    NcclCommunicator c(0, 1, NcclCommunicator::UniqueId{}, 0);
    FAIL();
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("nccl"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace keel::parallel
