// The one vocabulary of a sampled token, from the sampler through the engine's events
// and the IPC to the API renderers.
#pragma once

#include <vector>

#include "core/ids.h"

namespace keel {

// A token and its log-probability under the raw logits.
struct TokenLogprob {
  TokenId token = 0;
  float logprob = 0.0f;
};

// What sampling one row gives: the token, its log-probability (when asked) and the
// top alternatives (when asked), best first.
struct SampledToken {
  TokenId token = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
};

}  // namespace keel
