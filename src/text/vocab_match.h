// Whether two tokenizers are one vocabulary: speculative decoding verifies a draft
// model's token ids with the target model, so the draft must spell every id as the
// target does (`--speculative draft:PATH`).
#pragma once

#include <string>

#include "text/tokenizer.h"

namespace keel {

// "" when both have the same tokens in the same order; otherwise the first difference,
// in words, the draft's first ("3001 tokens against the target's 3000", "token 17 is
// 'a' against the target's 'b'").
std::string vocab_difference(const Tokenizer &target, const Tokenizer &draft);

}  // namespace keel
