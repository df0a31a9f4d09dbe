// The tensor-core GEMMs over GGUF blocks (k_qgemm.h) for batched decode. The integer one (Q8_0 /
// Q4_0) at M = 9..200 rows (one partial column tile, several 64-column blocks, a last block of a
// few columns), odd N (rows past the last 32- or 64-row block), K of 256 values, 2,304 (odd
// blocks start 2 bytes off a 4-byte boundary), 2,560 + 64 (a last step of 2 blocks, K % 256 = 0
// not required) and down_proj's 14,336, bf16 and f32 out, both K splits (k_groups 2 and 4),
// against a double-precision reference over the CPU's dequantization of the same blocks
// (formats/quant.cpp) and the bf16 input. The bound is the GEMVs' (qgemv_test.cpp): the input's
// int8 rounding, 1.5e-2 of the output's norm, where a wrong nibble, scale, permutation or column
// gives errors of order 1. Each case prints its error so one device run shows which shapes
// drift; the two K splits differ only in f32 summation order. The dequantizing bf16 one (the
// K-quants) the same way, tighter. Then run_linear: steps of 9..qgemm_max_m rows take them (bit
// for bit their launches here, per range of a stacked weight), others keep the GEMV or
// dequantize + cuBLASLt.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "cuda_test_util.h"
#include "exec/cuda/k_qgemm.h"
#include "exec/cuda/k_qgemv.h"
#include "exec/cuda/quant_linear.h"
#include "quant_test_util.h"

namespace keel::cuda {
namespace {

using test::download;
using test::from_bf16;
using test::make_quant;
using test::QuantMatrix;
using test::rel_err;
using test::to_bf16;
using test::upload;

constexpr double kBound = 1.5e-2;

double max_abs_diff(const std::vector<float> &a, const std::vector<float> &b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::isfinite(a[i]) ? std::fabs(double(a[i]) - b[i]) : INFINITY);
  return m;
}

// y = x W^T in double precision over the CPU's dequantization of W, rounded to f32.
std::vector<float> reference_product(const std::vector<float> &x, const QuantMatrix &w, int M,
                                     std::int64_t N, std::int64_t K) {
  std::vector<float> y(std::size_t(M) * N);
  for (int m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (std::int64_t k = 0; k < K; ++k) acc += double(x[m * K + k]) * w.values[n * K + k];
      y[m * N + n] = static_cast<float>(acc);
    }
  return y;
}

using Shapes = std::vector<std::array<std::int64_t, 2>>;

// A GEMM of format t against the double-precision reference: every (N, K) of `shapes`, M 9 / 16
// / 33 / 64 / 200 (up to 64 at K = 14,336: the reference's time), f32 and bf16 out, each of
// `variants` (printed as `variant`) through run(d_w, d_x, M, N, K, y_f32, variant). Each case
// prints its error and stays within `bound`; the variants differ from the first in f32
// summation order only: within `f32_spread` (bf16 out: a rounding, 1e-2).
template <typename Run>
void check_against_reference(CudaContext &ctx, DType t, std::mt19937 &rng, const Shapes &shapes,
                             const char *name, const char *variant,
                             const std::vector<int> &variants, double bound, double f32_spread,
                             Run run) {
  for (const auto &[N, K] : shapes) {
    const QuantMatrix w = make_quant(t, N, K, rng);
    const DeviceBuffer d_w = upload(ctx, w.bytes);
    for (int M : {9, 16, 33, 64, 200}) {
      if (K == 14336 && M > 64) continue;
      const auto x = test::random_bf16_values(std::size_t(M) * K, rng, -2.0f, 2.0f);
      const std::vector<float> want = reference_product(x, w, M, N, K);
      const DeviceBuffer d_x = upload(ctx, to_bf16(x));
      for (bool y_f32 : {true, false}) {
        std::vector<std::vector<float>> got;
        for (int v : variants) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " M " + std::to_string(M) + " N " +
                       std::to_string(N) + " K " + std::to_string(K) +
                       (y_f32 ? " f32 " : " bf16 ") + variant + " " + std::to_string(v));
          got.push_back(run(d_w, d_x, M, N, K, y_f32, v));
          const double e = rel_err(got.back(), want);
          std::printf("%s %s M %3d N %3lld K %5lld %s %s %d: rel err %.3g, max |d| %.3g\n", name,
                      std::string(dtype_name(t)).c_str(), M, static_cast<long long>(N),
                      static_cast<long long>(K), y_f32 ? "f32 " : "bf16", variant, v, e,
                      max_abs_diff(got.back(), want));
          EXPECT_LT(e, bound);
        }
        for (std::size_t i = 1; i < got.size(); ++i)
          EXPECT_LT(rel_err(got[i], got[0]), y_f32 ? f32_spread : 1e-2)
              << dtype_name(t) << " M " << M << " N " << N << " K " << K;
      }
    }
  }
}

// y = x W^T through launch_qgemm_quantize_input + launch_qgemm (rows ldy apart: 0 is N).
std::vector<float> run_qgemm(CudaContext &ctx, QuantFormat f, const DeviceBuffer &w,
                             const DeviceBuffer &x, int M, std::int64_t N, std::int64_t K,
                             bool y_f32, int k_groups) {
  DeviceBuffer staged(qgemm_input_bytes(M, K));
  test::poison(ctx, staged);
  launch_qgemm_quantize_input(ctx.compute(), x.as<bf16>(), 0, M, K, staged.data());
  DeviceBuffer y(std::size_t(M) * N * (y_f32 ? 4 : 2));
  test::poison(ctx, y);
  QgemmParams p;
  p.format = f;
  p.w = w.data();
  p.N = N;
  p.K = K;
  p.M = M;
  p.staged = staged.data();
  p.y_f32 = y_f32;
  p.y = y.data();
  p.k_groups = k_groups;
  launch_qgemm(ctx.compute(), p, ctx.num_sms());
  if (y_f32) return download<float>(ctx, y, std::size_t(M) * N);
  return from_bf16(download<std::uint16_t>(ctx, y, std::size_t(M) * N));
}

class Qgemm : public ::testing::TestWithParam<DType> {};

TEST_P(Qgemm, MatchesFloatReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(43);
  const DType t = GetParam();
  const QuantFormat f = *device_quant_format(t);
  // The last shape's last step has 2 blocks.
  const Shapes shapes = {{77, 256}, {45, 2304}, {131, 14336}, {33, 2560 + 64}};
  // The two K splits (k_groups 2 and 4).
  check_against_reference(
      ctx, t, rng, shapes, "qgemm", "k_groups", {2, 4}, kBound, 1e-5,
      [&](const DeviceBuffer &d_w, const DeviceBuffer &d_x, int M, std::int64_t N, std::int64_t K,
          bool y_f32, int kg) { return run_qgemm(ctx, f, d_w, d_x, M, N, K, y_f32, kg); });
}

INSTANTIATE_TEST_SUITE_P(Formats, Qgemm, ::testing::Values(DType::kQ8_0, DType::kQ4_0),
                         [](const auto &info) { return std::string(dtype_name(info.param)); });

// y = x W^T through launch_qgemm_bf16 with `splits` (0: its choice) and a workspace for any.
std::vector<float> run_qgemm_bf16(CudaContext &ctx, QuantFormat f, const DeviceBuffer &w,
                                  const DeviceBuffer &x, int M, std::int64_t N, std::int64_t K,
                                  bool y_f32, int splits) {
  DeviceBuffer y(std::size_t(M) * N * (y_f32 ? 4 : 2));
  test::poison(ctx, y);
  DeviceBuffer ws(std::max<std::size_t>(16, std::size_t(16) * M * N * 4));
  test::poison(ctx, ws);
  QgemmBf16Params p;
  p.format = f;
  p.w = w.data();
  p.N = N;
  p.K = K;
  p.M = M;
  p.x = x.as<bf16>();
  p.y_f32 = y_f32;
  p.y = y.data();
  p.workspace = ws.data();
  p.workspace_bytes = ws.bytes();
  p.splits = splits;
  launch_qgemm_bf16(ctx.compute(), p, ctx.num_sms());
  if (y_f32) return download<float>(ctx, y, std::size_t(M) * N);
  return from_bf16(download<std::uint16_t>(ctx, y, std::size_t(M) * N));
}

// The dequantizing bf16 GEMM (launch_qgemm_bf16): the K-quants at the same M as the integer one
// (a partial column tile, several 64-column blocks, a last block of a few columns), N past a
// 128-row block and below one, K of one super-block, nine (Q6_K's odd super-blocks 2 bytes off
// a 4-byte boundary: Q6_K's weights then load into registers) and 14,336 (every format's
// weights staged through shared memory, Q6_K's in 16-byte windows at odd offsets), bf16 and f32
// out, one split, three and the launch's own choice, against the double-precision reference. Its
// error is the weights' bf16 rounding (value, scale and min each rounded: 0.0054-0.0058 of the
// output's norm at K = 14,336 on an H100), so the bound is tighter than the integer GEMM's; the
// splits' f32 sums differ in order only.
class QgemmBf16 : public ::testing::TestWithParam<DType> {};

TEST_P(QgemmBf16, MatchesFloatReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(59);
  const DType t = GetParam();
  const QuantFormat f = *device_quant_format(t);
  // One split, three and the launch's own; f32 sums of 56 steps in another order are ~1e-5
  // apart at K = 14,336.
  check_against_reference(ctx, t, rng, {{77, 256}, {300, 2304}, {131, 14336}}, "qgemm_bf16",
                          "splits", {1, 3, 0}, 1e-2, 5e-5,
                          [&](const DeviceBuffer &d_w, const DeviceBuffer &d_x, int M,
                              std::int64_t N, std::int64_t K, bool y_f32, int splits) {
                            return run_qgemm_bf16(ctx, f, d_w, d_x, M, N, K, y_f32, splits);
                          });
}

INSTANTIATE_TEST_SUITE_P(Formats, QgemmBf16,
                         ::testing::Values(DType::kQ4_K, DType::kQ5_K, DType::kQ6_K),
                         [](const auto &info) { return std::string(dtype_name(info.param)); });

TEST(QgemmBf16, RejectsWhatItCannotRun) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  EXPECT_FALSE(qgemm_bf16_supported(QuantFormat::kQ8_0, 16, 256));
  EXPECT_FALSE(qgemm_bf16_supported(QuantFormat::kMXFP4, 16, 256));
  EXPECT_FALSE(qgemm_bf16_supported(QuantFormat::kQ4_K, 0, 256));
  EXPECT_TRUE(qgemm_bf16_supported(QuantFormat::kQ6_K, 64, 14336));
  DeviceBuffer buf(1 << 16);
  QgemmBf16Params p;
  p.format = QuantFormat::kQ4_K;
  p.w = buf.data();
  p.x = buf.as<bf16>();
  p.y = buf.data();
  p.N = 4;
  p.K = 320;  // not whole super-blocks
  p.M = 16;
  EXPECT_THROW(launch_qgemm_bf16(ctx.compute(), p, ctx.num_sms()), Error);
  p.K = 256;
  p.x = buf.as<bf16>() + 4;  // misaligned
  EXPECT_THROW(launch_qgemm_bf16(ctx.compute(), p, ctx.num_sms()), Error);
  p.x = buf.as<bf16>();
  p.format = QuantFormat::kQ4_0;
  EXPECT_THROW(launch_qgemm_bf16(ctx.compute(), p, ctx.num_sms()), Error);
}

// The staged input alone: launch_qgemm_quantize_input's codes and (scale, sum) pairs equal a
// host quantization of the same bf16 rows (ties at .5 aside: |code difference| <= 1), padded
// rows are zero. Tells a staging bug from a GEMM one.
TEST(Qgemm, QuantizedInputMatchesHostQuantization) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(47);
  const int M = 13, Mp = 16;
  const std::int64_t K = 512, kb = K / 32;
  const auto x = test::random_bf16_values(std::size_t(M) * K, rng, -3.0f, 3.0f);
  const DeviceBuffer d_x = upload(ctx, to_bf16(x));
  DeviceBuffer staged(qgemm_input_bytes(M, K));
  ASSERT_EQ(staged.bytes(), std::size_t(Mp) * K + std::size_t(Mp) * kb * 8);
  test::poison(ctx, staged);
  launch_qgemm_quantize_input(ctx.compute(), d_x.as<bf16>(), 0, M, K, staged.data());
  const auto q = download<std::int8_t>(ctx, staged, std::size_t(Mp) * K);
  const auto all = download<float>(ctx, staged, staged.bytes() / 4);
  const float *ds = all.data() + std::size_t(Mp) * K / 4;
  int worst = 0;
  double worst_d = 0;
  for (std::int64_t j = 0; j < kb; ++j)
    for (int m = 0; m < Mp; ++m) {
      const std::int8_t *rec = q.data() + (j * Mp + m) * 32;
      float amax = 0;
      for (int v = 0; v < 32 && m < M; ++v) amax = std::max(amax, std::fabs(x[m * K + 32 * j + v]));
      const float d = amax / 127.0f;
      int isum = 0;
      for (int v = 0; v < 32; ++v) {
        const int pos = 8 * ((v % 16) / 4) + 4 * (v / 16) + v % 4;  // the permuted record
        const int want =
            m < M && amax > 0 ? int(std::nearbyint(x[m * K + 32 * j + v] * (127.0f / amax))) : 0;
        worst = std::max(worst, std::abs(int(rec[pos]) - want));
        isum += rec[pos];
      }
      const float gd = ds[2 * (j * Mp + m)], gs = ds[2 * (j * Mp + m) + 1];
      worst_d =
          std::max({worst_d, double(std::fabs(gd - d)) / std::max(d, 1e-30f),
                    double(std::fabs(gs - gd * float(isum))) / std::max(std::fabs(gs), 1e-30f)});
    }
  std::printf("qgemm staging: max |code - host code| %d, max rel (d, sum) error %.3g\n", worst,
              worst_d);
  EXPECT_LE(worst, 1);
  EXPECT_LT(worst_d, 1e-6);
}

// run_linear: with Gemm::set_qgemm_max_m(m) steps of kQgemvMaxM < M <= m rows run a GEMM over
// the blocks, bit for bit its launches above per range of a stacked weight (columns of each row
// N apart): the integer one for a Q8_0 | Q4_0 weight, the dequantizing bf16 one for a Q4_K |
// Q6_K weight (which, with Gemm::set_qgemm_bf16(false), dequantizes for cuBLASLt instead). Past
// m, dequantize + cuBLASLt, within each GEMM's bound of it. M = 8 stays on the GEMV.
TEST(QuantLinear, BatchedRowsTakeTheQuantizedGemm) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  Gemm gemm(ctx);
  std::mt19937 rng(53);
  const std::int64_t K = 1024, N = 48 + 32;
  // A weight of two ranges in `formats`, its device bytes.
  struct Stacked {
    LinearLayout layout;
    DeviceBuffer w;
  };
  auto stacked = [&](DType a, DType b) {
    const QuantMatrix qa = make_quant(a, 48, K, rng), qb = make_quant(b, 32, K, rng);
    std::vector<std::uint8_t> bytes = qa.bytes;
    bytes.insert(bytes.end(), qb.bytes.begin(), qb.bytes.end());
    return Stacked{plan_linear({{"q", a}, {"v", b}}, {48, 32}, K, true), upload(ctx, bytes)};
  };
  const Stacked ints = stacked(DType::kQ8_0, DType::kQ4_0),
                kq = stacked(DType::kQ4_K, DType::kQ6_K);
  ASSERT_EQ(ints.layout.ranges.size(), 2u);
  ASSERT_EQ(kq.layout.ranges.size(), 2u);
  EXPECT_FALSE(run_linear_uses_qgemm(ints.layout, kQgemvMaxM));
  EXPECT_TRUE(run_linear_uses_qgemm(ints.layout, kQgemvMaxM + 1));
  EXPECT_TRUE(run_linear_uses_qgemm(ints.layout, 256));
  EXPECT_FALSE(run_linear_uses_qgemm(kq.layout, kQgemvMaxM + 1));  // K-quants: the bf16 GEMM
  EXPECT_FALSE(run_linear_uses_qgemm(plan_linear({{"w", DType::kQ8_0}}, {48}, K, false), 16));
  EXPECT_FALSE(run_linear_uses_qgemm_bf16(kq.layout, kQgemvMaxM));
  EXPECT_TRUE(run_linear_uses_qgemm_bf16(kq.layout, kQgemvMaxM + 1));
  EXPECT_FALSE(run_linear_uses_qgemm_bf16(ints.layout, 16));
  DeviceBuffer scratch(std::max(run_linear_scratch_bytes(ints.layout, 256),
                                run_linear_scratch_bytes(kq.layout, 256)));
  ASSERT_GE(scratch.bytes(), qgemm_input_bytes(200, K));
  for (int M : {16, 200})
    for (bool y_f32 : {true, false}) {
      SCOPED_TRACE("M=" + std::to_string(M) + (y_f32 ? " f32" : " bf16"));
      const DeviceBuffer dx = upload(ctx, to_bf16(test::random_bf16_values(M * K, rng)));
      const std::size_t out = std::size_t(M) * N * (y_f32 ? 4 : 2);
      auto as_float = [&](const DeviceBuffer &b) {
        return y_f32 ? download<float>(ctx, b, std::size_t(M) * N)
                     : from_bf16(download<std::uint16_t>(ctx, b, std::size_t(M) * N));
      };
      // y through run_linear with qgemm_max_m `max_m`, poisoned first.
      auto linear = [&](const Stacked &st, int max_m) {
        DeviceBuffer y(out);
        test::poison(ctx, y);
        gemm.set_qgemm_max_m(max_m);
        run_linear(gemm, ctx.compute(), st.layout, st.w.data(), dx.as<bf16>(), y.data(), y_f32, M,
                   scratch.data());
        return y;
      };
      // The integer GEMM (max_m past the default 64: the mechanism, not the choice).
      const DeviceBuffer got = linear(ints, 256);
      DeviceBuffer staged(qgemm_input_bytes(M, K)), want(out);
      test::poison(ctx, want);
      launch_qgemm_quantize_input(ctx.compute(), dx.as<bf16>(), 0, M, K, staged.data());
      std::int64_t n0 = 0;
      for (const WeightRange &r : ints.layout.ranges) {
        QgemmParams p;
        p.format = r.format;
        p.w = static_cast<const std::byte *>(ints.w.data()) + r.offset;
        p.N = r.rows;
        p.K = K;
        p.M = M;
        p.staged = staged.data();
        p.y_f32 = y_f32;
        p.y = static_cast<std::byte *>(want.data()) + n0 * (y_f32 ? 4 : 2);
        p.ldy = N;
        launch_qgemm(ctx.compute(), p, 0);
        n0 += r.rows;
      }
      EXPECT_EQ(download<std::uint8_t>(ctx, got, out), download<std::uint8_t>(ctx, want, out));
      // Past the threshold: dequantize + cuBLASLt, which sees the unrounded input.
      const double e = rel_err(as_float(got), as_float(linear(ints, M - 1)));
      std::printf("run_linear M %d %s: GEMM vs dequantize + cuBLASLt rel err %.3g\n", M,
                  y_f32 ? "f32" : "bf16", e);
      EXPECT_LT(e, kBound);
      // The dequantizing bf16 GEMM: bit for bit its launches per range, with the workspace
      // run_linear grants it (the bf16 weight's size).
      const DeviceBuffer got16 = linear(kq, 256);
      DeviceBuffer want16(out), ws(kq.layout.bf16_bytes());
      test::poison(ctx, want16);
      n0 = 0;
      for (const WeightRange &r : kq.layout.ranges) {
        QgemmBf16Params p;
        p.format = r.format;
        p.w = static_cast<const std::byte *>(kq.w.data()) + r.offset;
        p.N = r.rows;
        p.K = K;
        p.M = M;
        p.x = dx.as<bf16>();
        p.y_f32 = y_f32;
        p.y = static_cast<std::byte *>(want16.data()) + n0 * (y_f32 ? 4 : 2);
        p.ldy = N;
        p.workspace = ws.data();
        p.workspace_bytes = ws.bytes();
        launch_qgemm_bf16(ctx.compute(), p, 0);
        n0 += r.rows;
      }
      EXPECT_EQ(download<std::uint8_t>(ctx, got16, out), download<std::uint8_t>(ctx, want16, out));
      const DeviceBuffer deq16 = linear(kq, M - 1);
      const double e16 = rel_err(as_float(got16), as_float(deq16));
      std::printf("run_linear M %d %s: bf16 GEMM vs dequantize + cuBLASLt rel err %.3g\n", M,
                  y_f32 ? "f32" : "bf16", e16);
      EXPECT_LT(e16, 1e-2);
      // Off: the K-quants dequantize for cuBLASLt below the threshold too.
      gemm.set_qgemm_bf16(false);
      EXPECT_EQ(download<std::uint8_t>(ctx, linear(kq, 256), out),
                download<std::uint8_t>(ctx, deq16, out));
      gemm.set_qgemm_bf16(true);
    }
}

TEST(Qgemm, RejectsWhatItCannotRun) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  const std::size_t smem = ctx.features().smem_per_block;
  EXPECT_FALSE(qgemm_supported(QuantFormat::kMXFP4, 16, 256, smem));
  EXPECT_FALSE(qgemm_supported(QuantFormat::kQ6_K, 16, 256, smem));  // the bf16 GEMM's
  EXPECT_FALSE(qgemm_supported(QuantFormat::kQ8_0, 0, 256, smem));
  EXPECT_FALSE(qgemm_supported(QuantFormat::kQ8_0, 16, 336, smem));  // not whole blocks
  EXPECT_TRUE(qgemm_supported(QuantFormat::kQ4_0, 16, 320, smem));
  EXPECT_TRUE(qgemm_supported(QuantFormat::kQ8_0, 256, 14336, smem));
  DeviceBuffer buf(1 << 16);
  QgemmParams p;
  p.format = QuantFormat::kQ4_K;
  p.w = buf.data();
  p.staged = buf.data();
  p.y = buf.data();
  p.N = 4;
  p.K = 256;
  p.M = 16;
  EXPECT_THROW(launch_qgemm(ctx.compute(), p, ctx.num_sms()), Error);
  p.format = QuantFormat::kQ8_0;
  p.K = 336;
  EXPECT_THROW(launch_qgemm(ctx.compute(), p, ctx.num_sms()), Error);
  p.K = 256;
  p.staged = buf.as<std::uint8_t>() + 8;  // misaligned
  EXPECT_THROW(launch_qgemm(ctx.compute(), p, ctx.num_sms()), Error);
  p.staged = buf.data();
  p.k_groups = 3;
  EXPECT_THROW(launch_qgemm(ctx.compute(), p, ctx.num_sms()), Error);
  EXPECT_THROW(
      launch_qgemm_quantize_input(ctx.compute(), buf.as<bf16>() + 1, 0, 16, 256, buf.data()),
      Error);
}

}  // namespace
}  // namespace keel::cuda
