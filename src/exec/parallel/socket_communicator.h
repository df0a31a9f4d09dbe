// The CPU Communicator: one process per rank, joined in a star of connected Unix
// stream sockets around rank 0 (rank 0 holds one socket per worker; a worker holds
// one, to rank 0). Also the control channel of every tensor-parallel group, CPU or
// GPU: variable-size messages broadcast, gathered and scattered by rank 0.
//
// Why a star through rank 0: the sum is computed once, in rank order
// (((r0 + r1) + r2) + ...), and sent back, so every rank holds the same bits and the
// replicated residual streams never drift apart; and a dead peer shows at once as EOF
// on its socket (no shared memory to poison, no futex that never wakes). The cost,
// 2(N-1) copies of each buffer through rank 0, does not matter on a CPU, whose matmuls
// dominate; GPUs use NCCL for the data plane.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "exec/parallel/communicator.h"

namespace keel::parallel {

struct SocketCommunicatorOptions {
  // Deadline of each operation, from its start.
  std::chrono::milliseconds op_timeout{60000};
  // Largest message accepted (a peer's header is checked before allocating).
  std::size_t max_message_bytes = std::size_t{1} << 31;
};

class SocketCommunicator final : public Communicator {
 public:
  using Clock = std::chrono::steady_clock;

  // Rank 0: peer_fds[r - 1] is the socket to rank r (size = peer_fds.size() + 1).
  // Rank r > 0: peer_fds = {socket to rank 0}. Takes ownership of the fds.
  SocketCommunicator(int rank, int size, std::vector<int> peer_fds,
                     SocketCommunicatorOptions options = {});
  ~SocketCommunicator() override;
  SocketCommunicator(const SocketCommunicator &) = delete;
  SocketCommunicator &operator=(const SocketCommunicator &) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(void *data, std::size_t count, DType dtype) override;
  void broadcast(void *data, std::size_t bytes, int root) override;
  void barrier() override;
  bool broken() const override { return !broken_why_.empty(); }
  const std::string &broken_reason() const { return broken_why_; }

  // ---- control channel (messages of any size) ----
  // Rank 0's `message` reaches every rank. No deadline (nullopt) is for a worker
  // waiting for its next command, which may be hours away; it still ends at once if
  // rank 0 dies.
  void broadcast_message(std::string &message, std::optional<Clock::time_point> deadline);
  // At rank 0, returns every rank's message by rank (its own first); elsewhere, empty.
  std::vector<std::string> gather(std::string mine);
  // At rank 0, parts[r] goes to rank r (returns parts[0]); elsewhere `parts` is ignored.
  std::string scatter(std::vector<std::string> parts);

  void set_op_timeout(std::chrono::milliseconds t) { options_.op_timeout = t; }

 private:
  enum class Tag : std::uint32_t { kAllReduce = 1, kBroadcast, kMessage, kGather, kScatter };

  Clock::time_point op_deadline() const { return Clock::now() + options_.op_timeout; }
  void check_usable(const char *op) const;
  int fd_of(int peer) const;
  void send(int peer, Tag tag, const void *data, std::size_t n,
            std::optional<Clock::time_point> deadline, const char *op);
  // Receives a frame of `tag`; its length must be `expect` unless expect is nullopt.
  std::size_t recv_header(int peer, Tag tag, std::optional<std::size_t> expect,
                          std::optional<Clock::time_point> deadline, const char *op);
  void recv_body(int peer, void *data, std::size_t n, std::optional<Clock::time_point> deadline,
                 const char *op);
  void send_raw(int peer, const void *data, std::size_t n,
                std::optional<Clock::time_point> deadline, const char *op);
  [[noreturn]] void fail(int peer, const char *op, const std::string &why);

  int rank_, size_;
  std::vector<int> fds_;
  SocketCommunicatorOptions options_;
  std::string broken_why_;
  std::vector<std::byte> scratch_;  // rank 0: one peer's all-reduce contribution
};

}  // namespace keel::parallel
