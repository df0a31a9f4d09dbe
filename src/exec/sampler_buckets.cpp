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

// Calls f(i) for every i with bucket[i] <= last (ascending i) whose bucket is at least
// first: a block at a time, the test of a block vectorizes (32 entries a register), and
// most blocks hold no entry of the few buckets asked for.
template <typename F>
void scan_buckets(std::span<const std::uint16_t> bucket, std::uint16_t first, std::uint16_t last,
                  F f) {
  constexpr std::size_t kBlock = 128;
  const std::uint16_t span = static_cast<std::uint16_t>(last - first);
  for (std::size_t b0 = 0; b0 < bucket.size(); b0 += kBlock) {
    const std::size_t e = std::min(bucket.size(), b0 + kBlock);
    int any = 0;
    for (std::size_t i = b0; i < e; ++i)
      any |= static_cast<std::uint16_t>(bucket[i] - first) <= span;
    if (!any) continue;
    for (std::size_t i = b0; i < e; ++i)
      if (static_cast<std::uint16_t>(bucket[i] - first) <= span) f(i);
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
  // The row is cut into kParts fixed parts (the device sampler's parts); on a pool each
  // part fills its own histogram. The sums are integers, so the merge gives the same
  // values whatever the pool's size.
  constexpr std::size_t kChunk = 512;
  // Fixed point of exp(c - g) (<= 1.006): 2^40 per unit rounds each term by < 5e-13 of
  // it, far below the walks' slack, and a bucket holds 8 million entries before overflow.
  constexpr double kFix = 0x1.0p40, kShifter = 0x1.0p52;
  const std::size_t chunks = (w.size() + kChunk - 1) / kChunk;
  const double inv_t_d = inv_t_, mx = mx_, scale = scale_, width = 1.0 / scale_;
  const double cut = gmax_ + width;
  const bool split = pool && pool->size() > 1;
  acc_.resize(split ? kParts : 1);
  for (Histogram &h : acc_)
    for (auto &copy : h) copy.fill(MassCount{0, 0});
  auto part = [&](std::size_t p) {
    Histogram &acc = acc_[split ? p : 0];
    std::int64_t e[kChunk];
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
        q = std::bit_cast<double>(std::bit_cast<std::uint64_t>(q) & keep);
        // round(q * 2^40): the shifter leaves it in the low bits.
        e[j] = std::bit_cast<std::int64_t>(cpu::fmadd(q, kFix, kShifter)) -
               std::bit_cast<std::int64_t>(kShifter);
        bkt[j] = static_cast<std::uint16_t>(b);
      }
      // The scatter, alternating between the copies.
      std::size_t j = 0;
      for (; j + kCopies <= n; j += kCopies)
        for (std::size_t k = 0; k < kCopies; ++k) acc[k][bkt[j + k]] += MassCount{e[j + k], 1};
      for (; j < n; ++j) acc[0][bkt[j]] += MassCount{e[j], 1};
    }
  };
  if (split)
    pool->parallel_for(kParts, [&](std::int64_t a, std::int64_t b) {
      for (std::int64_t p = a; p < b; ++p) part(static_cast<std::size_t>(p));
    });
  else
    for (std::size_t p = 0; p < kParts; ++p) part(p);
  for (int b = 0; b < kBuckets; ++b) {
    std::int64_t m = 0, c = 0;
    for (const Histogram &h : acc_)
      for (const auto &copy : h) m += copy[b][0], c += copy[b][1];
    mass_[b] = m == 0 ? 0.0 : static_cast<double>(m) / kFix * std::exp(-b * width);
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
  const auto bb = static_cast<std::uint16_t>(b);
  scan_buckets(bucket_, bb, bb, [&](std::size_t i) {
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

bool MassBuckets::top(std::int64_t n, std::vector<std::uint64_t> &keys) const {
  keys.clear();
  if (n <= 0) return true;
  // The first buckets holding n entries, short of the last (where -inf and NaN go).
  std::int64_t have = 0;
  int last = 0;
  while (last < kBuckets - 1 && have + count_[last] < n) have += count_[last++];
  if (last == kBuckets - 1) return false;
  scan_buckets(bucket_, 0, static_cast<std::uint16_t>(last), [&](std::size_t i) {
    keys.push_back(sample_key(w_[i], static_cast<std::int32_t>(i)));
  });
  const auto mid = keys.begin() + std::min<std::int64_t>(n, keys.size());
  std::partial_sort(keys.begin(), mid, keys.end());
  keys.erase(mid, keys.end());
  return true;
}

}  // namespace keel
