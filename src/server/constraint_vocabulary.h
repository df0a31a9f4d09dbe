// Before a constrained request reaches the engine: can the model's vocabulary write its
// grammar at all? A grammar that needs a byte no token contains is answered with a 400
// naming the construct here, in the front, before any token is generated (a stream has
// not begun; the engine would only find out at its first mask).
#pragma once

#include "core/sampling_params.h"
#include "registry/model_text.h"

namespace keel::server {

// Throws ApiErrorException (400) naming the field and the rule the vocabulary cannot
// finish; nothing for an unconstrained request.
void check_constraint_vocabulary(const SamplingParams &s, const ModelText &text);

}  // namespace keel::server
