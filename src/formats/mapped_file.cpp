#include "formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace keel {

MappedFile MappedFile::open(const std::filesystem::path &path) {
  MappedFile f;
  f.path_ = path.string();
  const int fd = ::open(f.path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw Error(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kFormat,
                f.path_ + ": cannot open: " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(ErrorCode::kFormat, f.path_ + ": not a regular file");
  }
  f.size_ = static_cast<std::size_t>(st.st_size);
  if (f.size_ > 0) {
    void *p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw Error(ErrorCode::kFormat, f.path_ + ": cannot map: " + std::strerror(err));
    }
    f.data_ = static_cast<const std::byte *>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
  return f;
}

MappedFile::MappedFile(MappedFile &&other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile &MappedFile::operator=(MappedFile &&other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::reset() noexcept {
  if (data_ != nullptr && size_ > 0) ::munmap(const_cast<std::byte *>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace keel
