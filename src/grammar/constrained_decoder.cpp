#include "grammar/constrained_decoder.h"

#include <algorithm>

namespace keel::grammar {

bool ConstrainedDecoder::mask_logits(std::span<float> logits, std::span<const TokenId> end_ids) {
  matcher_.fill_next_token_bitmask(mask_);
  end_ids_.assign(end_ids.begin(), end_ids.end());
  if (matcher_.is_complete())
    for (TokenId id : end_ids)
      if (id >= 0 && std::size_t(id) < mask_.vocab_size()) mask_.set(id);
  if (mask_.count() == 0) return false;
  apply_token_bitmask(logits, mask_);
  return true;
}

ConstrainedDecoder::Status ConstrainedDecoder::accept(TokenId token) {
  if (matcher_.is_complete() &&
      std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end())
    return Status::kComplete;  // a stop token the engine ends on
  if (!matcher_.accept_token(token)) return Status::kRejected;
  return matcher_.is_terminated() ? Status::kComplete : Status::kContinue;
}

}  // namespace keel::grammar
