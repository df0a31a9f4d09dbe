// Rewrites a model's safetensors file tensor by tensor, for tests that need a malformed
// file (a tensor dropped or mis-shaped) or chosen weights (an MTP layer wired to copy the
// target's prediction).
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "formats/safetensors_writer.h"

namespace keel::test {

// One tensor as stored: `bytes` in `dtype` (F32 or BF16 only).
struct StoredTensor {
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::string bytes;
};

// Passes every tensor of `file` through `edit`, which may change it in place (any shape
// that its bytes cover) or return false to drop it, then writes the file again.
inline void rewrite_safetensors(
    const std::filesystem::path &file,
    const std::function<bool(const std::string &name, StoredTensor &t)> &edit) {
  std::ifstream in(file, std::ios::binary);
  std::uint64_t hlen = 0;
  in.read(reinterpret_cast<char *>(&hlen), 8);
  std::string header(hlen, '\0');
  in.read(header.data(), static_cast<std::streamsize>(hlen));
  const std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const nlohmann::json h = nlohmann::json::parse(header);
  std::vector<TensorSpec> specs;
  std::vector<StoredTensor> kept;
  for (const auto &[name, meta] : h.items()) {
    if (name == "__metadata__") continue;
    StoredTensor t;
    t.dtype = meta["dtype"] == "BF16" ? DType::kBF16 : DType::kF32;
    t.shape = meta["shape"].get<std::vector<std::int64_t>>();
    const std::size_t a = meta["data_offsets"][0], b = meta["data_offsets"][1];
    t.bytes = body.substr(a, b - a);
    if (!edit(name, t)) continue;
    specs.push_back({name, t.dtype, t.shape});
    kept.push_back(std::move(t));
  }
  const auto tmp = file.parent_path() / (file.filename().string() + ".tmp");
  {
    SafetensorsWriter w(tmp, specs);
    for (std::size_t i = 0; i < kept.size(); ++i)
      w.write(i, 0, std::as_bytes(std::span<const char>(kept[i].bytes)));
    w.commit();
  }
  std::filesystem::rename(tmp, file);
}

// The values of a stored F32 tensor, and new ones for it.
inline std::vector<float> f32_values(const StoredTensor &t) {
  std::vector<float> v(t.bytes.size() / sizeof(float));
  std::memcpy(v.data(), t.bytes.data(), v.size() * sizeof(float));
  return v;
}
inline void set_f32_values(StoredTensor &t, const std::vector<float> &v) {
  t.dtype = DType::kF32;
  t.bytes.assign(reinterpret_cast<const char *>(v.data()), v.size() * sizeof(float));
}

}  // namespace keel::test
