// The engine's view of sampling: exec/sampler.h behind a narrow interface, so that the
// engine loop depends only on what it uses of the sampler.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/ids.h"
#include "core/sampled_token.h"
#include "core/sampling_params.h"

namespace keel {

class Sampler;
class ThreadPool;

class RequestSampler {
 public:
  // Throws Error(kInvalidArgument) on parameters out of range.
  RequestSampler(const SamplingParams &params, std::uint64_t fallback_seed);
  ~RequestSampler();
  RequestSampler(const RequestSampler &) = delete;
  RequestSampler &operator=(const RequestSampler &) = delete;

  // logits: [vocab]. pool (optional): the row's passes split over it; same result.
  SampledToken sample(std::span<const float> logits, std::span<const TokenId> prompt,
                      std::span<const TokenId> generated, ThreadPool *pool = nullptr);
  bool is_stop_token(TokenId token, std::span<const TokenId> eos_ids) const;
  // The draw sample() would make next (Sampler::draw_uniform), for sampling on the
  // device: the request's RNG advances exactly as if it had sampled here.
  double draw_uniform();
  const SamplingParams &params() const;

 private:
  std::unique_ptr<Sampler> impl_;
};

// min_tokens: sets the logits ([vocab]) of the stop tokens `ids` to -inf, unless that
// would leave no token possible (a structured output whose document is complete allows
// only its end): then the row is left as it was. Returns whether they were masked.
bool mask_stop_tokens(std::span<float> logits, std::span<const TokenId> ids);

// Log-probability of `token` under `logits` ([vocab]) and the top `top_n` alternatives.
SampledToken logprob_of(std::span<const float> logits, TokenId token, int top_n);

}  // namespace keel
