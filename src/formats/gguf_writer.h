// Writes a GGUF v3 file: metadata and tensor infos first, then tensor bytes that
// callers write, from any thread, at the (aligned) offsets the layout planned.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/output_file.h"
#include "formats/tensor_spec.h"

namespace keel {

// GGUF key/value metadata, encoded as it is added.
class GgufMetadata {
 public:
  void add_u32(std::string_view key, std::uint32_t v);
  void add_i32(std::string_view key, std::int32_t v);
  void add_u64(std::string_view key, std::uint64_t v);
  void add_f32(std::string_view key, float v);
  void add_bool(std::string_view key, bool v);
  void add_string(std::string_view key, std::string_view v);
  void add_string_array(std::string_view key, const std::vector<std::string> &v);
  void add_i32_array(std::string_view key, const std::vector<std::int32_t> &v);
  void add_f32_array(std::string_view key, const std::vector<float> &v);

  std::uint64_t count() const { return count_; }
  const std::string &bytes() const { return bytes_; }

 private:
  void key(std::string_view k, std::uint32_t type);
  void str(std::string_view s);
  template <typename T>
  void put(T v);

  std::string bytes_;
  std::uint64_t count_ = 0;
};

class GgufWriter {
 public:
  static constexpr std::uint64_t kAlignment = 32;

  // Tensor shapes are row-major (outermost first); the writer reverses them into ne[].
  GgufWriter(const std::filesystem::path &path, const GgufMetadata &metadata,
             std::vector<TensorSpec> tensors);

  const std::vector<TensorSpec> &tensors() const { return tensors_; }
  // Writes bytes of tensor `index` starting `offset` bytes into it. Thread-safe.
  void write(std::size_t index, std::uint64_t offset, std::span<const std::byte> bytes) const;
  void commit() { file_->commit(); }

 private:
  std::vector<TensorSpec> tensors_;
  std::vector<std::uint64_t> offsets_;  // absolute file offsets
  std::unique_ptr<OutputFile> file_;
};

}  // namespace keel
