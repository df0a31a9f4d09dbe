// A read-only memory mapping of a whole file (RAII). Tensors of safetensors and GGUF
// files are views into it, so weights are paged in by the OS and never copied.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>

namespace keel {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws Error(kNotFound) when the file is missing, Error(kFormat) when it is not a
  // regular file or cannot be mapped.
  static MappedFile open(const std::filesystem::path &path);

  MappedFile(MappedFile &&other) noexcept;
  MappedFile &operator=(MappedFile &&other) noexcept;
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;
  ~MappedFile();

  const std::byte *data() const { return data_; }
  std::size_t size() const { return size_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::string &path() const { return path_; }

 private:
  void reset() noexcept;

  const std::byte *data_ = nullptr;
  std::size_t size_ = 0;
  std::string path_;
};

}  // namespace keel
