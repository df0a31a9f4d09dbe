// gpt-oss's attention sinks in both CPU attention paths (the blocked one, whose online
// softmax starts from the sink, and the per-token one) and in the double reference,
// against the formula written out here in double: p_j = exp(s_j) / (sum_i exp(s_i) +
// exp(sink_h)), out = sum_j p_j v_j; with sinks far above and below the scores, a sliding
// window, GQA, and prompt, short and decode rows in one batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "exec/cpu/attention.h"

namespace keel::cpu {
namespace {

std::vector<float> randn(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto &x : v) x = nd(rng);
  return v;
}

// out[i, h, :] for queries at positions len - n .. len - 1 over plain K/V [len, G, D].
std::vector<double> direct(const std::vector<float> &q, const std::vector<float> &k,
                           const std::vector<float> &v, std::int64_t n, std::int64_t len,
                           std::int64_t H, std::int64_t G, std::int64_t D, double scale,
                           std::int64_t window, const std::vector<float> &sinks) {
  std::vector<double> out(static_cast<std::size_t>(n * H * D), 0.0);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t p = len - n + i;
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / (H / G);
      double denom = std::exp(static_cast<double>(sinks[h]));
      std::vector<double> e(static_cast<std::size_t>(p + 1), 0.0);
      for (std::int64_t j = 0; j <= p; ++j) {
        if (window > 0 && j <= p - window) continue;
        double s = 0;
        for (std::int64_t d = 0; d < D; ++d)
          s += static_cast<double>(q[(i * H + h) * D + d]) * k[(j * G + g) * D + d];
        e[j] = std::exp(s * scale);
        denom += e[j];
      }
      for (std::int64_t j = 0; j <= p; ++j)
        for (std::int64_t d = 0; d < D; ++d)
          out[(i * H + h) * D + d] += e[j] / denom * v[(j * G + g) * D + d];
    }
  }
  return out;
}

void check_sinks(std::int64_t H, std::int64_t G, std::int64_t D, std::int64_t window,
                 const std::vector<float> &sinks) {
  constexpr std::int32_t kBs = 16;
  struct Seq {
    std::int64_t start, n;
  };
  const std::vector<Seq> seqs = {{21, 90}, {0, 7}, {40, 1}};  // a chunk, a short prompt, a decode
  CpuKvStore kv(32, kBs, 1, G, D);
  ForwardBatch b;
  std::vector<std::int32_t> seq, pos;
  std::vector<std::vector<float>> ks, vs;
  std::int32_t next_block = 0;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const std::int64_t len = seqs[i].start + seqs[i].n;
    // Keys scaled so that scores spread over a few units, as trained models' do.
    ks.push_back(randn(len * G * D, 11 + i, 0.5f));
    vs.push_back(randn(len * G * D, 21 + i));
    const std::int32_t blocks = static_cast<std::int32_t>((len + kBs - 1) / kBs);
    b.seqs.push_back({static_cast<std::int32_t>(seq.size()), static_cast<std::int32_t>(seqs[i].n),
                      static_cast<std::int32_t>(seqs[i].start),
                      static_cast<std::int32_t>(b.block_table.size()), blocks,
                      SequenceSlice::Logits::kLast});
    for (std::int32_t j = 0; j < blocks; ++j) b.block_table.push_back(next_block++);
    for (std::int64_t p = 0; p < len; ++p)
      for (int kind = 0; kind < 2; ++kind) {
        const auto &src = kind == 0 ? ks.back() : vs.back();
        std::copy(src.begin() + p * G * D, src.begin() + (p + 1) * G * D,
                  kv.row(b.block_table[b.seqs.back().block_offset + p / kBs], 0, kind, p % kBs));
      }
    for (std::int64_t j = 0; j < seqs[i].n; ++j) {
      seq.push_back(static_cast<std::int32_t>(i));
      pos.push_back(static_cast<std::int32_t>(seqs[i].start + j));
    }
  }
  b.tokens.assign(seq.size(), 0);
  const std::int64_t T = static_cast<std::int64_t>(seq.size());
  const auto q = randn(T * H * D, 5, 0.5f);
  AttentionShape shape{H, G, D, 1.0f / std::sqrt(static_cast<float>(D)), window};
  shape.sinks = sinks.data();
  ThreadPool pool(2);
  std::vector<std::vector<float>> scratch;
  std::vector<float> blocked(q.size()), per_token(q.size()), ref(q.size());
  paged_attention(q.data(), blocked.data(), b, seq.data(), pos.data(), kv, 0, shape, pool, scratch);
  shape.blocked = false;
  paged_attention(q.data(), per_token.data(), b, seq.data(), pos.data(), kv, 0, shape, pool,
                  scratch);
  std::int64_t t = 0;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const std::int64_t n = seqs[i].n, len = seqs[i].start + n;
    const std::vector<float> qi(q.begin() + t * H * D, q.begin() + (t + n) * H * D);
    const auto want = direct(qi, ks[i], vs[i], n, len, H, G, D, shape.scale, window, sinks);
    attention_reference(qi.data(), ks[i].data(), vs[i].data(), ref.data() + t * H * D, n, len,
                        shape);
    for (std::size_t x = 0; x < want.size(); ++x) {
      const double tol = 3e-6 + 3e-6 * std::fabs(want[x]);
      ASSERT_NEAR(blocked[t * H * D + x], want[x], tol) << "blocked, seq " << i << " at " << x;
      ASSERT_NEAR(per_token[t * H * D + x], want[x], tol) << "per token, seq " << i << " at " << x;
      ASSERT_NEAR(ref[t * H * D + x], want[x], 1e-6 + 1e-6 * std::fabs(want[x])) << x;
    }
    t += n;
  }
}

TEST(AttentionSinks, GqaMatchesTheFormula) {
  check_sinks(8, 2, 64, 0, {0.5f, -1.0f, 2.0f, 0.0f, 1.5f, -0.3f, 3.0f, -2.0f});
}

TEST(AttentionSinks, SlidingWindowPortableHeadSize) {
  check_sinks(4, 2, 24, 32, {1.0f, -0.5f, 0.25f, 2.5f});
}

// A sink far above every score takes almost all the mass (the output shrinks towards 0
// without overflowing); one far below changes nothing measurable.
TEST(AttentionSinks, ExtremeSinks) { check_sinks(4, 4, 32, 0, {40.0f, -40.0f, 12.0f, -12.0f}); }

}  // namespace
}  // namespace keel::cpu
