#include "engine/ipc_frame.h"

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
      if (errno == ECONNRESET && got == 0 && eof_ok) return false;
      throw Error(ErrorCode::kUnavailable, std::string("ipc: read: ") + std::strerror(errno));
    }
    got += static_cast<std::size_t>(r);
  }
  return true;
}

}  // namespace

bool FrameWriter::write(FrameType type, const std::string &payload) {
  if (payload.size() > kMaxFrameBytes) return false;
  char header[5];
  const auto len = static_cast<std::uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) header[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  header[4] = static_cast<char>(type);
  std::lock_guard lock(mu_);
  auto send_all = [&](const char *p, std::size_t n) {
    while (n > 0) {
      ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL);
      if (w < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      p += w;
      n -= static_cast<std::size_t>(w);
    }
    return true;
  };
  return send_all(header, sizeof header) && send_all(payload.data(), payload.size());
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
