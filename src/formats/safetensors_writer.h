// Writes a .safetensors file: the header first, then tensor bytes that callers write,
// from any thread, at the offsets the layout planned (so large models stream to disk).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "formats/output_file.h"
#include "formats/tensor_spec.h"

namespace keel {

class SafetensorsWriter {
 public:
  // Only F32, F16, BF16, I32 and I8 tensors (throws Error(kInvalidArgument) otherwise).
  SafetensorsWriter(const std::filesystem::path &path, std::vector<TensorSpec> tensors,
                    const std::map<std::string, std::string> &metadata = {{"format", "pt"}});

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
