// FP8 e4m3 weights kept as stored on the device (k_fp8.h, quant_linear.h): dequantization
// equals the CPU reference (formats/quant.cpp) bit for bit for every code and each scale
// layout, with the sm_89+ conversion and with the portable one forced; the GEMV (M <= 8)
// and the dequantize + cuBLASLt path match a double-precision reference; a make-model FP8
// model gives the CPU runner's greedy tokens on the GPU.
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
#include "exec/cuda/quant_linear.h"
#include "formats/make_model.h"
#include "formats/model_weights.h"
#include "formats/quant.h"

namespace keel::cuda {
namespace {

using test::download;
using test::from_bf16;
using test::random_bf16_values;
using test::rel_err;
using test::to_bf16;
using test::upload;

// An [N, K] FP8 weight with host scales in one of the three layouts.
struct HostFp8 {
  std::int64_t N = 0, K = 0;
  std::vector<std::uint8_t> bytes;
  std::vector<float> scale_grid;
  TensorScale scale;
  TensorView view() const {
    TensorView t;
    t.name = "w";
    t.dtype = DType::kF8_E4M3;
    t.shape = {N, K};
    t.data = reinterpret_cast<const std::byte *>(bytes.data());
    t.nbytes = bytes.size();
    t.scale = scale;
    t.scale.data = scale_grid.data();
    return t;
  }
};

// all_codes: bytes cycle through all 256 codes (NaN included); else codes of finite values.
HostFp8 make_fp8(std::int64_t N, std::int64_t K, const std::string &layout, bool all_codes,
                 std::mt19937 &rng) {
  HostFp8 w;
  w.N = N;
  w.K = K;
  w.bytes.resize(N * K);
  std::uniform_int_distribution<int> code(0, 255);
  for (std::size_t i = 0; i < w.bytes.size(); ++i) {
    int c = all_codes ? static_cast<int>((i * 7 + i / 256) % 256) : code(rng);
    if (!all_codes && (c & 0x7F) == 0x7F) c ^= 1;  // no NaN in a matmul
    w.bytes[i] = static_cast<std::uint8_t>(c);
  }
  if (layout == "block")
    w.scale = {nullptr, (N + 127) / 128, (K + 127) / 128, 128, 128};
  else if (layout == "channel")
    w.scale = {nullptr, N, 1, 1, K};
  else
    w.scale = {nullptr, 1, 1, N, K};
  std::uniform_real_distribution<float> s(1e-4f, 2e-3f);
  w.scale_grid.resize(w.scale.grid_rows * w.scale.grid_cols);
  for (auto &x : w.scale_grid) x = s(rng);
  return w;
}

// The layout and device bytes (weight, then the device scale grid) of a one-part weight.
struct DeviceFp8 {
  LinearLayout layout;
  DeviceBuffer buf;
};
DeviceFp8 to_device(CudaContext &ctx, const HostFp8 &w) {
  const TensorView t = w.view();
  std::vector<TensorScale> scales = {t.scale};
  DeviceFp8 d;
  d.layout = plan_linear({{"w", DType::kF8_E4M3}}, {w.N}, w.K, true, &scales);
  EXPECT_TRUE(d.layout.quantized());
  std::vector<std::uint8_t> all(d.layout.bytes());
  std::memcpy(all.data(), w.bytes.data(), w.bytes.size());
  const auto grid = fp8_device_scales(t.scale, w.K);
  EXPECT_EQ(d.layout.part_scale_offsets[0] + grid.size() * 4, all.size());
  std::memcpy(all.data() + d.layout.part_scale_offsets[0], grid.data(), grid.size() * 4);
  d.buf = upload(ctx, all);
  return d;
}

Fp8Weight weight_of(const DeviceFp8 &d) {
  const WeightRange &r = d.layout.ranges.at(0);
  return Fp8Weight{d.buf.as<std::byte>() + r.offset,
                   reinterpret_cast<const float *>(d.buf.as<std::byte>() + r.scale_offset),
                   r.scale_block_rows, d.layout.N, d.layout.K};
}

bool same_value(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  std::uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

class Fp8Layouts : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8Layouts, DequantizeEqualsCpuReferenceBitForBit) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(7);
  const HostFp8 w = make_fp8(200, 272, GetParam(), true, rng);  // partial blocks both ways
  const std::vector<float> ref = dequantize(w.view());
  const DeviceFp8 d = to_device(ctx, w);
  const std::int64_t n = w.N * w.K;
  for (Fp8Convert cvt : {Fp8Convert::kAuto, Fp8Convert::kPortable}) {
    DeviceBuffer f32(n * 4), b16(n * 2);
    test::poison(ctx, f32);
    test::poison(ctx, b16);
    launch_dequantize_fp8_f32(ctx.compute(), weight_of(d), f32.as<float>(), cvt);
    launch_dequantize_fp8(ctx.compute(), weight_of(d), b16.as<bf16>(), cvt);
    const auto got = download<float>(ctx, f32, n);
    const auto got16 = from_bf16(download<std::uint16_t>(ctx, b16, n));
    const auto want16 = from_bf16(to_bf16(ref));
    std::int64_t bad = 0, bad16 = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      bad += !same_value(got[i], ref[i]);
      bad16 += !same_value(got16[i], want16[i]);
    }
    EXPECT_EQ(bad, 0) << "f32, convert " << int(cvt);
    EXPECT_EQ(bad16, 0) << "bf16, convert " << int(cvt);
  }
}

TEST_P(Fp8Layouts, LinearMatchesFloatReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  Gemm gemm(ctx);
  std::mt19937 rng(3);
  const HostFp8 w = make_fp8(136, 400 - 400 % 16, GetParam(), false, rng);
  const std::int64_t N = w.N, K = w.K;
  const std::vector<float> values = dequantize(w.view());
  const DeviceFp8 d = to_device(ctx, w);
  DeviceBuffer scratch(d.layout.bf16_bytes());
  for (std::int64_t M : {1, 3, 8, 9, 33}) {
    const auto x = random_bf16_values(M * K, rng);
    const DeviceBuffer dx = upload(ctx, to_bf16(x));
    std::vector<float> ref(M * N);
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t r = 0; r < N; ++r) {
        double s = 0;
        for (std::int64_t k = 0; k < K; ++k) s += double(x[m * K + k]) * values[r * K + k];
        ref[m * N + r] = static_cast<float>(s);
      }
    DeviceBuffer y32(M * N * 4), y16(M * N * 2);
    test::poison(ctx, y32);
    test::poison(ctx, y16);
    run_linear(gemm, ctx.compute(), d.layout, d.buf.data(), dx.as<bf16>(), y32.data(), true, M,
               scratch.data());
    run_linear(gemm, ctx.compute(), d.layout, d.buf.data(), dx.as<bf16>(), y16.data(), false, M,
               scratch.data());
    const auto got = download<float>(ctx, y32, M * N);
    EXPECT_LT(rel_err(got, ref), M <= kFp8GemvMaxM ? 1e-5 : 6e-3) << "M=" << M;
    EXPECT_LT(rel_err(from_bf16(download<std::uint16_t>(ctx, y16, M * N)), ref), 8e-3) << "M=" << M;
    if (M <= kFp8GemvMaxM) {  // the portable conversion sums the same values: same bits
      DeviceBuffer yp(M * N * 4);
      launch_gemv_fp8(ctx.compute(), weight_of(d), dx.as<bf16>(), yp.data(), true, N,
                      static_cast<int>(M), Fp8Convert::kPortable);
      EXPECT_EQ(download<float>(ctx, yp, M * N), got) << "M=" << M;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Scales, Fp8Layouts, ::testing::Values("block", "channel", "tensor"));

TEST(Fp8Plan, StackedPartsShareOneRangeWhenTheirGridsContinue) {
  TensorScale block{nullptr, 2, 2, 128, 128}, tensor{nullptr, 1, 1, 64, 256};
  std::vector<TensorScale> s = {block, block, block};
  const float one = 1;
  for (auto &x : s) x.data = &one;
  const LinearLayout l =
      plan_linear({{"q", DType::kF8_E4M3}, {"k", DType::kF8_E4M3}, {"v", DType::kF8_E4M3}},
                  {256, 128, 128}, 256, true, &s);
  ASSERT_EQ(l.ranges.size(), 1u);
  EXPECT_EQ(l.describe(), "fp8");
  EXPECT_EQ(l.bytes(), 512u * 256 + (2 + 1 + 1) * 2 * 4);
  tensor.data = &one;
  s = {tensor, tensor};
  EXPECT_EQ(plan_linear({{"a", DType::kF8_E4M3}, {"b", DType::kF8_E4M3}}, {64, 64}, 256, true, &s)
                .ranges.size(),
            1u);  // per-tensor blocks of 64 rows continue each other too
  s = {block};
  EXPECT_FALSE(plan_linear({{"w", DType::kF8_E4M3}}, {256}, 256, false, &s).quantized());
  TensorScale odd{&one, 4, 4, 64, 64};  // 64-column blocks: not the device grid's
  s = {odd};
  EXPECT_FALSE(plan_linear({{"w", DType::kF8_E4M3}}, {256}, 256, true, &s).quantized());
}

// A make-model FP8 model: the GPU runner (kept FP8, and converted to bf16 at load) gives
// the CPU runner's greedy tokens wherever the CPU's top two logits are apart.
TEST(CudaFp8Model, GreedyTokensMatchTheCpuRunner) {
  KEEL_REQUIRE_CUDA_DEVICE();
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("keel_cuda_fp8_" + std::to_string(::getpid()));
  MakeModelOptions mo;
  mo.arch = "qwen3";
  mo.hidden = 320;
  mo.intermediate = 448;
  mo.layers = 2;
  mo.heads = 5;
  mo.kv_heads = 1;
  mo.head_dim = 64;
  mo.vocab = 512;
  mo.dtype = DType::kF8_E4M3;
  mo.seed = 5;
  mo.threads = 1;
  mo.out = dir;
  make_model(mo);

  CudaContext ctx;
  CudaRunnerOptions o;
  o.block_size = 16;
  o.num_kv_blocks = 8;
  o.max_batch_tokens = 64;
  o.max_seqs = 2;
  o.max_logits_rows = 64;
  o.max_model_len = 128;
  o.quantized_weights = QuantizedWeights::kAuto;
  auto kept = CudaModelRunner::open(dir, ctx, o);
  // The layers' linear weights in fp8; the lm_head stays bf16, as the FP8 releases ship it.
  EXPECT_EQ(kept->weight_format(), "bf16+fp8");
  o.quantized_weights = QuantizedWeights::kOff;
  auto bf16w = CudaModelRunner::open(dir, ctx, o);
  EXPECT_EQ(bf16w->weight_format(), "bf16");
  EXPECT_LT(kept->weight_bytes(), bf16w->weight_bytes());
  ExecContext cpu_ctx(2);
  auto cpu = cpu::CpuModelRunner::open(dir, cpu_ctx, {8, 16});

  ForwardBatch b;
  for (int i = 0; i < 20; ++i) b.tokens.push_back((i * 37 + 3) % 512);
  b.seqs.push_back({0, 20, 0, 0, 2, SequenceSlice::Logits::kLast});
  b.block_table = {1, 0};
  ForwardBatch d;
  d.seqs.push_back({0, 1, 20, 0, 2, SequenceSlice::Logits::kLast});
  d.block_table = {1, 0};
  int compared = 0;
  for (int step = 0; step < 10; ++step) {
    ForwardOutput oc, ok, ob;
    ForwardBatch &batch = step == 0 ? b : d;
    cpu->forward(batch, oc);
    kept->forward(batch, ok);
    bf16w->forward(batch, ob);
    ASSERT_EQ(ok.logits.size(), oc.logits.size());
    for (float x : ok.logits) ASSERT_TRUE(std::isfinite(x));
    const auto ic = std::max_element(oc.logits.begin(), oc.logits.end()) - oc.logits.begin();
    float second = -1e30f;
    for (std::size_t i = 0; i < oc.logits.size(); ++i)
      if (static_cast<std::ptrdiff_t>(i) != ic) second = std::max(second, oc.logits[i]);
    EXPECT_LT(test::rel_err(ok.logits, oc.logits), 3e-2) << "step " << step;
    if (oc.logits[ic] - second > 2e-2f * std::abs(oc.logits[ic]) + 2e-3f) {
      EXPECT_EQ(std::max_element(ok.logits.begin(), ok.logits.end()) - ok.logits.begin(), ic)
          << "kept fp8, step " << step;
      EXPECT_EQ(std::max_element(ob.logits.begin(), ob.logits.end()) - ob.logits.begin(), ic)
          << "bf16 at load, step " << step;
      ++compared;
    }
    d.tokens = {static_cast<TokenId>(ic)};
    if (step > 0) d.seqs[0].start_pos += 1;
  }
  EXPECT_GT(compared, 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace keel::cuda
