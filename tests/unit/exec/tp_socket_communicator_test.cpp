// The CPU communicator with ranks as threads over socketpairs: sums, broadcasts and
// messages, and the bounded failures (a closed peer, a stalled peer).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "exec/parallel/socket_communicator.h"

namespace keel::parallel {
namespace {

using namespace std::chrono_literals;

// A star of `n` communicators, rank 0 at its centre.
std::vector<std::unique_ptr<SocketCommunicator>> make_star(int n, std::chrono::milliseconds t) {
  std::vector<int> hub;
  std::vector<int> leaf;
  for (int r = 1; r < n; ++r) {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    hub.push_back(sv[0]);
    leaf.push_back(sv[1]);
  }
  SocketCommunicatorOptions o;
  o.op_timeout = t;
  std::vector<std::unique_ptr<SocketCommunicator>> c;
  c.push_back(std::make_unique<SocketCommunicator>(0, n, hub, o));
  for (int r = 1; r < n; ++r)
    c.push_back(std::make_unique<SocketCommunicator>(r, n, std::vector<int>{leaf[r - 1]}, o));
  return c;
}

// Runs fn(rank) on one thread per rank.
template <typename F>
void on_all(int n, F fn) {
  std::vector<std::thread> t;
  for (int r = 0; r < n; ++r) t.emplace_back([&, r] { fn(r); });
  for (auto &th : t) th.join();
}

TEST(TpSocketCommunicator, AllReduceF32IsTheSameSumOnEveryRank) {
  for (int n : {1, 2, 4}) {
    auto comms = make_star(n, 5000ms);
    const std::size_t count = 100000;  // larger than a socket buffer
    std::vector<std::vector<float>> buf(n, std::vector<float>(count));
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < count; ++i) buf[r][i] = 0.1f * (r + 1) + 1e-3f * (i % 97);
    on_all(n, [&](int r) { comms[r]->all_reduce_sum(buf[r].data(), count, DType::kF32); });
    for (std::size_t i = 0; i < count; i += 997) {
      float want = 0;  // in rank order, as documented
      for (int r = 0; r < n; ++r) want += 0.1f * (r + 1) + 1e-3f * (i % 97);
      EXPECT_NEAR(buf[0][i], want, 1e-5f);
    }
    for (int r = 1; r < n; ++r)
      EXPECT_EQ(std::memcmp(buf[0].data(), buf[r].data(), count * 4), 0) << "rank " << r;
  }
}

TEST(TpSocketCommunicator, AllReduceBf16) {
  auto comms = make_star(3, 5000ms);
  std::vector<std::vector<std::uint16_t>> buf(3, std::vector<std::uint16_t>(64));
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 64; ++i) buf[r][i] = f32_to_bf16(static_cast<float>(i) * (r + 1));
  on_all(3, [&](int r) { comms[r]->all_reduce_sum(buf[r].data(), 64, DType::kBF16); });
  for (int i = 0; i < 64; ++i) {
    EXPECT_NEAR(bf16_to_f32(buf[2][i]), 6.0f * i, 6.0f * i / 64 + 1e-6f);
    EXPECT_EQ(buf[0][i], buf[2][i]);
  }
  EXPECT_THROW(comms[0]->all_reduce_sum(buf[0].data(), 64, DType::kF16), Error);
}

TEST(TpSocketCommunicator, BroadcastGatherScatterBarrier) {
  auto comms = make_star(4, 5000ms);
  std::vector<std::vector<int>> data(4, std::vector<int>(1000, -1));
  for (int i = 0; i < 1000; ++i) data[2][i] = i * 7;
  std::vector<std::string> got(4);
  std::vector<std::vector<std::string>> gathered(4);
  on_all(4, [&](int r) {
    comms[r]->broadcast(data[r].data(), 4000, 2);  // relayed through rank 0
    std::string msg = r == 0 ? std::string(300000, 'x') : std::string();
    comms[r]->broadcast_message(msg, std::nullopt);
    got[r] = msg;
    gathered[r] = comms[r]->gather("rank" + std::to_string(r));
    std::vector<std::string> parts;
    if (r == 0) parts = {"a", "bb", "", "dddd"};
    got[r] = comms[r]->scatter(parts) + "|" + std::to_string(got[r].size());
    comms[r]->barrier();
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(data[r], data[2]);
  EXPECT_EQ(gathered[0], (std::vector<std::string>{"rank0", "rank1", "rank2", "rank3"}));
  EXPECT_TRUE(gathered[1].empty());
  EXPECT_EQ(got[0], "a|300000");
  EXPECT_EQ(got[1], "bb|300000");
  EXPECT_EQ(got[2], "|300000");
  EXPECT_EQ(got[3], "dddd|300000");
}

TEST(TpSocketCommunicator, DeadPeerFailsAtOnceAndBreaksTheGroup) {
  auto comms = make_star(3, 10000ms);
  comms[2].reset();  // rank 2 "exits": its socket closes
  std::vector<float> x(1000, 1.0f);
  std::thread peer([&] {
    std::vector<float> y(1000, 2.0f);
    EXPECT_THROW(comms[1]->all_reduce_sum(y.data(), y.size(), DType::kF32), Error);
  });
  const auto t0 = std::chrono::steady_clock::now();
  try {
    comms[0]->all_reduce_sum(x.data(), x.size(), DType::kF32);
    ADD_FAILURE() << "no error";
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);  // EOF, not the 10 s deadline
  comms[0].reset();                                      // rank 1 now sees its hub gone
  peer.join();
  EXPECT_TRUE(comms[1]->broken());
}

TEST(TpSocketCommunicator, StalledPeerMissesTheDeadline) {
  auto comms = make_star(2, 300ms);
  std::vector<float> x(16, 1.0f);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    comms[0]->all_reduce_sum(x.data(), x.size(), DType::kF32);  // rank 1 never joins
    ADD_FAILURE() << "no error";
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("deadline"), std::string::npos) << e.what();
  }
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 3s);
  EXPECT_TRUE(comms[0]->broken());
  // Broken: the next call fails at once, without waiting for the deadline again.
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_THROW(comms[0]->barrier(), Error);
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 100ms);
}

TEST(TpSocketCommunicator, OutOfStepMessagesAreDetected) {
  auto comms = make_star(2, 2000ms);
  std::thread peer([&] {
    std::vector<float> y(4, 0.0f);
    try {
      comms[1]->all_reduce_sum(y.data(), 4, DType::kF32);  // while rank 0 gathers
    } catch (const Error &) {
    }
  });
  EXPECT_THROW(comms[0]->gather("x"), Error);
  comms[0].reset();
  peer.join();
}

TEST(TpSocketCommunicator, RejectsBadConstruction) {
  EXPECT_THROW(SocketCommunicator(0, 3, {}), Error);
  EXPECT_THROW(SocketCommunicator(3, 2, {}), Error);
}

}  // namespace
}  // namespace keel::parallel
