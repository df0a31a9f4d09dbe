// Content keys for full KV blocks: a chained hash, so a block's key names its whole
// prefix, not just its own tokens.
//
//   hash(block i) = XXH3-128( tag, model fingerprint, hash(block i-1), tokens of block i,
//                             extra keys )
//
// Why XXH3-128 and not SHA-256: keys only need to be collision-free by accident, not
// against an adversary who can forge them (keel serves its owner's agents on their own
// machine; a multi-tenant deployment isolates tenants with a per-tenant extra key, the
// cache salt). With 128 bits, the chance of any accidental collision among 10^12 cached
// blocks is about 10^24 / 2^129 ~ 1e-15. XXH3-128 hashes a 16-token block in tens of
// nanoseconds, and it ships in keel's dependencies (OpenSSL is not linked). The tag
// versions the layout: switching to SHA-256 later changes the tag, so old on-disk keys
// can never match new ones.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "core/ids.h"

namespace keel {

struct BlockHash {
  std::uint64_t lo = 0, hi = 0;
  constexpr auto operator<=>(const BlockHash &) const = default;
  std::string hex() const;  // 32 hex digits, hi first
};

// Identifies what produced a block's contents: model weights, KV dtype and layout,
// block size. Blocks from another fingerprint never match.
struct ModelFingerprint {
  BlockHash value;
  // Hashes a caller-built description (e.g. model path + weights digest + kv dtype).
  static ModelFingerprint of(std::string_view description);
};

// Hash of a full block. `parent` is nullptr for the first block of a sequence.
// `extra_keys` are opaque bytes that must also match (cache salt, adapter id, ...).
BlockHash hash_block(const ModelFingerprint &model, const BlockHash *parent,
                     std::span<const TokenId> tokens, std::string_view extra_keys = {});

}  // namespace keel

template <>
struct std::hash<keel::BlockHash> {
  size_t operator()(const keel::BlockHash &h) const noexcept { return h.lo; }
};
