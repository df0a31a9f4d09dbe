#include "kv/block_hash.h"

#include <xxhash.h>

#include <cstdio>
#include <vector>

namespace keel {
namespace {

constexpr char kTag[] = "keel-kv-block-v1";

void put_u64(std::byte *&p, std::uint64_t v) {
  std::memcpy(p, &v, sizeof v);  // little-endian hosts only (x86-64, aarch64 Linux)
  p += sizeof v;
}

}  // namespace

std::string BlockHash::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

ModelFingerprint ModelFingerprint::of(std::string_view description) {
  XXH128_hash_t h = XXH3_128bits(description.data(), description.size());
  return ModelFingerprint{BlockHash{h.low64, h.high64}};
}

BlockHash hash_block(const ModelFingerprint &model, const BlockHash *parent,
                     std::span<const TokenId> tokens, std::string_view extra_keys) {
  // Layout (all lengths explicit, so no two inputs serialize alike):
  // tag | model(16) | has_parent(8) | parent(16) | n_tokens(8) | tokens(4n) |
  // n_extra(8) | extra bytes.
  const std::size_t size =
      sizeof kTag + 16 + 8 + 16 + 8 + 4 * tokens.size() + 8 + extra_keys.size();
  std::byte stack_buf[512];
  std::vector<std::byte> heap_buf;
  std::byte *buf = stack_buf;
  if (size > sizeof stack_buf) {
    heap_buf.resize(size);
    buf = heap_buf.data();
  }
  std::byte *p = buf;
  std::memcpy(p, kTag, sizeof kTag);
  p += sizeof kTag;
  put_u64(p, model.value.lo);
  put_u64(p, model.value.hi);
  put_u64(p, parent != nullptr ? 1 : 0);
  put_u64(p, parent != nullptr ? parent->lo : 0);
  put_u64(p, parent != nullptr ? parent->hi : 0);
  put_u64(p, tokens.size());
  if (!tokens.empty()) {
    std::memcpy(p, tokens.data(), 4 * tokens.size());
    p += 4 * tokens.size();
  }
  put_u64(p, extra_keys.size());
  if (!extra_keys.empty()) {
    std::memcpy(p, extra_keys.data(), extra_keys.size());
    p += extra_keys.size();
  }
  XXH128_hash_t h = XXH3_128bits(buf, static_cast<std::size_t>(p - buf));
  return BlockHash{h.low64, h.high64};
}

}  // namespace keel
