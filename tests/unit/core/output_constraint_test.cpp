// apply_token_mask: the mask layout every sampler shares (bit t % 32 of word t / 32),
// tokens past the mask disallowed, allowed logits untouched.
#include "core/output_constraint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace keel {
namespace {

TEST(OutputConstraint, ApplyTokenMaskKeepsExactlyTheAllowedTokens) {
  for (const int vocab : {1, 31, 32, 33, 100}) {
    std::vector<std::uint32_t> mask((vocab + 31) / 32, 0);
    std::vector<float> logits(vocab + 5);  // a row wider than the mask
    for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = float(i) * 0.5f - 3.0f;
    const std::vector<float> before = logits;
    for (int t = 0; t < vocab; t += 3) mask[t / 32] |= 1u << (t % 32);
    if (vocab > 40) mask[1] = ~0u;  // a full word is skipped, not rewritten
    apply_token_mask(logits, mask);
    for (std::size_t t = 0; t < logits.size(); ++t) {
      const bool allowed = t < std::size_t(vocab) && ((mask[t / 32] >> (t % 32)) & 1u);
      if (allowed)
        EXPECT_EQ(logits[t], before[t]) << vocab << " " << t;
      else
        EXPECT_TRUE(std::isinf(logits[t]) && logits[t] < 0) << vocab << " " << t;
    }
  }
}

}  // namespace
}  // namespace keel
