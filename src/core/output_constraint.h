// A request's structured-output constraint as the engine sees it (src/grammar/ makes
// them; the engine knows neither grammars nor vocabularies): compute the mask of the
// tokens allowed next, apply it to a logits row (here, or on the device), advance on
// the sampled token.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "core/ids.h"
#include "core/sampling_params.h"

namespace keel {

class OutputConstraint {
 public:
  virtual ~OutputConstraint() = default;
  // Computes the tokens allowed next into mask_words(). The tokenizer's EOS and
  // `end_ids` (the model's and the request's stop tokens) are allowed only when the
  // output is complete. May run on any thread (the engine computes a step's masks while
  // its forward pass runs), one call at a time per constraint and never beside accept().
  // False when no token is allowed (a dead end): mask_words() then allows every token,
  // so that a sampler never sees a row of -inf; the engine ends the request instead.
  virtual bool compute_mask(std::span<const TokenId> end_ids) = 0;
  // The last compute_mask's result: bit t % 32 of word t / 32 set when token t is
  // allowed; tokens past the words are not. The same storage for the constraint's life.
  virtual std::span<const std::uint32_t> mask_words() const = 0;
  // Advances on the sampled token; false when the constraint does not allow it.
  virtual bool accept(TokenId token) = 0;
};

// Sets logits[t] to -inf for every token t that `mask` (OutputConstraint::mask_words
// layout) does not allow.
void apply_token_mask(std::span<float> logits, std::span<const std::uint32_t> mask);

// Makes the constraint that `params` asks for (compiled and cached by its text);
// throws keel::Error naming the problem for one it cannot make.
using OutputConstraintFactory =
    std::function<std::unique_ptr<OutputConstraint>(const SamplingParams &params)>;

}  // namespace keel
