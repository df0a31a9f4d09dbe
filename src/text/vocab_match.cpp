#include "text/vocab_match.h"

namespace keel {

std::string vocab_difference(const Tokenizer &target, const Tokenizer &draft) {
  if (target.vocab_size() != draft.vocab_size())
    return std::to_string(draft.vocab_size()) + " tokens against the target's " +
           std::to_string(target.vocab_size());
  for (std::size_t i = 0; i < target.vocab_size(); ++i) {
    const auto id = static_cast<TokenId>(i);
    if (target.token_text(id) != draft.token_text(id))
      return "token " + std::to_string(i) + " is '" + draft.token_text(id) +
             "' against the target's '" + target.token_text(id) + "'";
  }
  return {};
}

}  // namespace keel
