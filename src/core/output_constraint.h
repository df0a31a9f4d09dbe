// A request's structured-output constraint as the engine sees it (src/grammar/ makes
// them; the engine knows neither grammars nor vocabularies): mask a logits row before
// sampling, advance on the sampled token.
#pragma once

#include <functional>
#include <memory>
#include <span>

#include "core/ids.h"
#include "core/sampling_params.h"

namespace keel {

class OutputConstraint {
 public:
  virtual ~OutputConstraint() = default;
  // Sets the logits of tokens not allowed next to -inf. The tokenizer's EOS and
  // `end_ids` (the model's and the request's stop tokens) are allowed only when the
  // output is complete. False when no token is allowed: the request cannot continue.
  virtual bool mask_logits(std::span<float> logits, std::span<const TokenId> end_ids) = 0;
  // Advances on the sampled token; false when the constraint does not allow it.
  virtual bool accept(TokenId token) = 0;
};

// Makes the constraint that `params` asks for (compiled and cached by its text);
// throws keel::Error naming the problem for one it cannot make.
using OutputConstraintFactory =
    std::function<std::unique_ptr<OutputConstraint>(const SamplingParams &params)>;

}  // namespace keel
