#include "engine/ipc/frame.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace keel::ipc {

namespace {

// Reads exactly n bytes. Returns false on EOF before the first byte; throws on EOF
// mid-way (a torn frame) or a socket error.
bool read_exact(int fd, char *dst, std::size_t n, bool eof_ok) {
  std::size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, dst + got, n - got);
    if (r == 0) {
      if (got == 0 && eof_ok) return false;
      throw Error(ErrorCode::kFormat, "ipc: peer closed inside a frame");
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        pollfd p{fd, POLLIN, 0};
        ::poll(&p, 1, -1);  // the reader's job is to wait for input; shutdown() wakes it
        continue;
      }
      if (errno == ECONNRESET && got == 0 && eof_ok) return false;
      throw Error(ErrorCode::kUnavailable, std::string("ipc: read: ") + std::strerror(errno));
    }
    got += static_cast<std::size_t>(r);
  }
  return true;
}

}  // namespace

std::string encode_frame(FrameType type, const std::string &payload) {
  std::string out;
  out.reserve(5 + payload.size());
  const auto len = static_cast<std::uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  out.push_back(static_cast<char>(type));
  out += payload;
  return out;
}

bool FrameWriter::write(FrameType type, const std::string &payload) {
  if (payload.size() > kMaxFrameBytes) return false;
  const std::string bytes = encode_frame(type, payload);
  const auto until = std::chrono::steady_clock::now() + timeout_;
  std::lock_guard lock(mu_);
  const char *p = bytes.data();
  std::size_t n = bytes.size();
  while (n > 0) {
    ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd pf{fd_, POLLOUT, 0};
      ::poll(&pf, 1, static_cast<int>(left.count()));
      continue;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

std::optional<Frame> FrameReader::read() {
  unsigned char header[5];
  if (!read_exact(fd_, reinterpret_cast<char *>(header), sizeof header, true)) return std::nullopt;
  std::uint32_t len = 0;
  for (int i = 0; i < 4; ++i) len |= static_cast<std::uint32_t>(header[i]) << (8 * i);
  if (len > kMaxFrameBytes)
    throw Error(ErrorCode::kFormat,
                "ipc: frame of " + std::to_string(len) + " bytes is over the limit");
  if (header[4] < static_cast<unsigned>(FrameType::kHello) ||
      header[4] > static_cast<unsigned>(kLastFrameType))
    throw Error(ErrorCode::kFormat, "ipc: unknown frame type " + std::to_string(header[4]));
  Frame f;
  f.type = static_cast<FrameType>(header[4]);
  f.payload.resize(len);
  if (len > 0) read_exact(fd_, f.payload.data(), len, false);
  return f;
}

}  // namespace keel::ipc
