#include "server/request_budget.h"

#include <algorithm>

#include "server/json_fields.h"

namespace keel::server {

namespace {

std::int64_t context_or_default(std::int64_t context_length) {
  return context_length > 0 ? context_length : RequestBudget::kUnknownContext;
}

}  // namespace

void check_sequences(std::int64_t prompts, std::int64_t n, const std::string &field) {
  if (prompts * n <= RequestBudget::kMaxSequences) return;
  fail_field(field, std::to_string(prompts) + " prompts x n " + std::to_string(n) + " is " +
                        std::to_string(prompts * n) +
                        " sequences; one request may ask for at most " +
                        std::to_string(RequestBudget::kMaxSequences));
}

std::int64_t max_prompt_bytes(std::int64_t context_length) {
  return std::max(RequestBudget::kMinPromptBytes,
                  context_or_default(context_length) * RequestBudget::kBytesPerToken);
}

void check_prompt_bytes(std::int64_t bytes, std::int64_t context_length, const std::string &field) {
  const std::int64_t most = max_prompt_bytes(context_length);
  if (bytes <= most) return;
  fail_field(field, "is " + std::to_string(bytes) + " bytes of text; at most " +
                        std::to_string(most) + " fit a context of " +
                        std::to_string(context_or_default(context_length)) + " tokens");
}

void check_token_count(std::int64_t count, std::int64_t context_length, const std::string &field) {
  const std::int64_t most = context_or_default(context_length);
  if (count <= most) return;
  fail_field(field, "holds " + std::to_string(count) + " token ids; at most " +
                        std::to_string(most) + " (the model's context length)");
}

std::int32_t fit_logprob_budget(std::int64_t sequences, std::int64_t echo_tokens,
                                std::int32_t max_tokens, bool asked, std::int64_t top,
                                const std::string &field) {
  const std::int64_t per_token = sequences * (top + 1);
  const std::int64_t budget = RequestBudget::kMaxLogprobEntries;
  const std::int64_t wanted = per_token * (echo_tokens + max_tokens);
  if (wanted <= budget) return max_tokens;
  const std::int64_t room = budget / per_token - echo_tokens;  // new tokens that fit
  if (!asked && room >= 1) return static_cast<std::int32_t>(room);
  fail_field(field, "a reply that is not streamed holds at most " + std::to_string(budget) +
                        " logprob entries (sequences x tokens x (top logprobs + 1)); this one "
                        "would hold " +
                        std::to_string(wanted) +
                        ": ask for fewer tokens, sequences or top logprobs, or stream");
}

}  // namespace keel::server
