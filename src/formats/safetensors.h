// safetensors reader: one file, or a sharded model (model.safetensors.index.json).
// Tensors are views into memory mappings (zero copy). The header is validated before
// use: offsets inside the file, byte sizes equal to numel * element size, no overlaps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor_view.h"
#include "formats/mapped_file.h"

namespace keel {

struct SafetensorsTensor {
  std::string name;
  std::string dtype_name;      // as the header spells it ("BF16", "I64", ...)
  std::optional<DType> dtype;  // nullopt: listed, but keel cannot compute with it
  std::vector<std::int64_t> shape;
  const std::byte *data = nullptr;
  std::size_t nbytes = 0;
  std::uint64_t begin = 0;  // data_offsets, relative to the data section
};

// One .safetensors file.
class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::filesystem::path &path);
  // Parses bytes that the caller keeps alive (tests, fuzzing); `origin` names them.
  static std::unique_ptr<SafetensorsFile> parse(std::span<const std::byte> bytes,
                                                const std::string &origin);

  const std::string &path() const { return origin_; }
  const std::vector<SafetensorsTensor> &tensors() const { return tensors_; }
  const SafetensorsTensor *find(std::string_view name) const;
  const std::map<std::string, std::string> &metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  void parse_bytes(std::span<const std::byte> bytes);

  MappedFile map_;
  std::string origin_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// A model's weights in one or several safetensors files.
class SafetensorsModel {
 public:
  // `path`: a .safetensors file, a model.safetensors.index.json, or a directory holding
  // either (the index wins when both exist).
  static std::unique_ptr<SafetensorsModel> open(const std::filesystem::path &path);

  const SafetensorsTensor *find(std::string_view name) const;
  // A view of a supported tensor; throws kNotFound / kUnsupported naming it and the file.
  TensorView view(std::string_view name) const;
  static TensorView view(const SafetensorsTensor &t, const std::string &origin);
  std::vector<std::string> names() const;
  const std::vector<std::unique_ptr<SafetensorsFile>> &files() const { return files_; }
  const std::string &origin() const { return origin_; }

 private:
  std::string origin_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<const SafetensorsTensor *, const SafetensorsFile *>, std::less<>>
      index_;
};

// The dtype string of a safetensors header for a keel dtype ("F32", "F16", "BF16").
std::string_view safetensors_dtype_name(DType t);

}  // namespace keel
