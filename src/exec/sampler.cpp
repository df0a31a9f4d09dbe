#include "exec/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "core/error.h"

namespace keel {

namespace {

double log_sum_exp(std::span<const float> x) {
  float mx = -std::numeric_limits<float>::infinity();
  for (float v : x) mx = std::max(mx, v);
  if (!std::isfinite(mx)) return mx;
  double s = 0;
  for (float v : x) s += std::exp(static_cast<double>(v) - mx);
  return mx + std::log(s);
}

}  // namespace

SampleResult logprobs_of(std::span<const float> logits, TokenId token, int n) {
  SampleResult r;
  r.token = token;
  const double lse = log_sum_exp(logits);
  r.logprob = static_cast<float>(logits[token] - lse);
  n = std::clamp<int>(n, 0, static_cast<int>(logits.size()));
  if (n > 0) {
    std::vector<std::int32_t> idx(logits.size());
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<std::int32_t>(i);
    std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](std::int32_t a, std::int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int i = 0; i < n; ++i) r.top.push_back({idx[i], static_cast<float>(logits[idx[i]] - lse)});
  }
  return r;
}

bool sampling_params_in_range(const SamplingParams &p) {
  return p.temperature >= 0 && p.top_p > 0 && p.top_p <= 1 && p.min_p >= 0 && p.min_p <= 1 &&
         p.top_k >= 0 && p.repetition_penalty > 0;
}

Sampler::Sampler(const SamplingParams &params, std::uint64_t fallback_seed)
    : params_(params), rng_(params.seed.value_or(fallback_seed)) {
  if (!sampling_params_in_range(params))
    throw Error(ErrorCode::kInvalidArgument, "sampling: parameter out of range");
}

bool Sampler::is_stop_token(TokenId token, std::span<const TokenId> eos_ids) const {
  if (std::find(params_.stop_token_ids.begin(), params_.stop_token_ids.end(), token) !=
      params_.stop_token_ids.end())
    return true;
  return !params_.ignore_eos && std::find(eos_ids.begin(), eos_ids.end(), token) != eos_ids.end();
}

double Sampler::draw_uniform() {
  if (params_.greedy()) return 0.0;
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
}

SampleResult Sampler::sample(std::span<const float> logits, std::span<const TokenId> prompt,
                             std::span<const TokenId> generated) {
  if (logits.empty()) throw Error(ErrorCode::kInternal, "sampler: empty logits");
  return sample_with(logits, prompt, generated, draw_uniform());
}

SampleResult Sampler::sample_with(std::span<const float> logits, std::span<const TokenId> prompt,
                                  std::span<const TokenId> generated, double draw) {
  const std::int64_t V = static_cast<std::int64_t>(logits.size());
  if (V == 0) throw Error(ErrorCode::kInternal, "sampler: empty logits");
  work_.assign(logits.begin(), logits.end());

  // Penalties.
  if (params_.repetition_penalty != 1.0f) {
    const float rp = params_.repetition_penalty;
    std::vector<char> seen(static_cast<std::size_t>(V), 0);
    auto mark = [&](std::span<const TokenId> ids) {
      for (TokenId t : ids)
        if (t >= 0 && t < V && !seen[t]) {
          seen[t] = 1;
          work_[t] = work_[t] > 0 ? work_[t] / rp : work_[t] * rp;
        }
    };
    mark(prompt);
    mark(generated);
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    std::unordered_map<TokenId, int> counts;
    for (TokenId t : generated)
      if (t >= 0 && t < V) ++counts[t];
    for (auto [t, c] : counts)
      work_[t] -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(c);
  }

  TokenId chosen = 0;
  if (params_.greedy()) {
    chosen = static_cast<TokenId>(std::max_element(work_.begin(), work_.end()) - work_.begin());
  } else {
    const float inv_t = 1.0f / params_.temperature;
    // Candidates sorted by logit (ties by id), so that sampling is deterministic.
    order_.resize(static_cast<std::size_t>(V));
    for (std::int64_t i = 0; i < V; ++i) order_[i] = static_cast<std::int32_t>(i);
    std::int64_t keep = V;
    if (params_.top_k > 0) keep = std::min<std::int64_t>(keep, params_.top_k);
    auto by_logit = [&](std::int32_t a, std::int32_t b) {
      return work_[a] > work_[b] || (work_[a] == work_[b] && a < b);
    };
    if (keep < V) {
      std::partial_sort(order_.begin(), order_.begin() + keep, order_.end(), by_logit);
    } else {
      std::sort(order_.begin(), order_.end(), by_logit);
    }
    // Probabilities of the kept candidates at this temperature.
    std::vector<double> p(static_cast<std::size_t>(keep));
    const double mx = static_cast<double>(work_[order_[0]]) * inv_t;
    double sum = 0;
    for (std::int64_t i = 0; i < keep; ++i)
      sum += p[i] = std::exp(static_cast<double>(work_[order_[i]]) * inv_t - mx);
    for (auto &v : p) v /= sum;
    if (params_.top_p < 1.0f) {
      double cum = 0;
      std::int64_t n = 0;
      while (n < keep) {
        cum += p[n++];
        if (cum >= params_.top_p) break;
      }
      keep = std::max<std::int64_t>(n, 1);
    }
    if (params_.min_p > 0.0f) {
      const double floor = params_.min_p * p[0];
      std::int64_t n = 1;
      while (n < keep && p[n] >= floor) ++n;
      keep = n;
    }
    double total = 0;
    for (std::int64_t i = 0; i < keep; ++i) total += p[i];
    const double u = draw * total;
    double cum = 0;
    chosen = order_[keep - 1];
    for (std::int64_t i = 0; i < keep; ++i) {
      cum += p[i];
      if (u < cum) {
        chosen = order_[i];
        break;
      }
    }
  }
  return logprobs_of(logits, chosen, params_.logprobs > 0 ? params_.logprobs : 0);
}

}  // namespace keel
