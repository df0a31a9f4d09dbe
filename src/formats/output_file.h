// A file written in place by several threads (pwrite at computed offsets), created
// under a temporary name and renamed into place only when complete, so a crash or
// error never leaves a half-written model where a reader would find it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

namespace keel {

class OutputFile {
 public:
  // Creates `<path>.tmp` sized `size` bytes (sparse until written).
  OutputFile(const std::filesystem::path &path, std::uint64_t size);
  ~OutputFile();  // removes the temporary file unless commit() ran
  OutputFile(const OutputFile &) = delete;
  OutputFile &operator=(const OutputFile &) = delete;

  // Thread-safe: writes bytes at an absolute offset. Throws Error(kResourceExhausted)
  // on a full disk and Error(kInternal) on other I/O errors, naming the file.
  void write_at(std::uint64_t offset, std::span<const std::byte> bytes) const;
  // Flushes, closes and renames to the final path.
  void commit();
  std::uint64_t size() const { return size_; }

 private:
  std::filesystem::path path_;
  std::filesystem::path tmp_;
  std::uint64_t size_ = 0;
  int fd_ = -1;
};

}  // namespace keel
