// Identifier types. Block and request ids are strong types so that one cannot be
// passed where the other is meant. Token ids stay plain int32: token sequences are
// data that flows through tokenizers, kernels and wire formats as arrays.
#pragma once

#include <cstdint>
#include <functional>

namespace keel {

using TokenId = std::int32_t;

template <typename Tag, typename Rep>
struct StrongId {
  Rep value{};
  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep v) : value(v) {}
  constexpr auto operator<=>(const StrongId &) const = default;
};

using BlockId = StrongId<struct BlockIdTag, std::int32_t>;
using RequestId = StrongId<struct RequestIdTag, std::uint64_t>;

}  // namespace keel

template <typename Tag, typename Rep>
struct std::hash<keel::StrongId<Tag, Rep>> {
  size_t operator()(const keel::StrongId<Tag, Rep> &id) const noexcept {
    return std::hash<Rep>{}(id.value);
  }
};
