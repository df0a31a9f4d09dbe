// Builds little-endian byte strings by hand, for tests of binary parsers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace keel::test {

struct ByteBuilder {
  std::string bytes;

  template <typename T>
  ByteBuilder &put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    bytes.append(b, sizeof(T));
    return *this;
  }
  ByteBuilder &raw(std::string_view s) {
    bytes.append(s);
    return *this;
  }
  // A GGUF string: u64 length + bytes.
  ByteBuilder &gstr(std::string_view s) {
    put<std::uint64_t>(s.size());
    return raw(s);
  }
  ByteBuilder &pad_to(std::size_t align) {
    while (bytes.size() % align) bytes.push_back('\0');
    return *this;
  }
  std::span<const std::byte> span() const {
    return {reinterpret_cast<const std::byte *>(bytes.data()), bytes.size()};
  }
};

}  // namespace keel::test
