// The one rule that settles how many tokens a request may generate, used by every
// generating endpoint (chat completions, completions, messages, responses): a prompt
// that alone fills the context is a 400 naming the prompt's field; otherwise the new
// tokens are the request's max_tokens (or, when it gives none, as many as fit),
// clamped to what the context leaves. Clients such as Claude Code ask for 32,000
// tokens whatever the model; refusing them would break the client for no gain, and
// the clamped request ends with finish "length" / stop_reason "max_tokens".
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/ids.h"

namespace keel::server {

// context_length <= 0: unknown (no clamp; no limit when none was asked becomes
// INT32_MAX, which the engine bounds by its own context). Throws the 400
// ApiErrorException naming `prompt_field` when the prompt leaves no room.
std::int32_t fit_max_tokens(std::int64_t context_length, std::size_t prompt_len,
                            std::optional<std::int64_t> requested, const std::string &prompt_field);

// The same for requests of several prompts (completions): one max_tokens for all, what
// the longest leaves.
std::int32_t fit_max_tokens(std::int64_t context_length,
                            const std::vector<std::vector<TokenId>> &prompts,
                            std::optional<std::int64_t> requested, const std::string &prompt_field);

}  // namespace keel::server
