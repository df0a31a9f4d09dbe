// Norm, rope, softmax and paged attention against their scalar references.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "exec/cpu/activation.h"
#include "exec/cpu/attention.h"
#include "exec/cpu/norm.h"
#include "exec/cpu/rope.h"
#include "exec/exec_context.h"

namespace keel::cpu {
namespace {

std::vector<float> randn(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto &x : v) x = nd(rng);
  return v;
}

TEST(RmsNorm, MatchesReference) {
  auto x = randn(3 * 96, 1, 5.0f), w = randn(96, 2);
  std::vector<float> y(x.size()), r(x.size());
  rmsnorm(x.data(), w.data(), y.data(), 3, 96, 1e-5f);
  rmsnorm_reference(x.data(), w.data(), r.data(), 3, 96, 1e-5f);
  for (std::size_t i = 0; i < y.size(); ++i)
    EXPECT_NEAR(y[i], r[i], 1e-5f * std::fabs(r[i]) + 1e-6f);
}

TEST(Softmax, SumsToOneAndMatchesLogSoftmax) {
  auto x = randn(50, 3, 4.0f);
  std::vector<float> p = x, lp(50);
  softmax(p.data(), 50);
  log_softmax(x.data(), lp.data(), 50);
  double s = 0;
  for (int i = 0; i < 50; ++i) {
    s += p[i];
    EXPECT_NEAR(std::log(p[i]), lp[i], 1e-4);
  }
  EXPECT_NEAR(s, 1.0, 1e-5);
}

TEST(Rope, NeoxAndInterleavedAreTheSameRotationUnderPermutation) {
  ModelConfig cfg;
  cfg.head_dim = 16;
  cfg.rope_theta = 10000;
  RopeTable neox = make_rope_table(cfg);
  cfg.rope_style = RopeStyle::kInterleaved;
  RopeTable inter = make_rope_table(cfg);
  const std::int64_t D = 16, H = 2, T = 3;
  auto x = randn(T * H * D, 4);
  // Interleaved layout: element 2i <- neox i, 2i+1 <- neox i + D/2.
  std::vector<float> xi(x.size());
  for (std::int64_t r = 0; r < T * H; ++r)
    for (std::int64_t i = 0; i < D / 2; ++i) {
      xi[r * D + 2 * i] = x[r * D + i];
      xi[r * D + 2 * i + 1] = x[r * D + i + D / 2];
    }
  const std::int32_t pos[] = {0, 7, 123};
  apply_rope(neox, x.data(), T, H, D, pos);
  apply_rope(inter, xi.data(), T, H, D, pos);
  for (std::int64_t r = 0; r < T * H; ++r)
    for (std::int64_t i = 0; i < D / 2; ++i) {
      EXPECT_FLOAT_EQ(xi[r * D + 2 * i], x[r * D + i]);
      EXPECT_FLOAT_EQ(xi[r * D + 2 * i + 1], x[r * D + i + D / 2]);
    }
}

TEST(Rope, PositionZeroIsIdentityAndNormIsKept) {
  ModelConfig cfg;
  cfg.head_dim = 8;
  RopeTable t = make_rope_table(cfg);
  auto x = randn(2 * 8, 5), y = x;
  const std::int32_t pos[] = {0, 1000};
  apply_rope(t, y.data(), 2, 1, 8, pos);
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(y[i], x[i]);
  double n0 = 0, n1 = 0;
  for (int i = 8; i < 16; ++i) n0 += x[i] * x[i], n1 += y[i] * y[i];
  EXPECT_NEAR(n0, n1, 1e-4 * n0);
}

TEST(Rope, Llama3ScalingKeepsHighFrequenciesAndDividesLowOnes) {
  ModelConfig cfg;
  cfg.head_dim = 64;
  cfg.rope_theta = 500000;
  const RopeTable plain = make_rope_table(cfg);
  cfg.rope_scaling.type = RopeScaling::Type::kLlama3;
  cfg.rope_scaling.factor = 8;
  cfg.rope_scaling.original_max_position = 8192;
  const RopeTable scaled = make_rope_table(cfg);
  EXPECT_FLOAT_EQ(scaled.inv_freq[0], plain.inv_freq[0]);              // wavelength 2*pi: kept
  EXPECT_FLOAT_EQ(scaled.inv_freq.back(), plain.inv_freq.back() / 8);  // longest: divided
}

// Paged attention over scrambled blocks equals the contiguous reference.
void check_attention(std::int64_t H, std::int64_t G, std::int64_t window) {
  const std::int64_t D = 16, layers = 2, layer = 1;
  const std::int32_t bs = 4;
  CpuKvStore kv(32, bs, layers, G, D);
  ThreadPool pool(2);
  // Two sequences: one of 13 positions computing its last 5, one of 6 computing 1.
  const std::int64_t len0 = 13, n0 = 5, len1 = 6, n1 = 1;
  ForwardBatch b;
  std::vector<std::int32_t> blocks0 = {7, 2, 30, 11}, blocks1 = {5, 19};
  b.seqs.push_back({0, static_cast<std::int32_t>(n0), static_cast<std::int32_t>(len0 - n0), 0, 4,
                    SequenceSlice::Logits::kLast});
  b.seqs.push_back({static_cast<std::int32_t>(n0), static_cast<std::int32_t>(n1),
                    static_cast<std::int32_t>(len1 - n1), 4, 2, SequenceSlice::Logits::kLast});
  b.block_table = blocks0;
  b.block_table.insert(b.block_table.end(), blocks1.begin(), blocks1.end());
  b.tokens.assign(n0 + n1, 0);
  auto k0 = randn(len0 * G * D, 10), v0 = randn(len0 * G * D, 11), k1 = randn(len1 * G * D, 12),
       v1 = randn(len1 * G * D, 13);
  auto put = [&](const std::vector<std::int32_t> &tab, const std::vector<float> &k,
                 const std::vector<float> &v, std::int64_t len) {
    for (std::int64_t p = 0; p < len; ++p) {
      std::copy(k.begin() + p * G * D, k.begin() + (p + 1) * G * D,
                kv.row(tab[p / bs], layer, 0, p % bs));
      std::copy(v.begin() + p * G * D, v.begin() + (p + 1) * G * D,
                kv.row(tab[p / bs], layer, 1, p % bs));
    }
  };
  put(blocks0, k0, v0, len0);
  put(blocks1, k1, v1, len1);
  auto q = randn((n0 + n1) * H * D, 14);
  std::vector<std::int32_t> seq = {0, 0, 0, 0, 0, 1}, pos = {8, 9, 10, 11, 12, 5};
  AttentionShape shape{H, G, D, 1.0f / 4.0f, window};
  std::vector<float> out(q.size()), ref(q.size());
  std::vector<std::vector<float>> scratch;
  paged_attention(q.data(), out.data(), b, seq.data(), pos.data(), kv, layer, shape, pool, scratch);
  attention_reference(q.data(), k0.data(), v0.data(), ref.data(), n0, len0, shape);
  attention_reference(q.data() + n0 * H * D, k1.data(), v1.data(), ref.data() + n0 * H * D, n1,
                      len1, shape);
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], ref[i], 1e-5) << i;
}

TEST(PagedAttention, GqaMatchesReference) { check_attention(4, 2, 0); }
TEST(PagedAttention, MqaMatchesReference) { check_attention(4, 1, 0); }
TEST(PagedAttention, MhaSlidingWindowMatchesReference) { check_attention(2, 2, 3); }

TEST(ExecContextDeathTest, AnotherThreadIsFatal) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ExecContext ctx(1);
  ctx.check_owner("here");  // the owner may
  EXPECT_DEATH(std::thread([&] { ctx.check_owner("CpuModelRunner::forward"); }).join(),
               "CpuModelRunner::forward called from thread");
}

TEST(Workspace, ReusesMemoryAfterReset) {
  Workspace ws;
  float *a = ws.floats(1000);
  float *b = ws.floats(3 << 20);  // forces a second chunk
  EXPECT_NE(a, b);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b) % 64, 0u);
  ws.reset();
  const auto cap = ws.capacity_bytes();
  ws.floats(1000);
  ws.floats(3 << 20);
  EXPECT_EQ(ws.capacity_bytes(), cap);  // no growth the second time
}

}  // namespace
}  // namespace keel::cpu
