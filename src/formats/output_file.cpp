#include "formats/output_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace keel {

OutputFile::OutputFile(const std::filesystem::path &path, std::uint64_t size)
    : path_(path), tmp_(path.string() + ".tmp"), size_(size) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw Error(ErrorCode::kInvalidArgument,
                tmp_.string() + ": cannot create: " + std::strerror(errno));
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    ::unlink(tmp_.c_str());
    throw Error(ErrorCode::kResourceExhausted,
                tmp_.string() + ": cannot size: " + std::strerror(err));
  }
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void OutputFile::write_at(std::uint64_t offset, std::span<const std::byte> bytes) const {
  if (offset > size_ || bytes.size() > size_ - offset)
    throw Error(ErrorCode::kInternal, tmp_.string() + ": write past the planned size");
  const std::byte *p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::pwrite(fd_, p, left, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      throw Error(err == ENOSPC ? ErrorCode::kResourceExhausted : ErrorCode::kInternal,
                  tmp_.string() + ": write failed: " + std::strerror(err));
    }
    p += n;
    offset += static_cast<std::uint64_t>(n);
    left -= static_cast<std::size_t>(n);
  }
}

void OutputFile::commit() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    ::unlink(tmp_.c_str());
    throw Error(ErrorCode::kInternal, tmp_.string() + ": close failed: " + std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) {
    ::unlink(tmp_.c_str());
    throw Error(ErrorCode::kInternal, path_.string() + ": rename failed: " + ec.message());
  }
}

}  // namespace keel
