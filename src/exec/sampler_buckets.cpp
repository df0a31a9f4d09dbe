#include "exec/sampler_buckets.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "exec/cpu/vec_math.h"
#include "exec/sampler_top.h"

namespace keel {

namespace {

// x = w / T - max / T (<= 0); the bucket of its distance g = -x below the top. Buckets are
// centred: bucket b holds g * scale in [b - 1/2, b + 1/2] (rounded to the nearest by adding
// 2^52, which vectorizes where a float-to-int conversion of an unbounded value does not).
// Far (>= gmax) and -inf entries go last, and so do NaN ones, whichever their sign bit (a
// negative NaN's bits read as a negative integer: the unsigned compare sends it last).
inline int bucket_for(double x, double scale) {
  constexpr double kShifter = 0x1.0p52;
  constexpr std::uint64_t kLast = MassBuckets::kBuckets - 1;
  const double t = -x * scale + kShifter;  // g * scale >= 0, its nearest integer in the low bits
  const auto b = std::bit_cast<std::uint64_t>(t) - std::bit_cast<std::uint64_t>(kShifter);
  return static_cast<int>(b < kLast ? b : kLast);
}

// Calls f(i) for every i with bucket[i] == b, a block at a time: the test of a block
// vectorizes (32 entries a register), and most blocks hold no entry of one bucket.
template <typename F>
void scan_bucket(std::span<const std::uint16_t> bucket, std::uint16_t b, F f) {
  constexpr std::size_t kBlock = 128;
  for (std::size_t b0 = 0; b0 < bucket.size(); b0 += kBlock) {
    const std::size_t e = std::min(bucket.size(), b0 + kBlock);
    int any = 0;
    for (std::size_t i = b0; i < e; ++i) any |= bucket[i] == b;
    if (!any) continue;
    for (std::size_t i = b0; i < e; ++i)
      if (bucket[i] == b) f(i);
  }
}

}  // namespace

void MassBuckets::build(std::span<const float> w, float inv_t, float wmax, float wmin,
                        ThreadPool *pool) {
  w_ = w;
  inv_t_ = inv_t;
  mx_ = static_cast<double>(wmax) * inv_t_;  // exact: a float times a float
  const double range = mx_ - static_cast<double>(wmin) * inv_t_;
  gmax_ = range > 0 ? std::min(kGapMax, range) : 1.0;  // the buckets span the row's range
  scale_ = kBuckets / gmax_;
  if (acc_.size() != kParts) acc_.resize(kParts);
  bucket_.resize(w.size());
  for (auto &c : cache_) c.bucket = -1;
  // p = exp(-g) of an entry g nats below the top is exp(-c) * exp(c - g) with c the
  // centre of its bucket: |c - g| <= half a bucket (< 0.006 nats), where a degree-6
  // polynomial is exact to double rounding (truncation < 1e-19), so the pass costs a
  // fraction of a full exp per entry. Each bucket sums exp(c - g); exp(-c) scales it
  // after. Entries past the last bucket's far edge (> 48 nats: p < 2e-21, all of them
  // together below one rounding of the sum), -inf and NaN add nothing.
  // The row is cut into kParts fixed parts (the device sampler's parts), each with its own
  // histograms, merged in part order: the same sums whatever the pool's size.
  constexpr std::size_t kChunk = 512;
  const std::size_t chunks = (w.size() + kChunk - 1) / kChunk;
  const double inv_t_d = inv_t_, mx = mx_, scale = scale_, width = 1.0 / scale_;
  const double cut = gmax_ + width;
  auto part = [&](std::size_t p) {
    auto &acc = acc_[p];
    for (auto &h : acc) h.fill({0.0, 0.0});
    double e[kChunk];
    int bk[kChunk];
    for (std::size_t ci = chunks * p / kParts; ci < chunks * (p + 1) / kParts; ++ci) {
      const std::size_t c0 = ci * kChunk, n = std::min(kChunk, w.size() - c0);
      const float *x = w.data() + c0;
      std::uint16_t *bkt = bucket_.data() + c0;
      for (std::size_t j = 0; j < n; ++j) {  // vectorized (no branch: masks)
        const double s = cpu::fmadd(static_cast<double>(x[j]), inv_t_d, -mx);
        const int b = bucket_for(s, scale);
        const double d = cpu::fmadd(static_cast<double>(b), width, s);  // c - g
        double q = 1.0 / 720;
        q = cpu::fmadd(q, d, 1.0 / 120);
        q = cpu::fmadd(q, d, 1.0 / 24);
        q = cpu::fmadd(q, d, 1.0 / 6);
        q = cpu::fmadd(q, d, 0.5);
        q = cpu::fmadd(q, d, 1.0);
        q = cpu::fmadd(q, d, 1.0);
        const std::uint64_t keep = std::uint64_t{0} - static_cast<std::uint64_t>(-s < cut);
        e[j] = std::bit_cast<double>(std::bit_cast<std::uint64_t>(q) & keep);
        bk[j] = b;
        bkt[j] = static_cast<std::uint16_t>(b);
      }
      // The scatter: one 16-byte add per entry, alternating between two histograms so
      // that neighbours in one bucket do not wait on each other's store.
      std::size_t j = 0;
      for (; j + 2 <= n; j += 2) {
        acc[0][bk[j]][0] += e[j];
        acc[0][bk[j]][1] += 1.0;
        acc[1][bk[j + 1]][0] += e[j + 1];
        acc[1][bk[j + 1]][1] += 1.0;
      }
      for (; j < n; ++j) {
        acc[0][bk[j]][0] += e[j];
        acc[0][bk[j]][1] += 1.0;
      }
    }
  };
  if (pool && pool->size() > 1)
    pool->parallel_for(kParts, [&](std::int64_t a, std::int64_t b) {
      for (std::int64_t p = a; p < b; ++p) part(static_cast<std::size_t>(p));
    });
  else
    for (std::size_t p = 0; p < kParts; ++p) part(p);
  for (int b = 0; b < kBuckets; ++b) {
    double m = 0, c = 0;
    for (const auto &acc : acc_) m += acc[0][b][0] + acc[1][b][0], c += acc[0][b][1] + acc[1][b][1];
    mass_[b] = m == 0 ? 0.0 : m * std::exp(-b * width);
    count_[b] = static_cast<std::int32_t>(c);
  }
  mass_total_ = 0;
  for (double m : mass_) mass_total_ += m;  // bucket order: close to the sorted order
}

double MassBuckets::prob(float w) const {
  return cpu::exp_nonpos(cpu::fmadd(static_cast<double>(w), inv_t_, -mx_));
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
  scan_bucket(bucket_, static_cast<std::uint16_t>(b), [&](std::size_t i) {
    c.keys.push_back(sample_key(w_[i], static_cast<std::int32_t>(i)));
  });
  if (sorted) std::sort(c.keys.begin(), c.keys.end());
  return c.keys;
}

MassBuckets::Count MassBuckets::count_at_least(double floor) {
  constexpr double kSlack = 1e-9;  // relative, far above rounding
  Count r;
  for (int b = 0; b < kBuckets; ++b) {
    if (count_[b] == 0) continue;
    // p in the bucket lies in (p_lo, p_hi].
    const double p_hi = std::exp(-(b - 0.5) / scale_);
    const double p_lo = b == kBuckets - 1 ? 0.0 : std::exp(-(b + 0.5) / scale_);
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
