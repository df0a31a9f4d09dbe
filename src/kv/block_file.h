// The on-disk image of one KV block in the SSD tier: a fixed 128-byte header, then the
// block's bytes exactly as KvBlockStore::save_block wrote them.
//
//   offset  size  field
//        0     8  magic "KEELKVB1"
//        8     4  format version (kBlockFileVersion)
//       12     4  header size (128)
//       16    16  layout: hash of (model fingerprint, block_size, block_bytes, format)
//       32    16  block hash (the chained content key; also the file name)
//       48     4  block_size (tokens)
//       52     4  reserved, 0
//       56     8  block_bytes (payload size)
//       64     8  XXH3-64 of the payload
//       72    48  reserved, 0
//      120     8  XXH3-64 of bytes [0, 120)
//
// A reader checks every field against what it expects and the payload checksum, so a
// block of another model, dtype or layout, a torn or truncated write and flipped bits
// all read as "not this block".
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kv/block_hash.h"

namespace keel {

inline constexpr std::uint32_t kBlockFileVersion = 1;
inline constexpr std::size_t kBlockFileHeaderBytes = 128;

struct BlockFileLayout {
  BlockHash layout;  // names the directory too
  std::int32_t block_size = 0;
  std::size_t block_bytes = 0;
  // Hashes the model fingerprint with the block geometry and the format version.
  static BlockFileLayout of(const ModelFingerprint &model, std::int32_t block_size,
                            std::size_t block_bytes);
  std::size_t file_bytes() const { return kBlockFileHeaderBytes + block_bytes; }
};

// header: [kBlockFileHeaderBytes]
void encode_block_header(const BlockFileLayout &layout, const BlockHash &block,
                         std::span<const std::byte> payload, std::span<std::byte> header);
// Empty when the header and payload are the block `block` of `layout`; otherwise why not.
std::string verify_block_file(const BlockFileLayout &layout, const BlockHash &block,
                              std::span<const std::byte> header,
                              std::span<const std::byte> payload);

}  // namespace keel
