#include "exec/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "exec/cpu/vec_math.h"
#include "exec/sampler_buckets.h"
#include "exec/sampler_top.h"

namespace keel {

namespace {

// Rows up to this size are sorted whole (cheaper than the histogram's fixed cost).
constexpr std::size_t kSortWholeBelow = 4096;

// The walk over candidates sorted by (logit desc, id asc) -- the first `keys.size()`
// entries of the sorted row: their probabilities at the temperature, then top-p, min-p,
// and the first candidate whose cumulative probability exceeds u times the kept total.
TokenId walk_sorted(std::span<const float> w, std::span<const std::uint64_t> keys, float inv_t,
                    const SamplingParams &params, double u, std::vector<double> &p) {
  const std::int64_t n = static_cast<std::int64_t>(keys.size());
  const double mx = static_cast<double>(w[key_id(keys[0])]) * inv_t;
  p.resize(keys.size());
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i)
    sum += p[i] = cpu::exp_nonpos(cpu::fmadd(static_cast<double>(w[key_id(keys[i])]), inv_t, -mx));
  for (auto &v : p) v /= sum;
  std::int64_t keep = n;
  if (params.top_p < 1.0f) {
    double cum = 0;
    std::int64_t m = 0;
    while (m < keep) {
      cum += p[m++];
      if (cum >= params.top_p) break;
    }
    keep = std::max<std::int64_t>(m, 1);
  }
  if (params.min_p > 0.0f) {
    const double floor = params.min_p * p[0];
    std::int64_t m = 1;
    while (m < keep && p[m] >= floor) ++m;
    keep = m;
  }
  double total = 0;
  for (std::int64_t i = 0; i < keep; ++i) total += p[i];
  const double target = u * total;
  double cum = 0;
  for (std::int64_t i = 0; i < keep; ++i) {
    cum += p[i];
    if (target < cum) return key_id(keys[i]);
  }
  return key_id(keys[keep - 1]);
}

// The same walk over the whole row through its mass histogram: each cut and the draw are
// found as the first sorted position where a cumulative probability is reached.
TokenId walk_buckets(MassBuckets &mb, std::int64_t V, const SamplingParams &params, double u) {
  std::int64_t keep = V;
  double total = -1;  // the kept candidates' probability, once known
  if (params.top_p < 1.0f) {
    const double top_p = params.top_p;
    const auto hit = mb.first_reaching(V, [&](double cum) { return cum >= top_p; });
    if (hit.found) keep = hit.pos + 1, total = hit.cum;
  }
  if (params.min_p > 0.0f) {
    // q of the top entry is 1 / mass (its p is exp(0)).
    const auto c = mb.count_at_least(params.min_p * (1.0 / mb.mass()));
    const std::int64_t n = std::max<std::int64_t>(c.n, 1);
    if (n < keep) keep = n, total = c.q;
  }
  if (total < 0) {
    const auto all = mb.first_reaching(V, [](double) { return false; });
    total = all.cum;
  }
  const double target = u * total;
  const auto hit = mb.first_reaching(keep, [&](double cum) { return target < cum; });
  return hit.found ? hit.id : mb.id_at(keep - 1);
}

}  // namespace

SampledToken logprobs_of(std::span<const float> logits, TokenId token, int n) {
  SampledToken r;
  r.token = token;
  const double lse = cpu::log_sum_exp(logits);
  r.logprob = static_cast<float>(logits[token] - lse);
  n = std::clamp<int>(n, 0, static_cast<int>(logits.size()));
  if (n > 0) {
    std::vector<std::uint64_t> keys;
    select_top(logits, n, keys);
    for (std::uint64_t k : keys)
      r.top.push_back({key_id(k), static_cast<float>(logits[key_id(k)] - lse)});
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

Sampler::~Sampler() = default;
Sampler::Sampler(Sampler &&) noexcept = default;

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

SampledToken Sampler::sample(std::span<const float> logits, std::span<const TokenId> prompt,
                             std::span<const TokenId> generated, ThreadPool *pool) {
  if (logits.empty()) throw Error(ErrorCode::kInternal, "sampler: empty logits");
  return sample_with(logits, prompt, generated, draw_uniform(), pool);
}

TokenId Sampler::choose(std::span<const float> w, double u, double &lse_t1, ThreadPool *pool) {
  const std::size_t V = w.size();
  const float inv_t = 1.0f / params_.temperature;
  const std::int64_t k = params_.top_k > 0 ? std::min<std::int64_t>(params_.top_k, V) : V;
  std::vector<double> p;
  if (k < static_cast<std::int64_t>(V) || V < kSortWholeBelow) {
    select_top(w, k, keys_);
    return walk_sorted(w, keys_, inv_t, params_, u, p);
  }
  const auto [wmax, wmin] = cpu::max_and_min_finite(w);
  // No finite top (every entry -inf or NaN, or a +inf): no distribution to draw from.
  if (!(wmax > -std::numeric_limits<float>::infinity()) ||
      wmax == std::numeric_limits<float>::infinity())
    return static_cast<TokenId>(cpu::first_argmax(w));
  if (!buckets_) buckets_ = std::make_unique<MassBuckets>();
  buckets_->build(w, inv_t, wmax, wmin, pool);
  built_ = w.data();
  if (inv_t == 1.0f) lse_t1 = static_cast<double>(wmax) + std::log(buckets_->mass());
  return walk_buckets(*buckets_, static_cast<std::int64_t>(V), params_, u);
}

SampledToken Sampler::sample_with(std::span<const float> logits, std::span<const TokenId> prompt,
                                  std::span<const TokenId> generated, double draw,
                                  ThreadPool *pool) {
  const std::int64_t V = static_cast<std::int64_t>(logits.size());
  if (V == 0) throw Error(ErrorCode::kInternal, "sampler: empty logits");
  std::span<const float> w = logits;
  const bool repetition = params_.repetition_penalty != 1.0f;
  const bool additive = params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f;
  if (repetition || additive) {
    work_.assign(logits.begin(), logits.end());
    w = work_;
  }
  if (repetition) {  // once per distinct token of the prompt and the output
    const float rp = params_.repetition_penalty;
    std::vector<TokenId> seen(prompt.begin(), prompt.end());
    seen.insert(seen.end(), generated.begin(), generated.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (TokenId t : seen)
      if (t >= 0 && t < V) work_[t] = work_[t] > 0 ? work_[t] / rp : work_[t] * rp;
  }
  if (additive) {  // presence once and frequency per occurrence, of output tokens
    std::vector<TokenId> out(generated.begin(), generated.end());
    std::sort(out.begin(), out.end());
    for (std::size_t i = 0; i < out.size();) {
      std::size_t j = i;
      while (j < out.size() && out[j] == out[i]) ++j;
      const TokenId t = out[i];
      if (t >= 0 && t < V)
        work_[t] -=
            params_.presence_penalty + params_.frequency_penalty * static_cast<float>(j - i);
      i = j;
    }
  }

  double lse = std::numeric_limits<double>::quiet_NaN();
  built_ = nullptr;
  SampledToken r;
  r.token =
      params_.greedy() ? static_cast<TokenId>(cpu::first_argmax(w)) : choose(w, draw, lse, pool);
  if (params_.logprobs < 0) return r;
  // Logprobs are of the raw logits: the walk's normaliser serves when it was theirs.
  if (w.data() != logits.data() || std::isnan(lse)) lse = cpu::log_sum_exp(logits, pool);
  r.logprob = static_cast<float>(logits[r.token] - lse);
  if (params_.logprobs > 0) {
    // The walk's histogram of this very row finds the top entries with one scan.
    if (built_ != logits.data() || !buckets_->top(params_.logprobs, keys_))
      select_top(logits, params_.logprobs, keys_);
    for (std::uint64_t k : keys_)
      r.top.push_back({key_id(k), static_cast<float>(logits[key_id(k)] - lse)});
  }
  return r;
}

}  // namespace keel
