#include "formats/safetensors_writer.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/safetensors.h"

namespace keel {

SafetensorsWriter::SafetensorsWriter(const std::filesystem::path &path,
                                     std::vector<TensorSpec> tensors,
                                     const std::map<std::string, std::string> &metadata)
    : tensors_(std::move(tensors)) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t pos = 0;
  std::vector<std::uint64_t> rel;
  for (const auto &t : tensors_) {
    const std::string_view name =
        t.st_dtype.empty() ? safetensors_dtype_name(t.dtype) : std::string_view(t.st_dtype);
    if (name.empty())
      throw Error(ErrorCode::kInvalidArgument, t.name + ": safetensors cannot hold " +
                                                   std::string(dtype_name(t.dtype)) +
                                                   " (quantized types need GGUF)");
    header[t.name] = {
        {"dtype", name}, {"shape", t.shape}, {"data_offsets", {pos, pos + t.nbytes()}}};
    rel.push_back(pos);
    pos += t.nbytes();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // keep the data section 8-byte aligned
  const std::uint64_t data_start = 8 + h.size();
  file_ = std::make_unique<OutputFile>(path, data_start + pos);
  std::string prefix(8, '\0');
  const std::uint64_t n = h.size();
  std::memcpy(prefix.data(), &n, 8);
  prefix += h;
  file_->write_at(0, std::as_bytes(std::span(prefix.data(), prefix.size())));
  for (auto r : rel) offsets_.push_back(data_start + r);
}

void SafetensorsWriter::write(std::size_t index, std::uint64_t offset,
                              std::span<const std::byte> bytes) const {
  if (index >= tensors_.size() || offset > tensors_[index].nbytes() ||
      bytes.size() > tensors_[index].nbytes() - offset)
    throw Error(ErrorCode::kInternal, "safetensors writer: write outside tensor " +
                                          (index < tensors_.size() ? tensors_[index].name : "?"));
  file_->write_at(offsets_[index] + offset, bytes);
}

}  // namespace keel
