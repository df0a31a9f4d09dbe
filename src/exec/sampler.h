// Turns one row of logits into the next token for one request: penalties, greedy or
// temperature / top-k / top-p / min-p sampling with the request's own seeded RNG
// (same seed, same output), and logprobs (log-softmax of the raw logits, before any
// penalty or temperature) with the top N alternatives.
//
// The choice is the one a walk over the whole row sorted by (logit desc, id asc) makes
// (the cumulative probability against the draw), but the cost follows the request:
// greedy is an argmax; top-k a partial selection of k entries; top-p, min-p and plain
// temperature one vectorized pass over the row into a mass histogram (sampler_buckets.h)
// and a sort of the few entries around the cumulative probabilities the walk looks for;
// logprobs only when asked, from one vectorized log-sum-exp.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "core/ids.h"
#include "core/sampled_token.h"
#include "core/sampling_params.h"

namespace keel {

class MassBuckets;
class ThreadPool;

class Sampler {
 public:
  // Without params.seed, the RNG is seeded from `fallback_seed` (the engine passes a
  // fresh random value per request).
  Sampler(const SamplingParams &params, std::uint64_t fallback_seed);
  ~Sampler();
  Sampler(Sampler &&) noexcept;

  // logits: [vocab] raw. prompt / generated: the request's tokens so far (repetition
  // penalty looks at both; presence and frequency penalties at generated ones, as
  // vLLM and OpenAI do).
  // pool (optional): the row's passes split over it (a step with fewer rows than
  // threads); the result does not depend on it.
  SampledToken sample(std::span<const float> logits, std::span<const TokenId> prompt,
                      std::span<const TokenId> generated, ThreadPool *pool = nullptr);

  // The one uniform draw in [0, 1) that sample() makes (none when greedy: returns 0 and
  // leaves the RNG as it is). Sampling elsewhere (on the GPU) from the same draw keeps
  // a seeded request's output the same wherever it is sampled.
  double draw_uniform();
  // sample() with its draw given: sample(...) == sample_with(..., draw_uniform()).
  SampledToken sample_with(std::span<const float> logits, std::span<const TokenId> prompt,
                           std::span<const TokenId> generated, double u,
                           ThreadPool *pool = nullptr);

  // True when `token` ends the request: a stop token, or an eos unless ignore_eos.
  bool is_stop_token(TokenId token, std::span<const TokenId> eos_ids) const;

  const SamplingParams &params() const { return params_; }

 private:
  // The stochastic choice over w ([vocab], penalized); lse_t1 receives log-sum-exp of w
  // when the pass computed it on the way (temperature 1), else stays NaN.
  TokenId choose(std::span<const float> w, double u, double &lse_t1, ThreadPool *pool);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> work_;               // [vocab] penalized logits (penalties only)
  std::vector<std::uint64_t> keys_;       // [k] candidate keys (sampler_top.h)
  std::unique_ptr<MassBuckets> buckets_;  // made on the first stochastic full-row walk
  const float *built_ = nullptr;          // the row buckets_ holds this call, if any
};

// Whether the parameters are in range (temperature >= 0, top_p in (0, 1], min_p in
// [0, 1], top_k >= 0, repetition_penalty > 0): what the Sampler and the device sampler
// both require.
bool sampling_params_in_range(const SamplingParams &params);

// Log-softmax of `logits` at `token`, and the top `n` entries (n may be 0): one
// vectorized log-sum-exp and a partial selection.
SampledToken logprobs_of(std::span<const float> logits, TokenId token, int n);

}  // namespace keel
