// GGUF blocks kept quantized on the device (k_quant.h, quant_linear.h): dequantization
// equals the CPU reference (formats/quant.cpp) bit for bit per format; the quantized GEMV
// (M <= 8: k_qgemv.h's integer-dot GEMV for GGUF blocks where it runs the shape, the float
// GEMV for MXFP4 and the rest) and the dequantize + cuBLASLt path (larger M) match a
// double-precision reference over the same dequantized weights; layouts that mix formats
// and bad shapes.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "cuda_test_util.h"
#include "exec/cuda/k_qgemv.h"
#include "exec/cuda/quant_linear.h"
#include "formats/quant.h"
#include "quant_test_util.h"

namespace keel::cuda {
namespace {

using test::download;
using test::from_bf16;
using test::make_quant;
using test::QuantMatrix;
using test::random_bf16_values;
using test::rel_err;
using test::to_bf16;
using test::upload;

class QuantWeights : public ::testing::TestWithParam<DType> {};

TEST_P(QuantWeights, DequantizeEqualsCpuReferenceBitForBit) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(11);
  const std::int64_t n = 256 * 37;
  const QuantMatrix q = make_quant(GetParam(), 1, n, rng);
  const DeviceBuffer src = upload(ctx, q.bytes);
  DeviceBuffer f32(n * 4), b16(n * 2);
  test::poison(ctx, f32);
  test::poison(ctx, b16);
  const QuantFormat f = *device_quant_format(GetParam());
  launch_dequantize_f32(ctx.compute(), f, src.data(), f32.as<float>(), n);
  launch_dequantize(ctx.compute(), f, src.data(), b16.as<bf16>(), n);
  const auto got = download<float>(ctx, f32, n);
  const auto got16 = download<std::uint16_t>(ctx, b16, n);
  ASSERT_EQ(std::memcmp(got.data(), q.values.data(), n * sizeof(float)), 0);
  EXPECT_EQ(got16, to_bf16(q.values));
  // From the second block on: a K-quant's 144 / 176 bytes keep 16-byte alignment, Q6_K's 210
  // start 2 bytes past a 4-byte boundary (its loads are 2-byte), Q8_0 / Q4_0 as any row.
  if (f == QuantFormat::kMXFP4) return;
  const std::int64_t block = quant_block_elems(f), rest = n - block;
  const auto *from = src.as<std::uint8_t>() + quant_block_bytes(f);
  test::poison(ctx, f32);
  test::poison(ctx, b16);
  launch_dequantize_f32(ctx.compute(), f, from, f32.as<float>(), rest);
  launch_dequantize(ctx.compute(), f, from, b16.as<bf16>(), rest);
  const std::vector<float> tail(q.values.begin() + block, q.values.end());
  const auto got_tail = download<float>(ctx, f32, rest);
  ASSERT_EQ(std::memcmp(got_tail.data(), tail.data(), rest * sizeof(float)), 0);
  EXPECT_EQ(download<std::uint16_t>(ctx, b16, rest), to_bf16(tail));
}

TEST_P(QuantWeights, LinearMatchesFloatReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  Gemm gemm(ctx);
  std::mt19937 rng(3);
  const std::int64_t N = 72, K = 512;
  const QuantMatrix q = make_quant(GetParam(), N, K, rng);
  const LinearLayout layout = plan_linear({{"w", GetParam()}}, {N}, K, true);
  ASSERT_TRUE(layout.quantized());
  const DeviceBuffer w = upload(ctx, q.bytes);
  DeviceBuffer scratch(layout.bf16_bytes());
  for (std::int64_t M : {1, 3, 8, 9, 33}) {
    const auto x = random_bf16_values(M * K, rng);
    const DeviceBuffer dx = upload(ctx, to_bf16(x));
    std::vector<float> ref(M * N);
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t r = 0; r < N; ++r) {
        double s = 0;
        for (std::int64_t k = 0; k < K; ++k) s += double(x[m * K + k]) * q.values[r * K + k];
        ref[m * N + r] = static_cast<float>(s);
      }
    DeviceBuffer y32(M * N * 4), y16(M * N * 2);
    test::poison(ctx, y32);
    test::poison(ctx, y16);
    run_linear(gemm, ctx.compute(), layout, w.data(), dx.as<bf16>(), y32.data(), true, M,
               scratch.data());
    run_linear(gemm, ctx.compute(), layout, w.data(), dx.as<bf16>(), y16.data(), false, M,
               scratch.data());
    // GGUF blocks at M <= 8 take the integer-dot GEMV, which rounds the input to int8 in
    // blocks of 32 (k_qgemv.h: ~4e-3 of the output's norm for these inputs; 1.5e-2 as
    // qgemv_test, where a wrong block or scale errs by order 1). MXFP4's float GEMV
    // multiplies the exact dequantized weights (f32 accumulation): 1e-5 as the bf16 GEMV.
    // Larger M rounds the weights to bf16 first (cuBLASLt): bf16 rounding.
    const bool int_dot = M <= kQuantGemvMaxM && GetParam() != DType::kMXFP4;
    const double gemv_bound = int_dot ? 1.5e-2 : 1e-5;
    EXPECT_LT(rel_err(download<float>(ctx, y32, M * N), ref),
              M <= kQuantGemvMaxM ? gemv_bound : 6e-3)
        << "M=" << M;
    EXPECT_LT(rel_err(from_bf16(download<std::uint16_t>(ctx, y16, M * N)), ref),
              int_dot ? 1.5e-2 : 8e-3)
        << "M=" << M;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantWeights,
                         ::testing::Values(DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K,
                                           DType::kQ6_K, DType::kMXFP4),
                         [](const auto &info) { return std::string(dtype_name(info.param)); });

TEST(QuantLinear, MixedFormatsInOneStackedWeight) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  Gemm gemm(ctx);
  std::mt19937 rng(5);
  const std::int64_t K = 256;
  // q | k | v as Q4_K, Q4_K, Q6_K: two ranges, the first merged.
  const QuantMatrix a = make_quant(DType::kQ4_K, 40, K, rng),
                    b = make_quant(DType::kQ4_K, 8, K, rng),
                    c = make_quant(DType::kQ6_K, 8, K, rng);
  const LinearLayout layout = plan_linear(
      {{"q", DType::kQ4_K}, {"k", DType::kQ4_K}, {"v", DType::kQ6_K}}, {40, 8, 8}, K, true);
  ASSERT_EQ(layout.ranges.size(), 2u);
  EXPECT_EQ(layout.describe(), "q4_k+q6_k");
  std::vector<std::uint8_t> bytes = a.bytes;
  bytes.insert(bytes.end(), b.bytes.begin(), b.bytes.end());
  ASSERT_EQ(bytes.size(), layout.part_offsets[2]);
  bytes.insert(bytes.end(), c.bytes.begin(), c.bytes.end());
  ASSERT_EQ(bytes.size(), layout.bytes());
  std::vector<float> values = a.values;
  values.insert(values.end(), b.values.begin(), b.values.end());
  values.insert(values.end(), c.values.begin(), c.values.end());
  const DeviceBuffer w = upload(ctx, bytes);
  DeviceBuffer scratch(layout.bf16_bytes());
  for (std::int64_t M : {2, 16}) {
    const auto x = random_bf16_values(M * K, rng);
    const DeviceBuffer dx = upload(ctx, to_bf16(x));
    std::vector<float> ref(M * 56);
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t r = 0; r < 56; ++r) {
        double s = 0;
        for (std::int64_t k = 0; k < K; ++k) s += double(x[m * K + k]) * values[r * K + k];
        ref[m * 56 + r] = static_cast<float>(s);
      }
    DeviceBuffer y(M * 56 * 4);
    test::poison(ctx, y);
    run_linear(gemm, ctx.compute(), layout, w.data(), dx.as<bf16>(), y.data(), true, M,
               scratch.data());
    // M = 2: the integer-dot GEMV per range (the input's int8 rounding, as above); M = 16:
    // the weights dequantized to bf16 for cuBLASLt.
    EXPECT_LT(rel_err(download<float>(ctx, y, M * 56), ref), M <= kQuantGemvMaxM ? 1.5e-2 : 6e-3)
        << "M=" << M;
  }
}

// run_linear's few-row path is the integer-dot GEMV wherever qgemv_supported says so: its
// output equals launch_qgemv's bit for bit, per range of a mixed layout (columns of each
// row N apart), f32 and bf16. Where the staged int8 input would not fit in shared memory
// (M = 8 rows of K = 24,576: 240 KB) it is the float GEMV's (launch_gemv_quant), also bit
// for bit.
TEST(QuantLinear, FewRowsTakeTheIntegerDotGemvWhereItRuns) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  Gemm gemm(ctx);
  std::mt19937 rng(7);
  const std::size_t smem = ctx.features().smem_per_block;
  {
    const std::int64_t K = 512;
    const QuantMatrix a = make_quant(DType::kQ4_K, 24, K, rng),
                      c = make_quant(DType::kQ6_K, 8, K, rng);
    const LinearLayout layout =
        plan_linear({{"q", DType::kQ4_K}, {"v", DType::kQ6_K}}, {24, 8}, K, true);
    ASSERT_EQ(layout.ranges.size(), 2u);
    std::vector<std::uint8_t> bytes = a.bytes;
    bytes.insert(bytes.end(), c.bytes.begin(), c.bytes.end());
    const DeviceBuffer w = upload(ctx, bytes);
    // Gemm::set_qgemv_choice: dp4a; the tensor-core kernel from 5 rows on (at 5 and 8); dp4a
    // streamed through 3 ring slots.
    for (const QgemvChoice choice :
         {QgemvChoice{kQgemvMmaOff, 0}, QgemvChoice{5, 0}, QgemvChoice{kQgemvMmaOff, 3}})
      for (int M : {1, 5, kQgemvMaxM})
        for (bool y_f32 : {true, false}) {
          SCOPED_TRACE("M=" + std::to_string(M) + (y_f32 ? " f32" : " bf16") + " mma from " +
                       std::to_string(choice.mma_min_m) + " stages " +
                       std::to_string(choice.stream_stages));
          gemm.set_qgemv_choice(choice);
          ASSERT_TRUE(qgemv_supported(QuantFormat::kQ4_K, M, K, smem));
          const DeviceBuffer dx = upload(ctx, to_bf16(random_bf16_values(M * K, rng)));
          const std::size_t bytes_out = std::size_t(M) * 32 * (y_f32 ? 4 : 2);
          DeviceBuffer got(bytes_out), want(bytes_out);
          test::poison(ctx, got);
          test::poison(ctx, want);
          run_linear(gemm, ctx.compute(), layout, w.data(), dx.as<bf16>(), got.data(), y_f32, M,
                     nullptr);
          std::int64_t n0 = 0;
          for (const WeightRange &r : layout.ranges) {
            QgemvParams p;
            p.format = r.format;
            p.w = static_cast<const std::byte *>(w.data()) + r.offset;
            p.N = r.rows;
            p.K = K;
            p.M = M;
            p.x = dx.as<bf16>();
            p.out = y_f32 ? GemvOut::kF32 : GemvOut::kBf16;
            p.y = static_cast<std::byte *>(want.data()) + n0 * (y_f32 ? 4 : 2);
            p.ldy = 32;
            choice.apply(p);
            launch_qgemv(ctx.compute(), p, ctx.num_sms());
            n0 += r.rows;
          }
          EXPECT_EQ(download<std::uint8_t>(ctx, got, bytes_out),
                    download<std::uint8_t>(ctx, want, bytes_out));
        }
  }
  {  // (gemm still asks for the tensor-core kernel from 5 rows: the fallback ignores it)
    const std::int64_t N = 16, K = 24576;
    const int M = kQgemvMaxM;
    ASSERT_FALSE(qgemv_supported(QuantFormat::kQ8_0, M, K, smem));
    ASSERT_TRUE(qgemv_supported(QuantFormat::kQ8_0, 1, K, smem));
    const QuantMatrix q = make_quant(DType::kQ8_0, N, K, rng);
    const LinearLayout layout = plan_linear({{"w", DType::kQ8_0}}, {N}, K, true);
    const DeviceBuffer w = upload(ctx, q.bytes);
    const DeviceBuffer dx = upload(ctx, to_bf16(random_bf16_values(M * K, rng)));
    DeviceBuffer got(M * N * 4), want(M * N * 4);
    test::poison(ctx, got);
    test::poison(ctx, want);
    run_linear(gemm, ctx.compute(), layout, w.data(), dx.as<bf16>(), got.data(), true, M, nullptr);
    launch_gemv_quant(ctx.compute(), QuantFormat::kQ8_0, dx.as<bf16>(), w.data(), want.data(), true,
                      N, M, N, K);
    EXPECT_EQ(download<float>(ctx, got, M * N), download<float>(ctx, want, M * N));
  }
}

TEST(QuantLinear, PlanRejectsRowsThatAreNotWholeBlocksNamingTheTensor) {
  try {
    plan_linear({{"model.layers.0.mlp.down_proj.weight", DType::kQ4_K}}, {8}, 320, true);
    FAIL() << "expected an error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.mlp.down_proj.weight"), std::string::npos);
  }
  // A part that does not stay quantized (f16) makes the whole stacked weight bf16.
  EXPECT_FALSE(
      plan_linear({{"q", DType::kQ8_0}, {"k", DType::kF16}}, {8, 8}, 64, true).quantized());
  EXPECT_FALSE(plan_linear({{"q", DType::kQ8_0}}, {8}, 64, false).quantized());
}

TEST(QuantLinear, AutoKeepsBlocksQuantizedOnlyWhenBf16WouldNotFit) {
  const std::int64_t gb = 1ll << 30;
  EXPECT_FALSE(keep_quantized_auto(16 * gb, 130 * gb));  // 8B on an H200: bf16, faster today
  EXPECT_TRUE(keep_quantized_auto(140 * gb, 130 * gb));  // 70B: only fits quantized
  EXPECT_TRUE(keep_quantized_auto(16 * gb, 24 * gb));    // 8B on a 24 GB card
}

}  // namespace
}  // namespace keel::cuda
