#include "engine/token_sampling.h"

#include <cmath>
#include <limits>

#include "exec/sampler.h"

namespace keel {

RequestSampler::RequestSampler(const SamplingParams &params, std::uint64_t fallback_seed)
    : impl_(std::make_unique<Sampler>(params, fallback_seed)) {}

RequestSampler::~RequestSampler() = default;

SampledToken RequestSampler::sample(std::span<const float> logits, std::span<const TokenId> prompt,
                                    std::span<const TokenId> generated, ThreadPool *pool) {
  return impl_->sample(logits, prompt, generated, pool);
}

bool RequestSampler::is_stop_token(TokenId token, std::span<const TokenId> eos_ids) const {
  return impl_->is_stop_token(token, eos_ids);
}

double RequestSampler::draw_uniform() { return impl_->draw_uniform(); }

const SamplingParams &RequestSampler::params() const { return impl_->params(); }

bool mask_stop_tokens(std::span<float> logits, std::span<const TokenId> ids) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  std::vector<float> kept;
  kept.reserve(ids.size());
  const auto vocab = static_cast<TokenId>(logits.size());
  for (TokenId t : ids) {
    kept.push_back(t >= 0 && t < vocab ? logits[t] : kNegInf);
    if (t >= 0 && t < vocab) logits[t] = kNegInf;
  }
  for (float v : logits)
    if (v != kNegInf && !std::isnan(v)) return true;
  for (std::size_t i = ids.size(); i-- > 0;)  // backwards: a repeated id gets its first value
    if (ids[i] >= 0 && ids[i] < vocab) logits[ids[i]] = kept[i];
  return false;
}

SampledToken logprob_of(std::span<const float> logits, TokenId token, int top_n) {
  return logprobs_of(logits, token, top_n);
}

}  // namespace keel
