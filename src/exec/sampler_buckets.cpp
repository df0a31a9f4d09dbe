#include "exec/sampler_buckets.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "exec/cpu/vec_math.h"
#include "exec/sampler_top.h"

namespace keel {

namespace {

// x = w / T - max / T (<= 0); the bucket of its distance below the top. One definition for
// the vectorized build and the scalar checks, so both put an entry in the same bucket.
inline int bucket_for(double x, double gmax, double scale) {
  const double g = -x;
  return g < gmax ? std::min(static_cast<int>(g * scale), MassBuckets::kBuckets - 1)
                  : MassBuckets::kBuckets - 1;  // far, -inf or NaN
}

}  // namespace

void MassBuckets::build(std::span<const float> w, float inv_t, float wmax, float wmin) {
  w_ = w;
  inv_t_ = inv_t;
  mx_ = static_cast<double>(wmax) * inv_t_;  // exact: a float times a float
  const double range = mx_ - static_cast<double>(wmin) * inv_t_;
  gmax_ = range > 0 ? std::min(kGapMax, range) : 1.0;  // the buckets span the row's range
  scale_ = kBuckets / gmax_;
  mass_.fill(0.0);
  count_.fill(0);
  for (auto &c : cache_) c.bucket = -1;
  constexpr std::size_t kChunk = 512;
  double p[kChunk];
  int bk[kChunk];
  const double inv_t_d = inv_t_, mx = mx_, gmax = gmax_, scale = scale_;
  for (std::size_t c0 = 0; c0 < w.size(); c0 += kChunk) {
    const std::size_t n = std::min(kChunk, w.size() - c0);
    const float *x = w.data() + c0;
    for (std::size_t j = 0; j < n; ++j) {  // vectorized: exp and bucket
      const double s = cpu::fmadd(static_cast<double>(x[j]), inv_t_d, -mx);
      p[j] = cpu::exp_nonpos(s);
      bk[j] = bucket_for(s, gmax, scale);
    }
    for (std::size_t j = 0; j < n; ++j) {  // the scatter
      mass_[bk[j]] += p[j];
      ++count_[bk[j]];
    }
  }
  mass_total_ = 0;
  for (double m : mass_) mass_total_ += m;  // bucket order: close to the sorted order
}

double MassBuckets::prob(float w) const {
  return cpu::exp_nonpos(cpu::fmadd(static_cast<double>(w), inv_t_, -mx_));
}

int MassBuckets::bucket_of(float w) const {
  return bucket_for(cpu::fmadd(static_cast<double>(w), inv_t_, -mx_), gmax_, scale_);
}

const std::vector<std::uint64_t> &MassBuckets::entries(int b, bool sorted) {
  for (Cached &c : cache_)
    if (c.bucket == b) {
      if (sorted && !c.sorted) std::sort(c.keys.begin(), c.keys.end());
      c.sorted = c.sorted || sorted;
      return c.keys;
    }
  Cached &c = cache_[next_slot_];
  next_slot_ = (next_slot_ + 1) % static_cast<int>(cache_.size());
  c.bucket = b;
  c.sorted = sorted;
  c.keys.clear();
  // The bucket's logit interval, widened far beyond rounding; bucket_of() decides.
  const double width = 1.0 / (scale_ * inv_t_);
  const double hi_d = (mx_ - b / scale_) / inv_t_;
  const float hi = static_cast<float>(hi_d + 0.5 * width + 1e-6 * std::abs(hi_d));
  const bool last = b == kBuckets - 1;
  float lo = -std::numeric_limits<float>::infinity();
  if (!last) {
    const double lo_d = (mx_ - (b + 1) / scale_) / inv_t_;
    lo = static_cast<float>(lo_d - 0.5 * width - 1e-6 * std::abs(lo_d));
  }
  const std::size_t V = w_.size();
  constexpr std::size_t kBlock = 64;
  for (std::size_t b0 = 0; b0 < V; b0 += kBlock) {
    const std::size_t e = std::min(V, b0 + kBlock);
    int any = 0;
    for (std::size_t i = b0; i < e; ++i)  // vectorized; NaN only counts for the last
      any |= last ? !(w_[i] > hi) : (w_[i] >= lo && w_[i] <= hi);
    if (!any) continue;
    for (std::size_t i = b0; i < e; ++i)
      if (bucket_of(w_[i]) == b) c.keys.push_back(sample_key(w_[i], static_cast<std::int32_t>(i)));
  }
  if (sorted) std::sort(c.keys.begin(), c.keys.end());
  return c.keys;
}

MassBuckets::Count MassBuckets::count_at_least(double floor) {
  constexpr double kSlack = 1e-9;  // relative, far above rounding
  Count r;
  for (int b = 0; b < kBuckets; ++b) {
    if (count_[b] == 0) continue;
    // p in the bucket lies in (p_lo, p_hi].
    const double p_hi = std::exp(-b / scale_);
    const double p_lo = b == kBuckets - 1 ? 0.0 : std::exp(-(b + 1) / scale_);
    if (p_lo / mass_total_ > floor * (1 + kSlack)) {
      r.n += count_[b];
      r.q += mass_[b] / mass_total_;
      continue;
    }
    if (p_hi / mass_total_ * (1 + kSlack) < floor) break;
    for (std::uint64_t key : entries(b, false)) {
      const double q = prob(w_[key_id(key)]) / mass_total_;
      if (q >= floor) ++r.n, r.q += q;
    }
  }
  return r;
}

std::int32_t MassBuckets::id_at(std::int64_t pos) {
  std::int64_t start = 0;
  for (int b = 0; b < kBuckets; ++b) {
    if (pos < start + count_[b]) return key_id(entries(b, true)[pos - start]);
    start += count_[b];
  }
  return 0;  // pos beyond the row: not reached by the Sampler
}

}  // namespace keel
