// One request's constraint during decoding, as the engine uses it: before sampling a
// row, mask its logits; after sampling, advance on the token. EOS is allowed only
// when the document is complete; a state that allows no token (a dead end) is
// reported, so the engine finishes the request with an error instead of sampling
// from a row of -inf.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "grammar/matcher.h"

namespace keel::grammar {

class ConstrainedDecoder {
 public:
  enum class Status {
    kContinue,  // accepted; more tokens may follow
    kComplete,  // accepted an EOS id: the document is finished
    kRejected,  // the token is not allowed here (the sampler ignored the mask)
  };

  // The mask is sized to the vocabulary here, so its words never move afterwards (a
  // device sampler reads them by a span taken before they are computed).
  explicit ConstrainedDecoder(std::shared_ptr<const CompiledGrammar> grammar);

  // Fills the next mask. `end_ids` (the engine's stop tokens) are allowed, beside the
  // vocabulary's EOS, when the document is complete. Returns false when no token at
  // all is allowed; the mask then allows every token (so no sampler sees only -inf).
  bool compute_mask(std::span<const TokenId> end_ids = {});
  // compute_mask, then sets disallowed logits to -inf (untouched when it returns false).
  bool mask_logits(std::span<float> logits, std::span<const TokenId> end_ids = {});
  // The mask of the last compute_mask call ([ceil(vocab/32)] words, for a device upload).
  const TokenBitmask &mask() const { return mask_; }
  Status accept(TokenId token);
  // The document may end here (an EOS would be accepted).
  bool is_complete() const { return matcher_.is_complete(); }
  // Undo the last n accepted tokens (speculative decoding, preemption replays).
  void rollback(std::size_t n) { matcher_.rollback(n); }

 private:
  GrammarMatcher matcher_;
  TokenBitmask mask_;
  std::vector<TokenId> end_ids_;  // of the last mask_logits call
};

}  // namespace keel::grammar
