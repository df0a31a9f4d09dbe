// Each small kernel against a CPU reference on fresh random inputs, outputs poisoned first.
#include "exec/cuda/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "cuda_test_util.h"
#include "exec/cuda/gemm.h"
#include "exec/cuda/rope_table.h"

namespace keel::cuda {
namespace {

using test::download;
using test::from_bf16;
using test::rel_err;
using test::to_bf16;
using test::upload;

TEST(CudaKernels, EmbeddingGathersRowsAndZeroesBadIds) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(1);
  const int V = 97, H = 72, T = 9;
  const auto table = test::random_bf16_values(std::size_t(V) * H, rng);
  std::vector<std::int32_t> tokens = {0, 5, 96, 5, -1, 97, 40, 1 << 30, 3};
  auto d_table = upload(ctx, to_bf16(table));
  auto d_tok = upload(ctx, tokens);
  DeviceBuffer out(std::size_t(T) * H * sizeof(float));
  test::poison(ctx, out);
  launch_embedding(ctx.compute(), d_tok.as<std::int32_t>(), T, d_table.as<bf16>(), V, H,
                   out.as<float>());
  const auto got = download<float>(ctx, out, std::size_t(T) * H);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < H; ++i) {
      const bool valid = tokens[t] >= 0 && tokens[t] < V;
      ASSERT_EQ(got[t * H + i], valid ? table[std::size_t(tokens[t]) * H + i] : 0.0f)
          << t << "," << i;
    }
}

TEST(CudaKernels, AddRmsNormMatchesReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(2);
  for (int H : {64, 1000, 4096}) {
    const int rows = 7;
    const float eps = 1e-5f;
    const auto x = test::random_bf16_values(std::size_t(rows) * H, rng);
    const auto res = test::random_bf16_values(std::size_t(rows) * H, rng, -3, 3);
    const auto w = test::random_bf16_values(H, rng, 0.5f, 1.5f);
    for (bool with_x : {true, false}) {
      auto d_x = upload(ctx, to_bf16(x));
      auto d_res = upload(ctx, res);
      auto d_w = upload(ctx, to_bf16(w));
      DeviceBuffer out(std::size_t(rows) * H * 2);
      test::poison(ctx, out);
      launch_add_rmsnorm(ctx.compute(), with_x ? d_x.as<bf16>() : nullptr, d_res.as<float>(),
                         d_w.as<bf16>(), out.as<bf16>(), rows, H, eps);
      const auto got = from_bf16(download<std::uint16_t>(ctx, out, std::size_t(rows) * H));
      const auto got_res = download<float>(ctx, d_res, std::size_t(rows) * H);
      std::vector<float> ref(got.size()), ref_res(got.size());
      for (int r = 0; r < rows; ++r) {
        double ss = 0;
        for (int i = 0; i < H; ++i) {
          ref_res[r * H + i] = res[r * H + i] + (with_x ? x[r * H + i] : 0.0f);
          ss += double(ref_res[r * H + i]) * ref_res[r * H + i];
        }
        const double inv = 1.0 / std::sqrt(ss / H + eps);
        for (int i = 0; i < H; ++i)
          ref[r * H + i] = static_cast<float>(ref_res[r * H + i] * inv * w[i]);
      }
      EXPECT_LT(rel_err(got_res, ref_res), 1e-6) << H;
      EXPECT_LT(rel_err(got, ref), 8e-3) << H;
    }
  }
}

// Rotates q and k heads of a fused qkv row; v must be left untouched.
void check_rope(const ModelConfig &cfg, bool interleaved, std::uint32_t seed) {
  CudaContext ctx;
  std::mt19937 rng(seed);
  const int nh = static_cast<int>(cfg.num_heads), nkv = static_cast<int>(cfg.num_kv_heads);
  const int hd = static_cast<int>(cfg.head_dim), T = 11;
  const int stride = (nh + 2 * nkv) * hd;
  const auto qkv = test::random_bf16_values(std::size_t(T) * stride, rng);
  std::vector<std::int32_t> pos(T);
  std::uniform_int_distribution<int> pd(0, 120000);
  for (auto &p : pos) p = pd(rng);
  pos[0] = 0;
  const RopeTable table = make_rope_table(cfg);
  auto d_qkv = upload(ctx, to_bf16(qkv));
  auto d_pos = upload(ctx, pos);
  auto d_freq = upload(ctx, table.inv_freq);
  launch_rope(ctx.compute(), d_qkv.as<bf16>(), T, stride, nh, nkv, hd, d_pos.as<std::int32_t>(),
              d_freq.as<float>(), table.mscale, interleaved);
  const auto got = from_bf16(download<std::uint16_t>(ctx, d_qkv, qkv.size()));
  std::vector<float> ref = qkv;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < nh + nkv; ++h)
      for (int i = 0; i < hd / 2; ++i) {
        // Angle as HF computes it: float32 position times float32 inverse frequency.
        const float angle = static_cast<float>(pos[t]) * table.inv_freq[i];
        const double c = std::cos(double(angle)) * table.mscale,
                     s = std::sin(double(angle)) * table.mscale;
        const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + hd / 2;
        float *head = ref.data() + std::size_t(t) * stride + h * hd;
        const double x1 = head[a], x2 = head[b];
        head[a] = static_cast<float>(x1 * c - x2 * s);
        head[b] = static_cast<float>(x2 * c + x1 * s);
      }
  EXPECT_LT(rel_err(got, ref), 6e-3);
  for (int t = 0; t < T; ++t)  // v heads bit-identical
    for (int i = (nh + nkv) * hd; i < stride; ++i)
      ASSERT_EQ(got[t * stride + i], qkv[t * stride + i]);
}

ModelConfig rope_config(RopeScaling::Type type) {
  ModelConfig c;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.rope_theta = 500000.0;
  c.rope_scaling.type = type;
  c.rope_scaling.factor = type == RopeScaling::Type::kNone ? 1.0 : 8.0;
  return c;
}

TEST(CudaKernels, RopeNeoxAndInterleavedAllScalings) {
  KEEL_REQUIRE_CUDA_DEVICE();
  std::uint32_t seed = 10;
  for (auto type : {RopeScaling::Type::kNone, RopeScaling::Type::kLinear,
                    RopeScaling::Type::kLlama3, RopeScaling::Type::kYarn})
    for (bool interleaved : {false, true}) {
      SCOPED_TRACE(static_cast<int>(type) * 2 + interleaved);
      check_rope(rope_config(type), interleaved, seed++);
    }
}

TEST(CudaKernels, QkvBiasAndHeadNormMatchReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(12);
  const int nh = 4, nkv = 2, T = 5;
  for (int hd : {32, 128, 256}) {
    const int width = (nh + 2 * nkv) * hd;
    const auto qkv = test::random_bf16_values(std::size_t(T) * width, rng, -3, 3);
    const auto bias = test::random_bf16_values(width, rng);
    const auto qn = test::random_bf16_values(hd, rng, 0.5f, 1.5f);
    const auto kn = test::random_bf16_values(hd, rng, 0.5f, 1.5f);
    auto d_bias = upload(ctx, to_bf16(bias));
    auto d_qn = upload(ctx, to_bf16(qn));
    auto d_kn = upload(ctx, to_bf16(kn));
    for (int mode = 0; mode < 3; ++mode) {  // bias only, norm only, both
      const bool use_bias = mode != 1, use_norm = mode != 0;
      auto d = upload(ctx, to_bf16(qkv));
      launch_qkv_bias_norm(
          ctx.compute(), d.as<bf16>(), T, nh, nkv, hd, use_bias ? d_bias.as<bf16>() : nullptr,
          use_norm ? d_qn.as<bf16>() : nullptr, use_norm ? d_kn.as<bf16>() : nullptr, 1e-6f);
      const auto got = from_bf16(download<std::uint16_t>(ctx, d, qkv.size()));
      std::vector<float> ref = qkv;
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < nh + 2 * nkv; ++h) {
          float *x = ref.data() + std::size_t(t) * width + h * hd;
          if (use_bias)
            for (int i = 0; i < hd; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i] + bias[h * hd + i]));
          if (use_norm && h < nh + nkv) {
            double ss = 0;
            for (int i = 0; i < hd; ++i) ss += double(x[i]) * x[i];
            const double inv = 1.0 / std::sqrt(ss / hd + 1e-6);
            for (int i = 0; i < hd; ++i)
              x[i] = static_cast<float>(x[i] * inv * (h < nh ? qn[i] : kn[i]));
          }
        }
      EXPECT_LT(rel_err(got, ref), 6e-3) << "hd " << hd << " mode " << mode;
      // v heads are never normalised.
      if (!use_bias) {
        for (int t = 0; t < T; ++t)
          for (int i = (nh + nkv) * hd; i < width; ++i) {
            ASSERT_EQ(got[t * width + i], qkv[t * width + i]);
          }
      }
    }
  }
}

TEST(CudaKernels, SwigluMatchesReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(3);
  const int T = 5, I = 300;
  const auto gu = test::random_bf16_values(std::size_t(T) * 2 * I, rng, -6, 6);
  auto d_gu = upload(ctx, to_bf16(gu));
  DeviceBuffer out(std::size_t(T) * I * 2);
  test::poison(ctx, out);
  launch_swiglu(ctx.compute(), d_gu.as<bf16>(), out.as<bf16>(), T, I);
  const auto got = from_bf16(download<std::uint16_t>(ctx, out, std::size_t(T) * I));
  std::vector<float> ref(got.size());
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < I; ++i) {
      const double g = gu[t * 2 * I + i], u = gu[t * 2 * I + I + i];
      ref[t * I + i] = static_cast<float>(g / (1 + std::exp(-g)) * u);
    }
  EXPECT_LT(rel_err(got, ref), 6e-3);
}

TEST(CudaKernels, KvWriteScattersIntoPagedLayout) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(4);
  const KvLayout layout{3, 4, 2, 16};  // layers, block size, kv heads, head dim
  const int nh = 4, T = 6, layer = 1, num_blocks = 5;
  const int stride = (nh + 2 * layout.num_kv_heads) * layout.head_dim;
  const int k_off = nh * layout.head_dim, v_off = k_off + layout.num_kv_heads * layout.head_dim;
  const auto qkv = test::random_bf16_values(std::size_t(T) * stride, rng);
  const std::vector<std::int32_t> slots = {0, 7, 19, -1, 8, 13};  // one padding token
  auto d_qkv = upload(ctx, to_bf16(qkv));
  auto d_slots = upload(ctx, slots);
  const std::size_t cache_elems = std::size_t(num_blocks) * layout.block_elems();
  DeviceBuffer cache(cache_elems * 2);
  test::poison(ctx, cache);
  launch_kv_write(ctx.compute(), d_qkv.as<bf16>(), T, stride, k_off, v_off,
                  d_slots.as<std::int32_t>(), cache.as<bf16>(), layout, layer);
  const auto got = download<std::uint16_t>(ctx, cache, cache_elems);
  std::vector<bool> written(cache_elems, false);
  const auto q16 = to_bf16(qkv);
  for (int t = 0; t < T; ++t) {
    if (slots[t] < 0) continue;
    for (int kv = 0; kv < 2; ++kv) {
      const auto base =
          layout.offset(slots[t] / layout.block_size, layer, kv, slots[t] % layout.block_size);
      for (int i = 0; i < layout.slot_elems(); ++i) {
        ASSERT_EQ(got[base + i], q16[std::size_t(t) * stride + (kv ? v_off : k_off) + i]);
        written[base + i] = true;
      }
    }
  }
  for (std::size_t i = 0; i < cache_elems; ++i) {
    if (!written[i]) {
      ASSERT_EQ(got[i], 0xFFFF) << "stray write at " << i;
    }
  }
}

TEST(CudaKernels, ArgmaxPicksFirstMaximum) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(5);
  const int R = 6, V = 50000;
  auto logits = test::random_bf16_values(std::size_t(R) * V, rng, -10, 10);
  logits[1 * V + 777] = 50.0f;  // ties: the lower index wins
  logits[1 * V + 40000] = 50.0f;
  logits[2 * V + V - 1] = 99.0f;
  logits[3 * V + 12] = NAN;  // NaN never wins
  auto d = upload(ctx, logits);
  DeviceBuffer out(R * 4), scratch(argmax_scratch_bytes(R));
  // One block per row (no scratch), and rows split over several blocks: the winner of
  // the tie at 777 / 40000 sits in a different block than the other.
  for (const bool split : {false, true}) {
    test::poison(ctx, out);
    launch_argmax(ctx.compute(), d.as<float>(), R, V, out.as<std::int32_t>(),
                  split ? scratch.data() : nullptr, ctx.num_sms());
    const auto got = download<std::int32_t>(ctx, out, R);
    for (int r = 0; r < R; ++r) {
      int best = -1;
      for (int i = 0; i < V; ++i) {
        const float v = logits[std::size_t(r) * V + i];
        if (!std::isnan(v) && (best < 0 || v > logits[std::size_t(r) * V + best])) best = i;
      }
      EXPECT_EQ(got[r], best) << r << (split ? " split" : " whole");
    }
    EXPECT_EQ(got[1], 777);
    EXPECT_EQ(got[2], V - 1);
  }
}

// Split rows of every alignment: V not a multiple of 4 puts rows after the first at
// unaligned addresses (the scalar path); a row shorter than one part; the maximum in the
// first, a middle and the last entry of a row; equal maxima in every part.
TEST(CudaKernels, ArgmaxSplitRowsAnyLength) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(15);
  for (const int V : {1, 7, 2047, 4099, 128256, 128257}) {
    const int R = 5;
    auto logits = test::random_bf16_values(std::size_t(R) * V, rng, -10, 10);
    logits[0 * std::size_t(V)] = 30.0f;
    logits[1 * std::size_t(V) + V / 2] = 30.0f;
    logits[2 * std::size_t(V) + V - 1] = 30.0f;
    for (int i = 0; i < V; i += 997) logits[3 * std::size_t(V) + i] = 30.0f;  // first wins
    auto d = upload(ctx, logits);
    DeviceBuffer out(R * 4), scratch(argmax_scratch_bytes(R));
    for (const int rows : {1, R}) {
      test::poison(ctx, out);
      launch_argmax(ctx.compute(), d.as<float>(), rows, V, out.as<std::int32_t>(), scratch.data(),
                    ctx.num_sms());
      const auto got = download<std::int32_t>(ctx, out, rows);
      for (int r = 0; r < rows; ++r) {
        const auto first = logits.begin() + std::size_t(r) * V;
        EXPECT_EQ(got[r], std::max_element(first, first + V) - first)
            << "V " << V << " row " << r << " of " << rows;
      }
    }
  }
}

TEST(CudaKernels, GemmBf16MatchesReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  Gemm gemm(ctx);
  std::mt19937 rng(6);
  for (auto [M, N, K] : {std::array<int, 3>{1, 384, 256}, {37, 200, 512}, {128, 1024, 96}}) {
    const auto x = test::random_bf16_values(std::size_t(M) * K, rng);
    const auto w = test::random_bf16_values(std::size_t(N) * K, rng);
    auto d_x = upload(ctx, to_bf16(x));
    auto d_w = upload(ctx, to_bf16(w));
    DeviceBuffer y32(std::size_t(M) * N * 4), y16(std::size_t(M) * N * 2);
    test::poison(ctx, y32);
    test::poison(ctx, y16);
    gemm.run(ctx.compute(), GemmType::kBF16, GemmType::kF32, d_x.data(), d_w.data(), y32.data(), M,
             N, K);
    gemm.run(ctx.compute(), GemmType::kBF16, GemmType::kBF16, d_x.data(), d_w.data(), y16.data(), M,
             N, K);
    std::vector<float> ref(std::size_t(M) * N);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        double acc = 0;
        for (int k = 0; k < K; ++k)
          acc += double(x[std::size_t(m) * K + k]) * w[std::size_t(n) * K + k];
        ref[std::size_t(m) * N + n] = static_cast<float>(acc);
      }
    EXPECT_LT(rel_err(download<float>(ctx, y32, ref.size()), ref), 1e-5)
        << M << "x" << N << "x" << K;
    EXPECT_LT(rel_err(from_bf16(download<std::uint16_t>(ctx, y16, ref.size())), ref), 6e-3);
    // Accumulate: y += x w^T doubles the result.
    gemm.run(ctx.compute(), GemmType::kBF16, GemmType::kF32, d_x.data(), d_w.data(), y32.data(), M,
             N, K, true);
    auto twice = ref;
    for (auto &v : twice) v *= 2;
    EXPECT_LT(rel_err(download<float>(ctx, y32, ref.size()), twice), 1e-5);
  }
}

// Launchers take only a context's StreamRef, and check its owner on every launch: a
// launch from another thread ends the process naming the launcher, before it enqueues.
TEST(CudaKernelsDeathTest, ALaunchFromAForeignThreadIsFatal) {
  KEEL_REQUIRE_CUDA_DEVICE();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  CudaContext ctx;
  DeviceBuffer logits(64 * sizeof(float)), out(sizeof(std::int32_t));
  KEEL_CUDA_CHECK(cudaMemsetAsync(logits.data(), 0, logits.bytes(), ctx.compute().get("test")));
  launch_argmax(ctx.compute(), logits.as<float>(), 1, 64, out.as<std::int32_t>());  // the owner
  EXPECT_EQ(download<std::int32_t>(ctx, out, 1)[0], 0);
  EXPECT_DEATH(std::thread([&] {
                 launch_argmax(ctx.compute(), logits.as<float>(), 1, 64, out.as<std::int32_t>());
               }).join(),
               "launch_argmax called from thread .* owned by thread");
}

}  // namespace
}  // namespace keel::cuda
