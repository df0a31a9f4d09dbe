// MXFP4 weights on the device (k_mxfp4.h): dequantization equals the CPU reference
// (formats/mxfp4.cpp) bit for bit for every scale and every byte alignment of the blocks;
// the GEMV (rows of odd byte length, M = 1..8) and the stacked-experts GEMV match a
// double-precision reference; a tiny MXFP4 GGUF model gives the same greedy tokens on
// the CPU runner and on the CUDA runner with its weights kept MXFP4.
#include "formats/mxfp4.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "cuda_test_util.h"
#include "exec/cpu/cpu_model_runner.h"
#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/k_mxfp4.h"
#include "formats/make_model.h"
#include "formats/quant.h"

namespace keel::cuda {
namespace {

using test::download;
using test::from_bf16;
using test::random_bf16_values;
using test::rel_err;
using test::to_bf16;
using test::upload;

// Random blocks: every scale 0..255 in turn (so 255, NaN, too), random nibbles.
std::vector<std::uint8_t> blocks_every_scale(std::int64_t blocks, std::mt19937 &rng) {
  std::vector<std::uint8_t> b(blocks * kMxfp4BlockBytes);
  for (std::int64_t i = 0; i < blocks; ++i) {
    b[i * 17] = static_cast<std::uint8_t>(i % 256);
    for (int j = 1; j < 17; ++j) b[i * 17 + j] = static_cast<std::uint8_t>(rng());
  }
  return b;
}

TEST(CudaMxfp4, DequantizeEqualsCpuBitForBitAtEveryAlignment) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(17);
  const std::int64_t blocks = 512 + 7, n = blocks * 32;
  const auto bytes = blocks_every_scale(blocks, rng);
  std::vector<float> want(n);
  dequantize_row(DType::kMXFP4, bytes.data(), want.data(), n);
  for (int shift = 0; shift < 4; ++shift) {
    std::vector<std::uint8_t> shifted(shift, 0xAB);
    shifted.insert(shifted.end(), bytes.begin(), bytes.end());
    const DeviceBuffer src = upload(ctx, shifted);
    DeviceBuffer f32(n * 4), b16(n * 2);
    test::poison(ctx, f32);
    test::poison(ctx, b16);
    launch_dequantize_mxfp4_f32(ctx.compute(), src.as<std::uint8_t>() + shift, f32.as<float>(), n);
    launch_dequantize_mxfp4(ctx.compute(), src.as<std::uint8_t>() + shift, b16.as<bf16>(), n);
    const auto got = download<float>(ctx, f32, n);
    const auto got16 = download<std::uint16_t>(ctx, b16, n);
    const auto want16 = to_bf16(want);
    int bad = 0;
    for (std::int64_t i = 0; i < n && bad < 5; ++i) {
      const bool nan = std::isnan(want[i]);
      std::uint32_t a, b;
      std::memcpy(&a, &got[i], 4);
      std::memcpy(&b, &want[i], 4);
      if (nan ? !std::isnan(got[i]) : a != b) {
        ADD_FAILURE() << "shift " << shift << " element " << i << ": " << got[i] << " vs "
                      << want[i];
        ++bad;
      }
      if (nan ? !std::isnan(bf16_to_f32(got16[i])) : got16[i] != want16[i]) {
        ADD_FAILURE() << "shift " << shift << " bf16 element " << i;
        ++bad;
      }
    }
  }
}

std::vector<float> reference(const std::vector<float> &x, const std::vector<float> &w,
                             std::int64_t M, std::int64_t N, std::int64_t K) {
  std::vector<float> y(M * N);
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (std::int64_t k = 0; k < K; ++k) s += double(x[m * K + k]) * w[n * K + k];
      y[m * N + n] = static_cast<float>(s);
    }
  return y;
}

// Random N(0, 1) rows quantized: blocks and their dequantized values.
void random_weight(std::int64_t rows, std::int64_t K, std::mt19937 &rng,
                   std::vector<std::uint8_t> &bytes, std::vector<float> &values) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> src(rows * K);
  for (auto &v : src) v = d(rng);
  bytes.resize(dtype_bytes(DType::kMXFP4, rows * K));
  quantize_row(DType::kMXFP4, src.data(), bytes.data(), rows * K);
  values.resize(rows * K);
  dequantize_row(DType::kMXFP4, bytes.data(), values.data(), rows * K);
}

TEST(CudaMxfp4, GemvMatchesFloatReferenceOnOddRowLengths) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(5);
  const std::int64_t N = 37, K = 544;  // rows of 17 blocks: 289 bytes, every alignment
  std::vector<std::uint8_t> bytes;
  std::vector<float> values;
  random_weight(N, K, rng, bytes, values);
  const DeviceBuffer w = upload(ctx, bytes);
  for (int M = 1; M <= kMxfp4GemvMaxM; ++M) {
    const auto x = random_bf16_values(M * K, rng);
    const DeviceBuffer dx = upload(ctx, to_bf16(x));
    const auto ref = reference(x, values, M, N, K);
    DeviceBuffer y32(M * N * 4), y16(M * N * 2);
    test::poison(ctx, y32);
    test::poison(ctx, y16);
    launch_gemv_mxfp4(ctx.compute(), dx.as<bf16>(), w.data(), y32.data(), true, N, M, N, K);
    launch_gemv_mxfp4(ctx.compute(), dx.as<bf16>(), w.data(), y16.data(), false, N, M, N, K);
    EXPECT_LT(rel_err(download<float>(ctx, y32, M * N), ref), 1e-5) << "M=" << M;
    EXPECT_LT(rel_err(from_bf16(download<std::uint16_t>(ctx, y16, M * N)), ref), 8e-3) << "M=" << M;
  }
}

TEST(CudaMxfp4, ExpertGemvReadsTheChosenExperts) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(9);
  const std::int64_t E = 4, N = 24, K = 96;
  std::vector<std::uint8_t> bytes;
  std::vector<float> values;
  random_weight(E * N, K, rng, bytes, values);
  const std::size_t stride = dtype_bytes(DType::kMXFP4, N * K);
  const DeviceBuffer w = upload(ctx, bytes);
  // Two tokens, two experts each (slots_per_x = 2); the last id is out of range.
  const std::vector<std::int32_t> ids = {2, 0, 3, 7};
  const DeviceBuffer dids = upload(ctx, ids);
  const auto x = random_bf16_values(2 * K, rng);
  const DeviceBuffer dx = upload(ctx, to_bf16(x));
  DeviceBuffer y(4 * N * 4);
  test::poison(ctx, y);
  launch_gemv_mxfp4_experts(ctx.compute(), dx.as<bf16>(), K, 2, w.data(), stride,
                            static_cast<int>(E), dids.as<std::int32_t>(), 4, y.data(), true, N, N,
                            K);
  const auto got = download<float>(ctx, y, 4 * N);
  for (int s = 0; s < 4; ++s) {
    std::vector<float> ys(got.begin() + s * N, got.begin() + (s + 1) * N);
    if (ids[s] >= E) {
      for (float v : ys) EXPECT_EQ(v, 0.0f) << "slot " << s;
      continue;
    }
    const std::vector<float> xs(x.begin() + (s / 2) * K, x.begin() + (s / 2 + 1) * K);
    const std::vector<float> we(values.begin() + ids[s] * N * K,
                                values.begin() + (ids[s] + 1) * N * K);
    EXPECT_LT(rel_err(ys, reference(xs, we, 1, N, K)), 1e-5) << "slot " << s;
  }
}

TokenId argmax(const std::vector<float> &v) {
  return static_cast<TokenId>(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST(CudaMxfp4, TinyModelGreedyTokensMatchTheCpu) {
  KEEL_REQUIRE_CUDA_DEVICE();
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("keel_cuda_mxfp4_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  MakeModelOptions mo;
  mo.arch = "llama";
  mo.hidden = 256;
  mo.intermediate = 512;
  mo.layers = 2;
  mo.heads = 4;
  mo.kv_heads = 2;
  mo.head_dim = 64;
  mo.vocab = 512;
  mo.dtype = DType::kMXFP4;
  mo.gguf = true;
  mo.seed = 9;
  mo.threads = 1;
  mo.out = dir / "m.gguf";
  make_model(mo);

  ExecContext x(2);
  auto cpu = cpu::CpuModelRunner::open(mo.out, x, cpu::KvOptions{8, 16});
  CudaContext ctx;
  CudaRunnerOptions o;
  o.block_size = 16;
  o.num_kv_blocks = 8;
  o.max_batch_tokens = 64;
  o.max_seqs = 2;
  o.max_logits_rows = 64;
  o.max_model_len = 128;
  o.quantized_weights = QuantizedWeights::kOn;
  auto gpu = CudaModelRunner::open(mo.out, ctx, o);
  EXPECT_EQ(gpu->weight_format(), "mxfp4");

  ForwardBatch b;
  for (int i = 0; i < 20; ++i) b.tokens.push_back((i * 37 + 3) % 512);
  b.seqs.push_back({0, 20, 0, 0, 2, SequenceSlice::Logits::kAll});
  b.block_table = {1, 0};
  ForwardOutput oc, og;
  cpu->forward(b, oc);
  gpu->forward(b, og);
  ASSERT_EQ(og.logits.size(), oc.logits.size());
  for (float v : og.logits) ASSERT_TRUE(std::isfinite(v));
  // bf16 activations and KV on the GPU vs f32 on the CPU.
  EXPECT_LT(rel_err(og.logits, oc.logits), 3e-2);
  // Greedy decode (both fed the CPU's tokens): the same argmax wherever the CPU's top two
  // logits are further apart than the backends' rounding.
  ForwardBatch d;
  d.tokens = {argmax(std::vector<float>(oc.logits.end() - 512, oc.logits.end()))};
  d.seqs.push_back({0, 1, 20, 0, 2, SequenceSlice::Logits::kLast});
  d.block_table = {1, 0};
  int compared = 0;
  for (int step = 0; step < 12; ++step) {
    ForwardOutput lc, lg;
    cpu->forward(d, lc);
    gpu->forward(d, lg);
    const TokenId ic = argmax(lc.logits), ig = argmax(lg.logits);
    float second = -1e30f;
    for (std::size_t i = 0; i < lc.logits.size(); ++i)
      if (static_cast<TokenId>(i) != ic) second = std::max(second, lc.logits[i]);
    if (lc.logits[ic] - second > 2e-2f * std::abs(lc.logits[ic]) + 2e-3f) {
      EXPECT_EQ(ic, ig) << "step " << step;
      ++compared;
    }
    d.tokens = {ic};
    d.seqs[0].start_pos += 1;
  }
  EXPECT_GT(compared, 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace keel::cuda
