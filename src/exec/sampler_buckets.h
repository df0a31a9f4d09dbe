// The walk over a row in the sampler's order (logit descending, id ascending) without
// sorting the row, for top-p, min-p and plain temperature: the device sampler's method
// (exec/cuda/k_sample.cu) on the host. One vectorized pass computes every entry's
// probability p = exp(w / T - max / T) and adds it to a histogram of count and mass by
// its distance below the top (buckets are monotone in the logit, so they cut the sorted
// row into consecutive runs). Walks then skip whole buckets by their mass and sort only
// the buckets where the cumulative probability they look for is reached.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"

namespace keel {

class MassBuckets {
 public:
  static constexpr int kBuckets = 2048;
  static constexpr double kGapMax = 48.0;  // nats; farther entries share the last bucket

  // w: [V] logits after penalties; inv_t: 1 / temperature (as the Sampler rounds it);
  // wmax: max(w), finite; wmin: the smallest finite entry. pool (optional) computes the
  // parts in parallel; the result does not depend on it.
  void build(std::span<const float> w, float inv_t, float wmax, float wmin,
             ThreadPool *pool = nullptr);

  // The sum of p over the row: the softmax's normaliser at this temperature.
  double mass() const { return mass_total_; }
  // p of one entry (build() summed it as exp(-c) * exp(c - g): the same to a rounding).
  double prob(float w) const;

  struct Hit {
    bool found = false;
    std::int64_t pos = 0;  // sorted position (found), else the positions walked
    double cum = 0;        // inclusive cumulative q = p / mass() at pos (found)
    std::int32_t id = 0;   // the entry at pos (found)
  };
  // The first sorted position below `limit` whose inclusive cumulative q satisfies
  // `reached` (monotone: false, then true).
  template <typename Reached>
  Hit first_reaching(std::int64_t limit, Reached reached);

  // How many entries have q = p / mass() >= floor, and the sum of their q.
  struct Count {
    std::int64_t n = 0;
    double q = 0;
  };
  Count count_at_least(double floor);

  // The n first entries of the row in the sampler's order (logit descending, id
  // ascending) as sample keys: the buckets are monotone in the logit, so they lie in the
  // first buckets holding n entries, found by one scan. False (keys empty) when those
  // reach the last bucket (-inf, NaN, far entries): select_top then.
  bool top(std::int64_t n, std::vector<std::uint64_t> &keys) const;

  // The id at sorted position pos (< V).
  std::int32_t id_at(std::int64_t pos);

 private:
  // Bucket b's entries as sample keys (sorted when `sorted`), cached for the row.
  const std::vector<std::uint64_t> &entries(int b, bool sorted);

  std::span<const float> w_;
  double inv_t_ = 1, mx_ = 0, gmax_ = 1, scale_ = 1, mass_total_ = 0;
  std::array<double, kBuckets> mass_{};
  std::array<std::int32_t, kBuckets> count_{};
  std::vector<std::uint16_t> bucket_;  // [V] each entry's bucket
  // build()'s histograms: per bucket the sum of exp(c - g) in fixed point (integer sums
  // are exact in any order, so one histogram serves a whole row on one thread, and parts
  // on a pool merge to the same sums) beside the count, the pair added as one 16-byte
  // vector. kCopies interleaved copies, so that neighbours in one bucket (a row masked
  // to -inf) do not wait on each other's store.
  static constexpr std::size_t kParts = 4, kCopies = 2;
  using MassCount = std::int64_t __attribute__((vector_size(16)));  // {mass, count}
  using Histogram = std::array<std::array<MassCount, kBuckets>, kCopies>;
  std::vector<Histogram> acc_;  // [kParts] on a pool, [1] on one thread
  struct Cached {
    int bucket = -1;
    bool sorted = false;
    std::vector<std::uint64_t> keys;
  };
  std::array<Cached, 4> cache_;  // a walk needs one or two buckets; a row needs a few walks
  int next_slot_ = 0;
};

template <typename Reached>
MassBuckets::Hit MassBuckets::first_reaching(std::int64_t limit, Reached reached) {
  // Whole buckets are skipped while their end, plus a margin far above the rounding of
  // the two summation orders, does not reach; the others are walked entry by entry.
  constexpr double kSlack = 1e-10;
  const double inv_mass = 1.0 / mass_total_;
  Hit h;
  double cum = 0;
  std::int64_t pos = 0;
  for (int b = 0; b < kBuckets && pos < limit; ++b) {
    const std::int64_t c = count_[b];
    if (c == 0) continue;
    const double end = cum + mass_[b] * inv_mass;
    if (pos + c <= limit && !reached(end + kSlack)) {
      cum = end;
      pos += c;
      continue;
    }
    for (std::uint64_t key : entries(b, true)) {
      if (pos >= limit) break;
      const std::int32_t id = static_cast<std::int32_t>(key & 0xffffffffu);
      cum += prob(w_[id]) / mass_total_;
      if (reached(cum)) return Hit{true, pos, cum, id};
      ++pos;
    }
  }
  h.pos = pos;
  h.cum = cum;
  return h;
}

}  // namespace keel
