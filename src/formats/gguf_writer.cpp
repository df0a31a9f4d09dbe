#include "formats/gguf_writer.h"

#include <cstring>

#include "core/error.h"
#include "formats/gguf.h"

namespace keel {

template <typename T>
void GgufMetadata::put(T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  bytes_.append(b, sizeof(T));
}

void GgufMetadata::str(std::string_view s) {
  put<std::uint64_t>(s.size());
  bytes_.append(s);
}

void GgufMetadata::key(std::string_view k, std::uint32_t type) {
  str(k);
  put<std::uint32_t>(type);
  ++count_;
}

void GgufMetadata::add_u32(std::string_view k, std::uint32_t v) {
  key(k, static_cast<std::uint32_t>(GgufType::kU32));
  put(v);
}
void GgufMetadata::add_i32(std::string_view k, std::int32_t v) {
  key(k, static_cast<std::uint32_t>(GgufType::kI32));
  put(v);
}
void GgufMetadata::add_u64(std::string_view k, std::uint64_t v) {
  key(k, static_cast<std::uint32_t>(GgufType::kU64));
  put(v);
}
void GgufMetadata::add_f32(std::string_view k, float v) {
  key(k, static_cast<std::uint32_t>(GgufType::kF32));
  put(v);
}
void GgufMetadata::add_bool(std::string_view k, bool v) {
  key(k, static_cast<std::uint32_t>(GgufType::kBool));
  put<std::uint8_t>(v ? 1 : 0);
}
void GgufMetadata::add_string(std::string_view k, std::string_view v) {
  key(k, static_cast<std::uint32_t>(GgufType::kString));
  str(v);
}
void GgufMetadata::add_string_array(std::string_view k, const std::vector<std::string> &v) {
  key(k, static_cast<std::uint32_t>(GgufType::kArray));
  put(static_cast<std::uint32_t>(GgufType::kString));
  put<std::uint64_t>(v.size());
  for (const auto &s : v) str(s);
}
void GgufMetadata::add_i32_array(std::string_view k, const std::vector<std::int32_t> &v) {
  key(k, static_cast<std::uint32_t>(GgufType::kArray));
  put(static_cast<std::uint32_t>(GgufType::kI32));
  put<std::uint64_t>(v.size());
  for (auto x : v) put(x);
}
void GgufMetadata::add_f32_array(std::string_view k, const std::vector<float> &v) {
  key(k, static_cast<std::uint32_t>(GgufType::kArray));
  put(static_cast<std::uint32_t>(GgufType::kF32));
  put<std::uint64_t>(v.size());
  for (auto x : v) put(x);
}

GgufWriter::GgufWriter(const std::filesystem::path &path, const GgufMetadata &metadata,
                       std::vector<TensorSpec> tensors)
    : tensors_(std::move(tensors)) {
  std::string head;
  auto put = [&](auto v) {
    char b[sizeof(v)];
    std::memcpy(b, &v, sizeof(v));
    head.append(b, sizeof(v));
  };
  head += "GGUF";
  put(std::uint32_t{3});
  put(static_cast<std::uint64_t>(tensors_.size()));
  put(metadata.count());
  head += metadata.bytes();
  std::uint64_t pos = 0;
  std::vector<std::uint64_t> rel;
  for (const auto &t : tensors_) {
    if (t.shape.empty() || t.shape.size() > 4)
      throw Error(ErrorCode::kInvalidArgument, t.name + ": GGUF tensors have 1 to 4 dimensions");
    put(static_cast<std::uint64_t>(t.name.size()));
    head += t.name;
    put(static_cast<std::uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it)
      put(static_cast<std::uint64_t>(*it));
    put(ggml_from_dtype(t.dtype));
    put(pos);
    rel.push_back(pos);
    pos += (t.nbytes() + kAlignment - 1) / kAlignment * kAlignment;
  }
  head.append((kAlignment - head.size() % kAlignment) % kAlignment, '\0');
  const std::uint64_t data_start = head.size();
  file_ = std::make_unique<OutputFile>(path, data_start + pos);
  file_->write_at(0, std::as_bytes(std::span(head.data(), head.size())));
  for (auto r : rel) offsets_.push_back(data_start + r);
}

void GgufWriter::write(std::size_t index, std::uint64_t offset,
                       std::span<const std::byte> bytes) const {
  if (index >= tensors_.size() || offset > tensors_[index].nbytes() ||
      bytes.size() > tensors_[index].nbytes() - offset)
    throw Error(ErrorCode::kInternal, "gguf writer: write outside tensor " +
                                          (index < tensors_.size() ? tensors_[index].name : "?"));
  file_->write_at(offsets_[index] + offset, bytes);
}

}  // namespace keel
