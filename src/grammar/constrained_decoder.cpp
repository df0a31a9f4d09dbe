#include "grammar/constrained_decoder.h"

namespace keel::grammar {

bool ConstrainedDecoder::mask_logits(std::span<float> logits) {
  matcher_.fill_next_token_bitmask(mask_);
  if (mask_.count() == 0) return false;
  apply_token_bitmask(logits, mask_);
  return true;
}

ConstrainedDecoder::Status ConstrainedDecoder::accept(TokenId token) {
  if (!matcher_.accept_token(token)) return Status::kRejected;
  return matcher_.is_terminated() ? Status::kComplete : Status::kContinue;
}

}  // namespace keel::grammar
