#include "grammar/constrained_decoder.h"

#include <algorithm>

namespace keel::grammar {

ConstrainedDecoder::ConstrainedDecoder(std::shared_ptr<const CompiledGrammar> grammar)
    : matcher_(grammar) {
  if (grammar->vocab()) mask_ = TokenBitmask(grammar->vocab()->size());
}

bool ConstrainedDecoder::compute_mask(std::span<const TokenId> end_ids) {
  matcher_.fill_next_token_bitmask(mask_);
  end_ids_.assign(end_ids.begin(), end_ids.end());
  if (matcher_.is_complete())
    for (TokenId id : end_ids)
      if (id >= 0 && std::size_t(id) < mask_.vocab_size()) mask_.set(id);
  const bool any = std::any_of(mask_.words().begin(), mask_.words().end(),
                               [](std::uint32_t w) { return w != 0; });
  if (!any) mask_.set_all();
  return any;
}

bool ConstrainedDecoder::mask_logits(std::span<float> logits, std::span<const TokenId> end_ids) {
  if (!compute_mask(end_ids)) return false;
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
