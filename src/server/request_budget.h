// Per-request budgets (issue 31): what one request may ask of the server, so that one
// client cannot take gigabytes or every sequence slot. Each is checked before any work
// and answered with a 400 naming the field and the bound.
//
// - Sequences: a request is prompts x n sequences, at most kMaxSequences (completions
//   take 64 prompts and n up to 16, which would be 1,024). The scheduler admits them as
//   one group, interleaved with other requests' groups (sched/scheduler.h).
// - Prompt text: /v1/completions, /tokenize and /detokenize hold what fits a model's
//   context, measured before tokenizing: at most kBytesPerToken bytes of text per
//   context token (no tokenizer in use packs more into one token), never less than
//   kMinPromptBytes; /detokenize at most the context in token ids.
// - Logprobs: a reply that is not streamed is built whole in memory, so its logprob
//   entries (sequences x tokens x (top logprobs + 1), echoed prompt tokens included) are
//   at most kMaxLogprobEntries. A request that leaves max_tokens out gets what fits the
//   budget (finish "length"); one that asks for more is refused and told to stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace keel::server {

struct RequestBudget {
  static constexpr std::int64_t kMaxSequences = 128;
  static constexpr std::int64_t kMaxLogprobEntries = 262'144;
  static constexpr std::int64_t kBytesPerToken = 32;
  static constexpr std::int64_t kMinPromptBytes = 64 * 1024;
  // The context assumed for a model whose context length is not known yet.
  static constexpr std::int64_t kUnknownContext = 131'072;
};

// 400 naming `field` when prompts x n is over kMaxSequences.
void check_sequences(std::int64_t prompts, std::int64_t n, const std::string &field);

// The most bytes of prompt text for a model of `context_length` tokens (<= 0: unknown).
std::int64_t max_prompt_bytes(std::int64_t context_length);
// 400 naming `field` when `bytes` of text are over max_prompt_bytes.
void check_prompt_bytes(std::int64_t bytes, std::int64_t context_length, const std::string &field);
// 400 naming `field` when `count` token ids are over the context (or kUnknownContext).
void check_token_count(std::int64_t count, std::int64_t context_length, const std::string &field);

// A non-streamed reply with logprobs: `sequences` choices, each echoing `echo_tokens`
// prompt tokens (0 without echo) and generating up to `max_tokens`, with `top` top
// logprobs each. Returns the max_tokens that fits kMaxLogprobEntries: `max_tokens`
// itself when it fits; less when the client left max_tokens out (`asked` false); a 400
// naming `field` when it asked for more, or when the echo alone is over.
std::int32_t fit_logprob_budget(std::int64_t sequences, std::int64_t echo_tokens,
                                std::int32_t max_tokens, bool asked, std::int64_t top,
                                const std::string &field);

}  // namespace keel::server
