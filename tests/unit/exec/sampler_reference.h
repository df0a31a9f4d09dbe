// The sort-based Sampler that keel shipped before the sort-free one (exec/sampler.cpp
// until #20), kept as the reference the new one must match: the whole row sorted by
// (logit desc, id asc), probabilities at the temperature, top-k, top-p, min-p, and the walk
// of the cumulative probability against the draw u. Test code only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "core/sampling_params.h"

namespace keel::test {

inline TokenId reference_sample(std::span<const float> logits, const SamplingParams &params,
                                std::span<const TokenId> prompt, std::span<const TokenId> generated,
                                double draw) {
  const std::int64_t V = static_cast<std::int64_t>(logits.size());
  std::vector<float> work(logits.begin(), logits.end());
  if (params.repetition_penalty != 1.0f) {
    const float rp = params.repetition_penalty;
    std::vector<char> seen(static_cast<std::size_t>(V), 0);
    auto mark = [&](std::span<const TokenId> ids) {
      for (TokenId t : ids)
        if (t >= 0 && t < V && !seen[t]) {
          seen[t] = 1;
          work[t] = work[t] > 0 ? work[t] / rp : work[t] * rp;
        }
    };
    mark(prompt);
    mark(generated);
  }
  if (params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) {
    std::unordered_map<TokenId, int> counts;
    for (TokenId t : generated)
      if (t >= 0 && t < V) ++counts[t];
    for (auto [t, c] : counts)
      work[t] -= params.presence_penalty + params.frequency_penalty * static_cast<float>(c);
  }
  if (params.greedy())
    return static_cast<TokenId>(std::max_element(work.begin(), work.end()) - work.begin());
  const float inv_t = 1.0f / params.temperature;
  std::vector<std::int32_t> order(static_cast<std::size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::int64_t keep = V;
  if (params.top_k > 0) keep = std::min<std::int64_t>(keep, params.top_k);
  auto by_logit = [&](std::int32_t a, std::int32_t b) {
    return work[a] > work[b] || (work[a] == work[b] && a < b);
  };
  if (keep < V)
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_logit);
  else
    std::sort(order.begin(), order.end(), by_logit);
  std::vector<double> p(static_cast<std::size_t>(keep));
  const double mx = static_cast<double>(work[order[0]]) * inv_t;
  double sum = 0;
  for (std::int64_t i = 0; i < keep; ++i)
    sum += p[i] = std::exp(static_cast<double>(work[order[i]]) * inv_t - mx);
  for (auto &v : p) v /= sum;
  if (params.top_p < 1.0f) {
    double cum = 0;
    std::int64_t n = 0;
    while (n < keep) {
      cum += p[n++];
      if (cum >= params.top_p) break;
    }
    keep = std::max<std::int64_t>(n, 1);
  }
  if (params.min_p > 0.0f) {
    const double floor = params.min_p * p[0];
    std::int64_t n = 1;
    while (n < keep && p[n] >= floor) ++n;
    keep = n;
  }
  double total = 0;
  for (std::int64_t i = 0; i < keep; ++i) total += p[i];
  const double u = draw * total;
  double cum = 0;
  for (std::int64_t i = 0; i < keep; ++i) {
    cum += p[i];
    if (u < cum) return order[i];
  }
  return order[keep - 1];
}

// The old logprobs: a scalar log-sum-exp of the raw logits, in double, and the top n by a
// partial sort of the whole row (the old Sampler computed the logprob for every token).
inline double reference_logprob(std::span<const float> logits, TokenId token, int n,
                                std::vector<std::int32_t> *top = nullptr) {
  float mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, v);
  double s = 0;
  for (float v : logits) s += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(s);
  if (n > 0 && top) {
    std::vector<std::int32_t> idx(logits.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](std::int32_t a, std::int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    top->assign(idx.begin(), idx.begin() + n);
  }
  return logits[token] - lse;
}

}  // namespace keel::test
