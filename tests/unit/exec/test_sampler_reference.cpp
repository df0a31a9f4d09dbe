// The sort-free Sampler against the sort-based one it replaced (sampler_reference.h): the
// same token for the same logits, parameters and draw, over many random rows of every
// shape the walk treats differently (flat, peaked, tied, mostly masked to -inf; small rows
// sorted whole, large ones through the mass histogram; top-k small and large).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/thread_pool.h"
#include "exec/sampler.h"
#include "exec/sampler_top.h"
#include "sampler_reference.h"

namespace keel {
namespace {

SamplingParams param_set(int i) {
  SamplingParams p;
  switch (i % 12) {
    case 0:
      p.temperature = 0;
      break;
    case 1:
      p.temperature = 1.0f;
      break;
    case 2:
      p.temperature = 0.7f;
      break;
    case 3:
      p.top_k = 40;
      break;
    case 4:
      p.temperature = 0.9f, p.top_p = 0.9f;
      break;
    case 5:
      p.temperature = 1.3f, p.min_p = 0.05f;
      break;
    case 6:
      p.temperature = 0.8f, p.top_k = 200, p.top_p = 0.95f, p.min_p = 0.02f;
      break;
    case 7:
      p.temperature = 1.1f, p.top_p = 0.97f, p.repetition_penalty = 1.2f;
      p.presence_penalty = 0.5f, p.frequency_penalty = 0.3f;
      break;
    case 8:
      p.top_p = 0.5f;
      break;
    case 9:
      p.temperature = 2.0f, p.min_p = 0.2f, p.top_p = 0.8f;
      break;
    case 10:
      p.top_k = 30000, p.top_p = 0.99f;
      break;
    default:
      p.temperature = 0.05f;
      break;
  }
  return p;
}

enum class Shape { kFlat, kNormal, kPeaked, kTied, kMasked, kNarrow };

std::vector<float> make_row(std::mt19937 &rng, std::size_t V, Shape shape) {
  const float sigma = shape == Shape::kFlat     ? 0.3f
                      : shape == Shape::kPeaked ? 8.0f
                      : shape == Shape::kNarrow ? 1e-3f
                                                : 3.0f;
  std::normal_distribution<float> nd(0.0f, sigma);
  std::uniform_real_distribution<float> uf(0.0f, 1.0f);
  std::vector<float> row(V);
  for (auto &x : row) {
    x = nd(rng);
    if (shape == Shape::kTied) x = std::round(x * 2.0f) / 2.0f;
    if (shape == Shape::kMasked && uf(rng) < 0.95f) x = -std::numeric_limits<float>::infinity();
  }
  if (shape == Shape::kPeaked) row[rng() % V] += 30.0f;  // one token holds most of the mass
  return row;
}

void compare(std::size_t V, int rows, std::uint32_t seed) {
  std::mt19937 rng(seed);
  int compared = 0;
  for (int r = 0; r < rows; ++r) {
    const Shape shape = static_cast<Shape>(r % 6);
    const auto row = make_row(rng, V, shape);
    std::vector<TokenId> prompt, generated;
    for (int i = 0; i < 20; ++i) prompt.push_back(static_cast<TokenId>(rng() % V));
    for (int i = 0; i < 8; ++i) generated.push_back(static_cast<TokenId>(rng() % 64));
    for (int set = 0; set < 12; ++set) {
      const SamplingParams p = param_set(set + r);
      Sampler sampler(p, seed * 977u + r * 13u + set);
      for (int d = 0; d < 3; ++d) {
        const double u = d == 0 && r % 5 == 0 ? 0.9999999 : sampler.draw_uniform();
        const TokenId want = test::reference_sample(row, p, prompt, generated, u);
        const TokenId got = sampler.sample_with(row, prompt, generated, u).token;
        ASSERT_EQ(got, want) << "V " << V << " row " << r << " shape " << static_cast<int>(shape)
                             << " set " << (set + r) % 12 << " u " << u;
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, rows * 12 * 3);
}

TEST(SamplerVsReference, SmallRowsSortedWhole) { compare(1000, 24, 1); }
TEST(SamplerVsReference, MidRowsThroughTheHistogram) { compare(20000, 24, 2); }
TEST(SamplerVsReference, QwenVocabRows) { compare(151936, 6, 3); }

// A row's passes split over a pool (a step of one row) give bit for bit what one thread
// gives, whatever the pool's size.
TEST(SamplerVsReference, PoolSplitGivesTheSameTokensAndLogprobs) {
  std::mt19937 rng(21);
  ThreadPool two(2), three(3);
  for (int r = 0; r < 6; ++r) {
    const auto row = make_row(rng, 151936, static_cast<Shape>(r % 6));
    for (int set = 0; set < 12; ++set) {
      SamplingParams p = param_set(set);
      p.logprobs = 2;
      Sampler a(p, 40 + r), b(p, 40 + r), c(p, 40 + r);
      for (int d = 0; d < 3; ++d) {
        const auto ra = a.sample(row, {}, {});
        const auto rb = b.sample(row, {}, {}, &two);
        const auto rc = c.sample(row, {}, {}, &three);
        ASSERT_EQ(ra.token, rb.token) << r << " " << set;
        ASSERT_EQ(ra.token, rc.token) << r << " " << set;
        EXPECT_EQ(ra.logprob, rb.logprob);
        EXPECT_EQ(ra.logprob, rc.logprob);
      }
    }
  }
}

// The top-N logprobs of a row sampled through the mass histogram come from its first
// buckets: the same entries, in the same order (logit descending, id ascending), as a sort
// or selection over the whole row, on every shape (ties across bucket edges, rows masked to -inf,
// narrow rows in one bucket) and for N past the finite entries.
TEST(SamplerVsReference, TopLogprobsFromTheHistogramMatchASort) {
  std::mt19937 rng(33);
  for (int r = 0; r < 12; ++r) {
    auto row = make_row(rng, 20000, static_cast<Shape>(r % 6));
    if (r == 11) row[7] = std::numeric_limits<float>::quiet_NaN();
    for (const int n : {1, 5, 20, 1500}) {
      for (const float top_p : {1.0f, 0.9f}) {
        SamplingParams p;
        p.temperature = r % 2 ? 1.0f : 0.7f;
        p.top_p = top_p;
        p.logprobs = n;
        Sampler s(p, 7 + r);
        const SampledToken got = s.sample(row, {}, {});
        std::vector<std::uint64_t> want;  // the selection over the whole row (NaN as -inf)
        select_top(row, n, want);
        ASSERT_EQ(got.top.size(), want.size()) << r << " " << n;
        for (std::size_t i = 0; i < want.size(); ++i)
          ASSERT_EQ(got.top[i].token, key_id(want[i])) << r << " " << n << " " << i;
      }
    }
  }
}

// NaN logits (either sign) rank and weigh as -inf: the same tokens as the row with -inf in
// their place, never a NaN token, and no bucket out of range.
TEST(SamplerVsReference, NanLogitsActAsMinusInfinity) {
  std::mt19937 rng(33);
  for (int r = 0; r < 4; ++r) {
    auto row = make_row(rng, 151936, Shape::kNormal);
    auto masked = row;
    for (std::size_t i = r; i < row.size(); i += 7) {
      row[i] = (i / 7) % 2 ? std::numeric_limits<float>::quiet_NaN()
                           : -std::numeric_limits<float>::quiet_NaN();
      masked[i] = -std::numeric_limits<float>::infinity();
    }
    for (int set = 0; set < 12; ++set) {
      const SamplingParams p = param_set(set);
      Sampler a(p, 70 + r), b(p, 70 + r);
      for (int d = 0; d < 3; ++d) {
        const TokenId got = a.sample(row, {}, {}).token;
        EXPECT_EQ(got, b.sample(masked, {}, {}).token) << r << " " << set;
        EXPECT_FALSE(std::isnan(row[got]));
      }
    }
  }
}

// Logprobs, asked for: those of the raw logits (before penalties), the top N best first.
TEST(SamplerVsReference, LogprobsOnlyWhenAskedAndOfTheRawLogits) {
  std::mt19937 rng(9);
  const auto row = make_row(rng, 50000, Shape::kNormal);
  double m = -1e30;
  for (float x : row) m = std::max<double>(m, x);
  double s = 0;
  for (float x : row) s += std::exp(static_cast<double>(x) - m);
  const double lse = m + std::log(s);
  for (float t : {0.0f, 1.0f, 0.6f}) {
    SamplingParams p;
    p.temperature = t;
    p.repetition_penalty = t == 0.6f ? 1.5f : 1.0f;
    p.logprobs = 5;
    Sampler sampler(p, 4);
    const std::vector<TokenId> prompt = {1, 2, 3};
    const auto r = sampler.sample(row, prompt, {});
    EXPECT_NEAR(r.logprob, row[r.token] - lse, 1e-5) << t;
    ASSERT_EQ(r.top.size(), 5u);
    std::vector<std::int32_t> idx(row.size());
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<std::int32_t>(i);
    std::partial_sort(idx.begin(), idx.begin() + 5, idx.end(),
                      [&](int a, int b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(r.top[i].token, idx[i]);
      EXPECT_NEAR(r.top[i].logprob, row[idx[i]] - lse, 1e-5);
    }
    p.logprobs = -1;
    Sampler quiet(p, 4);
    const auto q = quiet.sample(row, prompt, {});
    EXPECT_EQ(q.token, r.token);  // the same choice, without the logprob work
    EXPECT_TRUE(q.top.empty());
  }
}

}  // namespace
}  // namespace keel
