// Routed experts kept MXFP4 on the device (issue #19; cuda_runner_moe.cpp): the pieces the
// MXFP4 expert path adds beside the stacked-experts GEMV (mxfp4_test.cpp) -- listed
// experts dequantized for the grouped GEMM, the slot-ordered activation and combine --
// against CPU references, and the runner's weight accounting: experts counted at their
// stored size, so gpt-oss-120b fits one H200 with room for its KV cache. Whole tiny models
// against the CPU runner are in moe_arch_model_test.cpp (the *_mxfp4_* cases).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "cuda_test_util.h"
#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/k_fp8.h"
#include "exec/cuda/k_moe.h"
#include "exec/cuda/k_mxfp4.h"
#include "exec/cuda/k_quant.h"
#include "formats/make_model.h"
#include "formats/quant.h"

namespace keel::cuda {
namespace {

using test::download;
using test::upload;

TEST(CudaMoeMxfp4, DequantizesOnlyTheListedExpertsBitForBit) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(5);
  constexpr int E = 4, N = 16, K = 96;  // 3 blocks a row: 51-byte rows, odd offsets
  const std::int64_t n = N * K, stride = dtype_bytes(DType::kMXFP4, n);
  std::vector<std::uint8_t> w(E * stride);
  for (std::int64_t b = 0; b < E * stride / 17; ++b) {
    w[b * 17] = static_cast<std::uint8_t>(110 + b % 30);  // finite scales
    for (int j = 1; j < 17; ++j) w[b * 17 + j] = static_cast<std::uint8_t>(rng());
  }
  const std::vector<std::int32_t> list = {1, 3, -1, -1, 2};  // active[0..1], then n_active
  const DeviceBuffer dw = upload(ctx, w), dl = upload(ctx, list);
  DeviceBuffer out(E * n * 2);
  test::poison(ctx, out);
  launch_dequantize_mxfp4_experts(ctx.compute(), dw.data(), stride, n, dl.as<std::int32_t>(),
                                  dl.as<std::int32_t>() + 4, E, out.as<bf16>());
  const auto got = download<std::uint16_t>(ctx, out, E * n);
  std::vector<float> want(n);
  for (int e = 0; e < E; ++e) {
    const bool listed = e == 1 || e == 3;
    dequantize_row(DType::kMXFP4, w.data() + e * stride, want.data(), n);
    for (std::int64_t i = 0; i < n; ++i) {
      // An e2m1 value times a power of two has <= 2 significant bits: exact in bf16.
      const std::uint16_t expect = listed ? f32_to_bf16(want[i]) : std::uint16_t{0xFFFF};
      ASSERT_EQ(got[e * n + i], expect) << "expert " << e << " element " << i;
    }
  }
}

TEST(CudaMoeMxfp4, SlotActivationMatchesDoubleWithBiasesAndClamp) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(11);
  constexpr int S = 6, I = 40, E = 3;
  std::uniform_real_distribution<float> d(-9.0f, 9.0f);  // past the clamp both ways
  std::vector<float> gu(S * 2 * I), bias(E * 2 * I);
  for (auto &v : gu) v = d(rng);
  for (auto &v : bias) v = d(rng) / 4;
  const std::vector<std::int32_t> ids = {2, 0, 1, 2, 0, 0};
  for (const bool gpt_oss : {false, true}) {
    const DeviceBuffer dgu = upload(ctx, gu), db = upload(ctx, bias), di = upload(ctx, ids);
    DeviceBuffer act(S * I * 2);
    test::poison(ctx, act);
    MoeExpertAct ea;
    if (gpt_oss) {
      ea.gate_up_bias = db.as<float>();
      ea.limit = 7.0f;
      ea.alpha = 1.702f;
    }
    launch_moe_slot_act(ctx.compute(), dgu.as<float>(), I, di.as<std::int32_t>(), S, ea,
                        act.as<bf16>());
    const auto got = test::from_bf16(download<std::uint16_t>(ctx, act, S * I));
    for (int s = 0; s < S; ++s)
      for (int i = 0; i < I; ++i) {
        double g = gu[s * 2 * I + i], u = gu[s * 2 * I + I + i], want;
        if (gpt_oss) {
          g = std::min(g + bias[ids[s] * 2 * I + i], 7.0);
          u = std::clamp(u + bias[ids[s] * 2 * I + I + i], -7.0, 7.0);
          want = (u + 1) * g / (1 + std::exp(-1.702 * g));
        } else {
          want = g / (1 + std::exp(-g)) * u;
        }
        ASSERT_NEAR(got[s * I + i], want, 1e-2 * std::abs(want) + 1e-3)
            << (gpt_oss ? "clamped " : "plain ") << "slot " << s << " i " << i;
      }
  }
}

TEST(CudaMoeMxfp4, CombineOfSlotOrderedRowsAddsInExpertOrder) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(3);
  constexpr int T = 3, k = 2, H = 24, E = 4, S = T * k;
  const auto out = test::random_bf16_values(S * H, rng);
  const std::vector<std::int32_t> ids = {3, 1, 0, 2, 2, 1};
  const std::vector<float> wts = {0.7f, 0.3f, 0.55f, 0.45f, 0.9f, 0.1f};
  std::vector<float> down_bias(E * H);
  for (auto &v : down_bias) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  const DeviceBuffer dout = upload(ctx, test::to_bf16(out)), di = upload(ctx, ids),
                     dw = upload(ctx, wts), db = upload(ctx, down_bias);
  DeviceBuffer y(T * H * 2);
  test::poison(ctx, y);
  launch_moe_combine(ctx.compute(), dout.as<bf16>(), di.as<std::int32_t>(), dw.as<float>(), T, k, H,
                     nullptr, MoeGroupLayout{E, S, S}, y.as<bf16>(), db.as<float>());
  const auto got = test::from_bf16(download<std::uint16_t>(ctx, y, T * H));
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < H; ++c) {
      double want = 0;
      for (int j = 0; j < k; ++j) {
        const int slot = t * k + j;
        want += wts[slot] * (out[slot * H + c] + down_bias[ids[slot] * H + c]);
      }
      ASSERT_NEAR(got[t * H + c], want, 1e-2 * std::abs(want) + 1e-3) << "t " << t << " c " << c;
    }
}

// FP8 experts (k_fp8.h): the slot GEMV against double sums of the dequantized weights
// (launch_dequantize_fp8_f32, itself checked against the CPU in fp8_test.cpp), and the
// listed experts' dequantization equal to launch_dequantize_fp8's per expert.
TEST(CudaMoeFp8, ExpertsGemvAndListedDequantizationMatchThePerExpertKernels) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(21);
  constexpr int E = 3, N = 24, K = 256, BR = 16, T = 2, k = 2, S = T * k;
  // Scale grid [ceil(N / BR), K / 128] f32 after each expert's bytes; strides of 16 bytes.
  const std::int64_t grid = (N + BR - 1) / BR * (K / kFp8ScaleCols) * 4, stride = N * K + 2 * grid;
  static_assert((N * K) % 16 == 0);
  std::vector<std::uint8_t> w(E * stride);
  for (int e = 0; e < E; ++e) {
    for (int i = 0; i < N * K; ++i) {
      std::uint8_t b = static_cast<std::uint8_t>(rng());
      if ((b & 0x7F) == 0x7F) b ^= 1;  // no NaN codes
      w[e * stride + i] = b;
    }
    for (int g = 0; g < grid / 4; ++g) {
      const float sc = std::ldexp(1.0f + (rng() % 8) / 8.0f, -6 - static_cast<int>(rng() % 3));
      std::memcpy(&w[e * stride + N * K + 4 * g], &sc, 4);
    }
  }
  const DeviceBuffer dw = upload(ctx, w);
  Fp8Experts fx;
  fx.w = dw.data();
  fx.scales = reinterpret_cast<const float *>(dw.as<std::uint8_t>() + N * K);
  fx.stride = stride;
  fx.block_rows = BR;
  fx.N = N, fx.K = K, fx.experts = E;
  // Each expert alone, as the dense kernels see it.
  std::vector<std::vector<float>> wf(E);
  for (int e = 0; e < E; ++e) {
    DeviceBuffer f(N * K * 4);
    const Fp8Weight one{dw.as<std::uint8_t>() + e * stride,
                        reinterpret_cast<const float *>(dw.as<std::uint8_t>() + e * stride + N * K),
                        BR, N, K};
    launch_dequantize_fp8_f32(ctx.compute(), one, f.as<float>());
    wf[e] = download<float>(ctx, f, N * K);
  }
  const auto x = test::random_bf16_values(T * K, rng);
  const std::vector<std::int32_t> ids = {2, 0, 1, 2};
  const DeviceBuffer dx = upload(ctx, test::to_bf16(x)), di = upload(ctx, ids);
  DeviceBuffer y(S * N * 4);
  test::poison(ctx, y);
  launch_gemv_fp8_experts(ctx.compute(), fx, dx.as<bf16>(), K, k, di.as<std::int32_t>(), S,
                          y.as<float>(), true, N);
  const auto got = download<float>(ctx, y, S * N);
  for (int s = 0; s < S; ++s)
    for (int n = 0; n < N; ++n) {
      double want = 0, mag = 0;  // f32 sums of K terms: error ~ K eps of the terms' size
      for (int c = 0; c < K; ++c) {
        const double t = double(wf[ids[s]][n * K + c]) * x[(s / k) * K + c];
        want += t;
        mag += std::abs(t);
      }
      ASSERT_NEAR(got[s * N + n], want, 3e-5 * mag + 1e-6) << "slot " << s << " n " << n;
    }
  // Experts 0 and 2 listed: their bf16 values equal the f32 ones rounded; expert 1 untouched.
  const std::vector<std::int32_t> list = {0, 2, -1, 2};
  const DeviceBuffer dl = upload(ctx, list);
  DeviceBuffer out(E * N * K * 2);
  test::poison(ctx, out);
  launch_dequantize_fp8_experts(ctx.compute(), fx, dl.as<std::int32_t>(), dl.as<std::int32_t>() + 3,
                                E, out.as<bf16>(), N * K);
  const auto dq = download<std::uint16_t>(ctx, out, E * N * K);
  for (int e = 0; e < E; ++e)
    for (int i = 0; i < N * K; ++i)
      ASSERT_EQ(dq[e * N * K + i], e == 1 ? std::uint16_t{0xFFFF} : f32_to_bf16(wf[e][i]))
          << "expert " << e << " element " << i;
}

// GGUF-block experts (k_quant.h): the slot GEMV equals launch_gemv_quant on each expert
// alone (same summation order), and the listed experts' dequantization launch_dequantize's.
TEST(CudaMoeQuant, ExpertsGemvAndListedDequantizationEqualThePerExpertKernels) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(8);
  constexpr int E = 3, N = 16, K = 512, T = 2, k = 2, S = T * k;
  for (const auto [dt, f] :
       {std::pair{DType::kQ4_K, QuantFormat::kQ4_K}, std::pair{DType::kQ6_K, QuantFormat::kQ6_K},
        std::pair{DType::kQ8_0, QuantFormat::kQ8_0}}) {
    const std::int64_t bytes = dtype_bytes(dt, N * K), stride = (bytes + 15) / 16 * 16;
    std::vector<std::uint8_t> w(E * stride);
    for (int e = 0; e < E; ++e) {
      const auto vals = test::random_bf16_values(N * K, rng);
      quantize_row(dt, vals.data(), w.data() + e * stride, N * K);
    }
    const auto x = test::random_bf16_values(T * K, rng);
    const std::vector<std::int32_t> ids = {1, 2, 2, 0}, list = {0, 2, -1, 2};
    const DeviceBuffer dw = upload(ctx, w), dx = upload(ctx, test::to_bf16(x)),
                       di = upload(ctx, ids), dl = upload(ctx, list);
    DeviceBuffer y(S * N * 4), one(N * 4), dq(E * N * K * 2), ref(N * K * 2);
    test::poison(ctx, y);
    test::poison(ctx, dq);
    launch_gemv_quant_experts(ctx.compute(), f, dx.as<bf16>(), K, k, dw.data(), stride, E,
                              di.as<std::int32_t>(), S, y.as<float>(), true, N, N, K);
    launch_dequantize_quant_experts(ctx.compute(), f, dw.data(), stride, N * K,
                                    dl.as<std::int32_t>(), dl.as<std::int32_t>() + 3, E,
                                    dq.as<bf16>());
    const auto got = download<float>(ctx, y, S * N);
    const auto got_dq = download<std::uint16_t>(ctx, dq, E * N * K);
    for (int s = 0; s < S; ++s) {
      launch_gemv_quant(ctx.compute(), f, dx.as<bf16>() + (s / k) * K,
                        dw.as<std::uint8_t>() + ids[s] * stride, one.as<float>(), true, N, 1, N, K);
      const auto want = download<float>(ctx, one, N);
      for (int n = 0; n < N; ++n)
        ASSERT_EQ(got[s * N + n], want[n]) << dtype_name(dt) << " slot " << s << " n " << n;
    }
    for (int e = 0; e < E; ++e) {
      launch_dequantize(ctx.compute(), f, dw.as<std::uint8_t>() + e * stride, ref.as<bf16>(),
                        N * K);
      const auto want = download<std::uint16_t>(ctx, ref, N * K);
      for (int i = 0; i < N * K; ++i)
        ASSERT_EQ(got_dq[e * N * K + i], e == 1 ? std::uint16_t{0xFFFF} : want[i])
            << dtype_name(dt) << " expert " << e << " element " << i;
    }
  }
}

CudaRunnerOptions tiny_options() {
  CudaRunnerOptions o;
  o.block_size = 16;
  o.num_kv_blocks = 64;
  o.max_batch_tokens = 512;
  o.max_seqs = 8;
  o.max_logits_rows = 64;
  o.max_model_len = 512;
  return o;
}

// The same MXFP4 file opened with its experts kept (the default) and converted to bf16
// (kOff): the weights differ by exactly the experts' bf16 bytes less their stored bytes.
TEST(CudaMoeMxfp4, WeightBytesCountExpertsAsStored) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const auto dir = std::filesystem::temp_directory_path() /
                   ("keel-cuda-mxfp4-bytes-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  MakeModelOptions mo;
  mo.arch = "gpt_oss";
  mo.shape = "tiny";
  mo.dtype = DType::kMXFP4;
  mo.seed = 4;
  mo.out = dir;
  mo.threads = 2;
  make_model(mo);
  CudaContext ctx;
  CudaRunnerOptions o = tiny_options();
  auto kept = CudaModelRunner::open(dir, ctx, o);
  o.quantized_weights = QuantizedWeights::kOff;
  auto bf16 = CudaModelRunner::open(dir, ctx, o);
  std::filesystem::remove_all(dir);
  const ModelConfig &c = kept->config();
  const std::int64_t E = c.moe->num_experts, Ie = c.moe->expert_intermediate, H = c.hidden_size;
  const std::int64_t per_layer_elems = E * 3 * Ie * H;
  const std::int64_t want_saved =
      c.num_layers * (2 * per_layer_elems - dtype_bytes(DType::kMXFP4, per_layer_elems));
  EXPECT_EQ(static_cast<std::int64_t>(bf16->weight_bytes() - kept->weight_bytes()), want_saved);
  EXPECT_NE(kept->weight_format().find("mxfp4"), std::string::npos) << kept->weight_format();
  EXPECT_EQ(bf16->weight_format().find("mxfp4"), std::string::npos) << bf16->weight_format();
}

// gpt-oss-120b's shape with random MXFP4 experts (as cuda_bench makes it): its weights and
// a serving runner's buffers leave >= 40 GB of an H200 for the KV cache. Skips on GPUs of
// less than 130 GB.
TEST(CudaMoeMxfp4, GptOss120bShapeFitsWithRoomForKv) {
  KEEL_REQUIRE_CUDA_DEVICE();
  std::size_t free0 = 0, total = 0;
  KEEL_CUDA_CHECK(cudaMemGetInfo(&free0, &total));
  if (total < 130ull << 30) GTEST_SKIP() << "needs an H200-class GPU";
  MakeModelOptions mo;
  mo.arch = "gpt_oss";
  mo.shape = "gpt-oss-120b";
  const ModelConfig c = make_model_config(mo);
  CudaContext ctx;
  CudaRunnerOptions o;
  o.num_kv_blocks = 16;  // the pool is what the rest would hold
  o.max_batch_tokens = 8192;
  o.max_seqs = 256;
  o.max_model_len = 8192;
  o.random_experts_mxfp4 = true;
  auto runner = std::make_unique<CudaModelRunner>(ctx, c, 1, o);
  std::size_t free1 = 0;
  KEEL_CUDA_CHECK(cudaMemGetInfo(&free1, &total));
  const double weights_gb = runner->weight_bytes() / 1e9, left_gb = free1 / 1e9;
  std::printf("gpt-oss-120b shape, MXFP4 experts: weights %.1f GB, buffers %.1f GB, %.1f GB left\n",
              weights_gb, runner->buffer_bytes() / 1e9, left_gb);
  EXPECT_NE(runner->weight_format().find("mxfp4"), std::string::npos);
  EXPECT_GT(weights_gb, 60.0);  // experts alone are 60.9 GB
  EXPECT_LT(weights_gb, 67.0);
  EXPECT_GE(left_gb, 40.0);
}

}  // namespace
}  // namespace keel::cuda
