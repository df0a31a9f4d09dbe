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

  explicit ConstrainedDecoder(std::shared_ptr<const CompiledGrammar> grammar)
      : matcher_(std::move(grammar)) {}

  // Fills the next mask and sets disallowed logits to -inf. `end_ids` (the engine's
  // stop tokens) are allowed, beside the vocabulary's EOS, when the document is
  // complete. Returns false (logits untouched) when no token at all is allowed.
  bool mask_logits(std::span<float> logits, std::span<const TokenId> end_ids = {});
  // The mask of the last mask_logits call ([ceil(vocab/32)] words, for a device upload).
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
