#include "exec/parallel/socket_communicator.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"

namespace keel::parallel {

namespace {

constexpr std::uint32_t kMagic = 0x3150544b;  // "KTP1"

struct Header {
  std::uint32_t magic;
  std::uint32_t tag;
  std::uint64_t bytes;
};

// Milliseconds poll() may wait: -1 without a deadline, else the time left (>= 0).
int poll_ms(std::optional<SocketCommunicator::Clock::time_point> deadline) {
  if (!deadline) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        *deadline - SocketCommunicator::Clock::now())
                        .count();
  if (left <= 0) return 0;
  return left > 1000 ? 1000 : static_cast<int>(left) + 1;
}

bool past(std::optional<SocketCommunicator::Clock::time_point> deadline) {
  return deadline && SocketCommunicator::Clock::now() >= *deadline;
}

}  // namespace

SocketCommunicator::SocketCommunicator(int rank, int size, std::vector<int> peer_fds,
                                       SocketCommunicatorOptions options)
    : rank_(rank), size_(size), fds_(std::move(peer_fds)), options_(options) {
  const std::size_t want = rank == 0 ? static_cast<std::size_t>(size - 1) : 1;
  if (size < 1 || rank < 0 || rank >= size || fds_.size() != want) {
    for (int fd : fds_) ::close(fd);
    fds_.clear();
    throw Error(ErrorCode::kInvalidArgument, "tp communicator: rank " + std::to_string(rank) +
                                                 " of " + std::to_string(size) + " with " +
                                                 std::to_string(want) + " sockets expected");
  }
}

SocketCommunicator::~SocketCommunicator() {
  for (int fd : fds_) ::close(fd);
}

int SocketCommunicator::fd_of(int peer) const {
  return rank_ == 0 ? fds_[static_cast<std::size_t>(peer - 1)] : fds_[0];
}

void SocketCommunicator::check_usable(const char *op) const {
  if (broken())
    throw Error(ErrorCode::kUnavailable,
                std::string("tp communicator: ") + op + " on a broken group: " + broken_why_);
}

void SocketCommunicator::fail(int peer, const char *op, const std::string &why) {
  std::string msg = "tp rank " + std::to_string(rank_) + ": " + op + " with rank " +
                    std::to_string(peer) + ": " + why;
  if (broken_why_.empty()) broken_why_ = msg;
  throw Error(ErrorCode::kUnavailable, msg);
}

void SocketCommunicator::send_raw(int peer, const void *data, std::size_t n,
                                  std::optional<Clock::time_point> deadline, const char *op) {
  const int fd = fd_of(peer);
  const char *p = static_cast<const char *>(data);
  while (n > 0) {
    pollfd pfd{fd, POLLOUT, 0};
    const int r = ::poll(&pfd, 1, poll_ms(deadline));
    if (r < 0 && errno != EINTR) fail(peer, op, std::string("poll: ") + std::strerror(errno));
    if (r <= 0) {
      if (past(deadline)) fail(peer, op, "missed the deadline (peer stalled?)");
      continue;
    }
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      fail(peer, op, std::string("peer gone (") + std::strerror(errno) + ")");
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void SocketCommunicator::recv_body(int peer, void *data, std::size_t n,
                                   std::optional<Clock::time_point> deadline, const char *op) {
  const int fd = fd_of(peer);
  char *p = static_cast<char *>(data);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    const int r = ::poll(&pfd, 1, poll_ms(deadline));
    if (r < 0 && errno != EINTR) fail(peer, op, std::string("poll: ") + std::strerror(errno));
    if (r <= 0) {
      if (past(deadline)) fail(peer, op, "missed the deadline (peer stalled?)");
      continue;
    }
    const ssize_t got = ::recv(fd, p, n, MSG_DONTWAIT);
    if (got == 0) fail(peer, op, "peer closed the connection (exited?)");
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      fail(peer, op, std::string("peer gone (") + std::strerror(errno) + ")");
    }
    p += got;
    n -= static_cast<std::size_t>(got);
  }
}

void SocketCommunicator::send(int peer, Tag tag, const void *data, std::size_t n,
                              std::optional<Clock::time_point> deadline, const char *op) {
  const Header h{kMagic, static_cast<std::uint32_t>(tag), n};
  send_raw(peer, &h, sizeof h, deadline, op);
  if (n > 0) send_raw(peer, data, n, deadline, op);
}

std::size_t SocketCommunicator::recv_header(int peer, Tag tag, std::optional<std::size_t> expect,
                                            std::optional<Clock::time_point> deadline,
                                            const char *op) {
  Header h{};
  recv_body(peer, &h, sizeof h, deadline, op);
  if (h.magic != kMagic || h.tag != static_cast<std::uint32_t>(tag))
    fail(peer, op,
         "message out of step (tag " + std::to_string(h.tag) + ", expected " +
             std::to_string(static_cast<std::uint32_t>(tag)) + ")");
  if (h.bytes > options_.max_message_bytes || (expect && h.bytes != *expect))
    fail(peer, op, "message of " + std::to_string(h.bytes) + " bytes does not fit");
  return static_cast<std::size_t>(h.bytes);
}

void SocketCommunicator::all_reduce_sum(void *data, std::size_t count, DType dtype) {
  const char *op = "all_reduce";
  check_usable(op);
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    throw Error(
        ErrorCode::kUnsupported,
        "tp communicator: all_reduce of " + std::string(dtype_name(dtype)) + " (f32 or bf16 only)");
  if (size_ == 1) return;
  const std::size_t esize = dtype == DType::kF32 ? 4 : 2;
  const std::size_t bytes = count * esize;
  const auto deadline = op_deadline();
  if (rank_ != 0) {
    send(0, Tag::kAllReduce, data, bytes, deadline, op);
    recv_header(0, Tag::kAllReduce, bytes, deadline, op);
    recv_body(0, data, bytes, deadline, op);
    return;
  }
  scratch_.resize(bytes);
  for (int r = 1; r < size_; ++r) {  // rank order: the same sum on every rank
    recv_header(r, Tag::kAllReduce, bytes, deadline, op);
    recv_body(r, scratch_.data(), bytes, deadline, op);
    if (dtype == DType::kF32) {
      float *acc = static_cast<float *>(data);
      const float *x = reinterpret_cast<const float *>(scratch_.data());
      for (std::size_t i = 0; i < count; ++i) acc[i] += x[i];
    } else {
      auto *acc = static_cast<std::uint16_t *>(data);
      const auto *x = reinterpret_cast<const std::uint16_t *>(scratch_.data());
      for (std::size_t i = 0; i < count; ++i)
        acc[i] = f32_to_bf16(bf16_to_f32(acc[i]) + bf16_to_f32(x[i]));
    }
  }
  for (int r = 1; r < size_; ++r) send(r, Tag::kAllReduce, data, bytes, deadline, op);
}

void SocketCommunicator::broadcast(void *data, std::size_t bytes, int root) {
  const char *op = "broadcast";
  check_usable(op);
  if (root < 0 || root >= size_)
    throw Error(ErrorCode::kInvalidArgument, "tp communicator: broadcast root out of range");
  if (size_ == 1) return;
  const auto deadline = op_deadline();
  if (rank_ == 0) {
    if (root != 0) {  // relayed through the hub
      recv_header(root, Tag::kBroadcast, bytes, deadline, op);
      recv_body(root, data, bytes, deadline, op);
    }
    for (int r = 1; r < size_; ++r)
      if (r != root) send(r, Tag::kBroadcast, data, bytes, deadline, op);
    return;
  }
  if (rank_ == root) {
    send(0, Tag::kBroadcast, data, bytes, deadline, op);
    return;
  }
  recv_header(0, Tag::kBroadcast, bytes, deadline, op);
  recv_body(0, data, bytes, deadline, op);
}

void SocketCommunicator::barrier() {
  check_usable("barrier");
  gather({});
  std::string none;
  broadcast_message(none, op_deadline());
}

void SocketCommunicator::broadcast_message(std::string &message,
                                           std::optional<Clock::time_point> deadline) {
  const char *op = "broadcast_message";
  check_usable(op);
  if (size_ == 1) return;
  if (rank_ == 0) {
    for (int r = 1; r < size_; ++r)
      send(r, Tag::kMessage, message.data(), message.size(), deadline, op);
    return;
  }
  const std::size_t n = recv_header(0, Tag::kMessage, std::nullopt, deadline, op);
  message.resize(n);
  // The body follows its header at once: a deadline from here, even for a worker
  // that waited without one for the header.
  recv_body(0, message.data(), n, deadline ? deadline : op_deadline(), op);
}

std::vector<std::string> SocketCommunicator::gather(std::string mine) {
  const char *op = "gather";
  check_usable(op);
  const auto deadline = op_deadline();
  if (rank_ != 0) {
    send(0, Tag::kGather, mine.data(), mine.size(), deadline, op);
    return {};
  }
  std::vector<std::string> all(static_cast<std::size_t>(size_));
  all[0] = std::move(mine);
  for (int r = 1; r < size_; ++r) {
    all[r].resize(recv_header(r, Tag::kGather, std::nullopt, deadline, op));
    recv_body(r, all[r].data(), all[r].size(), deadline, op);
  }
  return all;
}

std::string SocketCommunicator::scatter(std::vector<std::string> parts) {
  const char *op = "scatter";
  check_usable(op);
  const auto deadline = op_deadline();
  if (rank_ != 0) {
    std::string mine(recv_header(0, Tag::kScatter, std::nullopt, deadline, op), '\0');
    recv_body(0, mine.data(), mine.size(), deadline, op);
    return mine;
  }
  if (parts.size() != static_cast<std::size_t>(size_))
    throw Error(ErrorCode::kInvalidArgument, "tp communicator: scatter needs one part per rank");
  for (int r = 1; r < size_; ++r)
    send(r, Tag::kScatter, parts[r].data(), parts[r].size(), deadline, op);
  return std::move(parts[0]);
}

}  // namespace keel::parallel
