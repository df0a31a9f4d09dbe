#include "server/context_budget.h"

#include <algorithm>
#include <limits>

#include "server/json_fields.h"

namespace keel::server {

std::int32_t fit_max_tokens(std::int64_t context_length, std::size_t prompt_len,
                            std::optional<std::int64_t> requested,
                            const std::string &prompt_field) {
  constexpr std::int64_t kMost = std::numeric_limits<std::int32_t>::max();
  const std::int64_t asked = std::clamp<std::int64_t>(requested.value_or(kMost), 1, kMost);
  if (context_length <= 0) return static_cast<std::int32_t>(asked);
  const auto len = static_cast<std::int64_t>(prompt_len);
  if (len >= context_length)
    fail_field(prompt_field, "the prompt is " + std::to_string(len) +
                                 " tokens, but the model's context length is " +
                                 std::to_string(context_length) +
                                 " tokens (it must leave room for at least one new token)");
  return static_cast<std::int32_t>(std::min(asked, context_length - len));
}

std::int32_t fit_max_tokens(std::int64_t context_length,
                            const std::vector<std::vector<TokenId>> &prompts,
                            std::optional<std::int64_t> requested,
                            const std::string &prompt_field) {
  std::size_t longest = 0;
  for (const auto &p : prompts) longest = std::max(longest, p.size());
  return fit_max_tokens(context_length, longest, requested, prompt_field);
}

}  // namespace keel::server
