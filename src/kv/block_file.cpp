#include "kv/block_file.h"

#include <xxhash.h>

#include <cstring>

namespace keel {
namespace {

constexpr std::uint64_t kMagic = 0x3142564b4c45454bULL;  // "KEELKVB1" little-endian

template <typename T>
void put(std::span<std::byte> h, std::size_t at, T v) {
  std::memcpy(h.data() + at, &v, sizeof v);
}
template <typename T>
T get(std::span<const std::byte> h, std::size_t at) {
  T v;
  std::memcpy(&v, h.data() + at, sizeof v);
  return v;
}

}  // namespace

BlockFileLayout BlockFileLayout::of(const ModelFingerprint &model, std::int32_t block_size,
                                    std::size_t block_bytes) {
  std::uint64_t buf[6] = {model.value.lo, model.value.hi,    static_cast<std::uint64_t>(block_size),
                          block_bytes,    kBlockFileVersion, kBlockFileHeaderBytes};
  XXH128_hash_t h = XXH3_128bits(buf, sizeof buf);
  BlockFileLayout l;
  l.layout = BlockHash{h.low64, h.high64};
  l.block_size = block_size;
  l.block_bytes = block_bytes;
  return l;
}

void encode_block_header(const BlockFileLayout &layout, const BlockHash &block,
                         std::span<const std::byte> payload, std::span<std::byte> header) {
  std::memset(header.data(), 0, kBlockFileHeaderBytes);
  put(header, 0, kMagic);
  put(header, 8, kBlockFileVersion);
  put(header, 12, static_cast<std::uint32_t>(kBlockFileHeaderBytes));
  put(header, 16, layout.layout.lo);
  put(header, 24, layout.layout.hi);
  put(header, 32, block.lo);
  put(header, 40, block.hi);
  put(header, 48, static_cast<std::uint32_t>(layout.block_size));
  put(header, 56, static_cast<std::uint64_t>(layout.block_bytes));
  put(header, 64, static_cast<std::uint64_t>(XXH3_64bits(payload.data(), payload.size())));
  put(header, 120, static_cast<std::uint64_t>(XXH3_64bits(header.data(), 120)));
}

std::string verify_block_file(const BlockFileLayout &layout, const BlockHash &block,
                              std::span<const std::byte> header,
                              std::span<const std::byte> payload) {
  if (header.size() != kBlockFileHeaderBytes) return "short header";
  if (get<std::uint64_t>(header, 120) != XXH3_64bits(header.data(), 120))
    return "header checksum mismatch";
  if (get<std::uint64_t>(header, 0) != kMagic) return "bad magic";
  if (get<std::uint32_t>(header, 8) != kBlockFileVersion) return "unknown format version";
  if (get<std::uint32_t>(header, 12) != kBlockFileHeaderBytes) return "bad header size";
  if (get<std::uint64_t>(header, 16) != layout.layout.lo ||
      get<std::uint64_t>(header, 24) != layout.layout.hi)
    return "another model or KV layout";
  if (get<std::uint64_t>(header, 32) != block.lo || get<std::uint64_t>(header, 40) != block.hi)
    return "another block";
  if (get<std::uint32_t>(header, 48) != static_cast<std::uint32_t>(layout.block_size) ||
      get<std::uint64_t>(header, 56) != layout.block_bytes || payload.size() != layout.block_bytes)
    return "another block geometry";
  if (get<std::uint64_t>(header, 64) != XXH3_64bits(payload.data(), payload.size()))
    return "payload checksum mismatch";
  return {};
}

}  // namespace keel
