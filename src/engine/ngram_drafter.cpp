#include "engine/ngram_drafter.h"

#include <algorithm>

#include "core/error.h"

namespace keel {

NgramDrafter::NgramDrafter(std::int32_t ngram_max, std::int32_t ngram_min)
    : max_(ngram_max), min_(ngram_min) {
  if (min_ < 1 || max_ < min_)
    throw Error(ErrorCode::kInvalidArgument, "ngram drafter: need 1 <= ngram_min <= ngram_max");
}

void NgramDrafter::propose(RequestId, std::span<const TokenId> tokens, std::int32_t max_tokens,
                           std::vector<TokenId> &out) {
  const auto len = static_cast<std::int64_t>(tokens.size());
  if (max_tokens <= 0) return;
  for (std::int64_t n = std::min<std::int64_t>(max_, len - 1); n >= min_; --n) {
    const auto suffix = tokens.subspan(static_cast<std::size_t>(len - n));
    // The latest earlier occurrence: start positions len - n - 1 down to 0.
    for (std::int64_t i = len - n - 1; i >= 0; --i) {
      if (tokens[i] != suffix[0] || !std::equal(suffix.begin(), suffix.end(), tokens.begin() + i))
        continue;
      const std::int64_t from = i + n;
      const std::int64_t to = std::min(len, from + max_tokens);
      out.insert(out.end(), tokens.begin() + from, tokens.begin() + to);
      return;
    }
  }
}

}  // namespace keel
