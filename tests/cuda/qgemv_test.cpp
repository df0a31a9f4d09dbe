// The integer-dot GEMV over GGUF blocks (k_qgemv.h), both kernels (dp4a, tensor cores:
// QgemvParams::mma): every format, M = 1..8, each prologue and epilogue of the fused decode
// path, with and without programmatic launch, against a double-precision reference over
// the CPU's dequantization of the same blocks (formats/quant.cpp) and the bf16 input the
// unfused path would feed the GEMM. The bound is the input's int8 rounding (k_qgemv.h):
// 1.5e-2 of the output's norm, where a wrong scale, nibble or sub-block gives errors of
// order 1. The two kernels stage the same int8 input, so they also agree with each other
// up to float summation order.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <string>

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
using test::rel_err;
using test::to_bf16;
using test::upload;

constexpr double kBound = 1.5e-2;

float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

struct Case {
  GemvIn in = GemvIn::kBf16;
  GemvOut out = GemvOut::kF32;
  int M = 1;
  std::int64_t N = 0, K = 0;
  bool with_rows = false, pdl = false;
  bool mma = false;  // QgemvParams::mma
  int stages = 0;    // QgemvParams::stream_stages
};

void check(CudaContext &ctx, DType t, const Case &c, std::mt19937 &rng) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " in " + std::to_string(int(c.in)) + " out " +
               std::to_string(int(c.out)) + " M " + std::to_string(c.M) + " N " +
               std::to_string(c.N) + " K " + std::to_string(c.K) + (c.pdl ? " pdl" : "") +
               (c.mma ? " mma" : " dp4a") + " stages " + std::to_string(c.stages));
  const int M = c.M;
  const std::int64_t N = c.N, K = c.K;
  const QuantMatrix w = make_quant(t, N, K, rng);
  const auto x = test::random_bf16_values(std::size_t(M) * K, rng, -2.0f, 2.0f);
  const int res_rows = M + 3;
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> residual(std::size_t(res_rows) * K);
  for (auto &v : residual) v = dist(rng);
  const auto norm_w = test::random_bf16_values(K, rng, 0.5f, 1.5f);
  std::vector<std::int32_t> rows;
  if (c.with_rows)
    for (int m = 0; m < M; ++m) rows.push_back((m * 2 + 1) % res_rows);
  const float eps = 1e-5f;
  // The input the kernel stages, as the unfused path's bf16.
  std::vector<float> xin(std::size_t(M) * K);
  for (int m = 0; m < M; ++m) {
    if (c.in == GemvIn::kBf16) {
      std::copy_n(x.begin() + m * K, K, xin.begin() + m * K);
      continue;
    }
    const float *r = residual.data() + std::size_t(rows.empty() ? m : rows[m]) * K;
    double ss = 0;
    for (std::int64_t k = 0; k < K; ++k) ss += double(r[k]) * r[k];
    const double inv = 1.0 / std::sqrt(ss / K + eps);
    for (std::int64_t k = 0; k < K; ++k)
      xin[m * K + k] = round_bf16(static_cast<float>(r[k] * inv * norm_w[k]));
  }
  std::vector<double> ref(std::size_t(M) * N);
  for (int m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (std::int64_t k = 0; k < K; ++k) acc += double(xin[m * K + k]) * w.values[n * K + k];
      ref[m * N + n] = acc;
    }
  const DeviceBuffer d_w = upload(ctx, w.bytes), d_x = upload(ctx, to_bf16(x)),
                     d_res = upload(ctx, residual), d_norm = upload(ctx, to_bf16(norm_w)),
                     d_rows = upload(ctx, rows.empty() ? std::vector<std::int32_t>{0} : rows);
  std::vector<float> start(std::size_t(M) * N);
  for (auto &v : start) v = dist(rng);
  DeviceBuffer y =
      c.out == GemvOut::kAddResidual ? upload(ctx, start) : DeviceBuffer(std::size_t(M) * N * 4);
  if (c.out != GemvOut::kAddResidual) test::poison(ctx, y);
  QgemvParams p;
  p.format = *device_quant_format(t);
  p.w = d_w.data();
  p.N = N;
  p.K = K;
  p.M = M;
  p.in = c.in;
  p.x = d_x.as<bf16>();
  p.residual = d_res.as<float>();
  p.rows = c.with_rows ? d_rows.as<std::int32_t>() : nullptr;
  p.norm_weight = d_norm.as<bf16>();
  p.eps = eps;
  p.out = c.out;
  p.y = y.data();
  p.pdl = c.pdl;
  p.mma = c.mma;
  p.stream_stages = c.stages;
  launch_qgemv(ctx.compute(), p, ctx.num_sms());
  std::vector<float> got, want(ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) want[i] = static_cast<float>(ref[i]);
  switch (c.out) {
    case GemvOut::kF32:
      got = download<float>(ctx, y, ref.size());
      break;
    case GemvOut::kBf16:
      got = from_bf16(download<std::uint16_t>(ctx, y, ref.size()));
      break;
    case GemvOut::kAddResidual:
      got = download<float>(ctx, y, ref.size());
      for (std::size_t i = 0; i < ref.size(); ++i) {
        got[i] -= start[i];  // compare the added products
        want[i] = round_bf16(want[i]);
      }
      break;
    case GemvOut::kSwiglu: {
      const std::int64_t I = N / 2;
      got = from_bf16(download<std::uint16_t>(ctx, y, std::size_t(M) * I));
      want.resize(std::size_t(M) * I);
      for (int m = 0; m < M; ++m)
        for (std::int64_t i = 0; i < I; ++i) {
          const double g = round_bf16(static_cast<float>(ref[m * N + i]));
          const double u = round_bf16(static_cast<float>(ref[m * N + I + i]));
          want[m * I + i] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
        }
      break;
    }
  }
  EXPECT_LT(rel_err(got, want), kBound);
}

class Qgemv : public ::testing::TestWithParam<DType> {};

TEST_P(Qgemv, EveryRowCountMatchesFloatReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(17);
  // K: one super-block, a few with a partial unrolled pass, many passes (down_proj's
  // 14336 at M = 8 stages 143 KB); N not a multiple of the warps per block.
  for (int M = 1; M <= kQgemvMaxM; ++M)
    for (auto [N, K] : {std::array<std::int64_t, 2>{77, 256}, {45, 2304}})
      check(ctx, GetParam(), {GemvIn::kBf16, GemvOut::kF32, M, N, K}, rng);
  check(ctx, GetParam(), {GemvIn::kBf16, GemvOut::kBf16, 8, 19, 14336}, rng);
  check(ctx, GetParam(), {GemvIn::kBf16, GemvOut::kF32, 3, 33, 14336}, rng);
}

TEST_P(Qgemv, FusedProloguesAndEpiloguesMatchReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(23);
  for (bool pdl : {false, true})
    for (int M : {1, 3, kFusedGemvMaxM}) {
      check(ctx, GetParam(), {GemvIn::kRmsNorm, GemvOut::kBf16, M, 96, 1024, false, pdl}, rng);
      check(ctx, GetParam(), {GemvIn::kBf16, GemvOut::kAddResidual, M, 64, 1536, false, pdl}, rng);
      check(ctx, GetParam(), {GemvIn::kRmsNorm, GemvOut::kSwiglu, M, 2 * 72, 512, false, pdl}, rng);
    }
  // The LM head: the norm of selected residual rows, f32 out, more rows than the
  // persistent grid's warps (each warp loops).
  check(ctx, GetParam(), {GemvIn::kRmsNorm, GemvOut::kF32, 2, 40000, 256, true, true}, rng);
}

// The tensor-core kernel: the same shapes (K of one super-block, where seven of the eight
// warps have no units; K = 2,304, nine super-blocks, so odd rows of Q6_K / Q8_0 / Q4_0
// start 2 bytes off a 4-byte boundary; down_proj's K at M = 8; N not a multiple of the
// 16- or 32-row group).
TEST_P(Qgemv, TensorCoresEveryRowCountMatchesFloatReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(31);
  for (int M = 1; M <= kQgemvMaxM; ++M)
    for (auto [N, K] : {std::array<std::int64_t, 2>{77, 256}, {45, 2304}})
      check(ctx, GetParam(), {GemvIn::kBf16, GemvOut::kF32, M, N, K, false, false, true}, rng);
  check(ctx, GetParam(), {GemvIn::kBf16, GemvOut::kBf16, 8, 19, 14336, false, false, true}, rng);
  check(ctx, GetParam(), {GemvIn::kBf16, GemvOut::kF32, 3, 33, 14336, false, false, true}, rng);
}

// Every prologue and epilogue at every M (the tensor-core kernel's M is a run-time value:
// columns past M are zero), with and without `pdl` (launched plainly either way).
TEST_P(Qgemv, TensorCoresFusedProloguesAndEpiloguesMatchReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(37);
  for (bool pdl : {false, true})
    for (int M = 1; M <= kQgemvMaxM; ++M) {
      check(ctx, GetParam(), {GemvIn::kRmsNorm, GemvOut::kBf16, M, 96, 1024, false, pdl, true},
            rng);
      check(ctx, GetParam(), {GemvIn::kBf16, GemvOut::kAddResidual, M, 64, 1536, false, pdl, true},
            rng);
      check(ctx, GetParam(), {GemvIn::kRmsNorm, GemvOut::kSwiglu, M, 2 * 72, 512, false, pdl, true},
            rng);
      check(ctx, GetParam(), {GemvIn::kRmsNorm, GemvOut::kF32, M, 100, 768, true, pdl, true}, rng);
    }
  // The LM head: more row groups than the grid's blocks (each block loops).
  check(ctx, GetParam(), {GemvIn::kRmsNorm, GemvOut::kF32, 2, 40000, 256, true, true, true}, rng);
  check(ctx, GetParam(), {GemvIn::kRmsNorm, GemvOut::kSwiglu, 8, 2 * 9000, 512, true, true, true},
        rng);
}

// Both kernels stage the same int8 input and apply the same scales per 32 values, so their
// f32 outputs differ only by float summation order (a wrong permutation of A against B, a
// dropped min term or column would show here at the scale of the outputs).
TEST_P(Qgemv, TensorCoresAgreeWithDp4a) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(41);
  const std::int64_t N = 200, K = 4096;
  const QuantMatrix w = make_quant(GetParam(), N, K, rng);
  const DeviceBuffer d_w = upload(ctx, w.bytes);
  for (int M = 1; M <= kQgemvMaxM; ++M) {
    SCOPED_TRACE("M " + std::to_string(M));
    const auto x = test::random_bf16_values(std::size_t(M) * K, rng, -2.0f, 2.0f);
    const DeviceBuffer d_x = upload(ctx, to_bf16(x));
    std::vector<float> out[2];
    for (int mma = 0; mma < 2; ++mma) {
      DeviceBuffer y(std::size_t(M) * N * 4);
      test::poison(ctx, y);
      QgemvParams p;
      p.format = *device_quant_format(GetParam());
      p.w = d_w.data();
      p.N = N;
      p.K = K;
      p.M = M;
      p.x = d_x.as<bf16>();
      p.out = GemvOut::kF32;
      p.y = y.data();
      p.mma = mma == 1;
      launch_qgemv(ctx.compute(), p, ctx.num_sms());
      out[mma] = download<float>(ctx, y, std::size_t(M) * N);
    }
    EXPECT_LT(rel_err(out[1], out[0]), 1e-5);
  }
}

// The streamed dp4a kernel (QgemvParams::stream_stages): every prologue and epilogue against
// the float reference, at ring depths 2 and 4, rows a whole number of 16 bytes (K = 4,096: a
// chunk a row; 4,608: a full chunk and a partial one).
TEST_P(Qgemv, StreamedMatchesFloatReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(43);
  const QuantFormat f = *device_quant_format(GetParam());
  const std::size_t smem = ctx.features().smem_per_block;
  for (int stages : {2, 4})
    for (int M : {1, 2, 3, kQgemvMaxM}) {
      ASSERT_TRUE(qgemv_stream_supported(f, M, 4096, stages, smem));
      check(ctx, GetParam(),
            {GemvIn::kRmsNorm, GemvOut::kBf16, M, 96, 4096, false, true, false, stages}, rng);
      check(ctx, GetParam(),
            {GemvIn::kBf16, GemvOut::kAddResidual, M, 64, 4096, false, false, false, stages}, rng);
      check(ctx, GetParam(),
            {GemvIn::kRmsNorm, GemvOut::kSwiglu, M, 2 * 72, 4096, true, true, false, stages}, rng);
      if (qgemv_stream_supported(f, M, 4608, stages, smem))
        check(ctx, GetParam(),
              {GemvIn::kBf16, GemvOut::kF32, M, 77, 4608, false, true, false, stages}, rng);
    }
}

// The streamed kernel runs the register kernel's dot products in the same order (the same
// units a lane, the same reduction), so both give the same outputs up to the compiler's
// contraction choices: a unit read from the wrong slot, chunk or offset would be off at the
// scale of the outputs. Every ring depth, a partial last chunk, and more rows than the grid
// has warps (each warp's ring then runs across rows and SwiGLU's gate / up parts).
TEST_P(Qgemv, StreamedAgreesWithTheRegisterKernel) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(47);
  const QuantFormat f = *device_quant_format(GetParam());
  const std::size_t smem = ctx.features().smem_per_block;
  struct Shape {
    std::int64_t N, K;
    GemvOut out;
  };
  for (const Shape sh : {Shape{200, 4096, GemvOut::kF32}, Shape{45, 14336, GemvOut::kF32},
                         Shape{77, 4608, GemvOut::kF32}, Shape{6000, 4096, GemvOut::kF32},
                         Shape{2 * 5000, 4096, GemvOut::kSwiglu}}) {
    const QuantMatrix w = make_quant(GetParam(), sh.N, sh.K, rng);
    const DeviceBuffer d_w = upload(ctx, w.bytes);
    const std::int64_t cols = sh.out == GemvOut::kSwiglu ? sh.N / 2 : sh.N;
    for (int M : {1, 2, 5, kQgemvMaxM}) {
      if (!qgemv_supported(f, M, sh.K, smem)) continue;
      const auto x = test::random_bf16_values(std::size_t(M) * sh.K, rng, -2.0f, 2.0f);
      const DeviceBuffer d_x = upload(ctx, to_bf16(x));
      auto run = [&](int stages) {
        DeviceBuffer y(std::size_t(M) * cols * 4);
        test::poison(ctx, y);
        QgemvParams p;
        p.format = f;
        p.w = d_w.data();
        p.N = sh.N;
        p.K = sh.K;
        p.M = M;
        p.x = d_x.as<bf16>();
        p.out = sh.out;
        p.y = y.data();
        p.pdl = ctx.features().programmatic_launch;
        p.stream_stages = stages;
        launch_qgemv(ctx.compute(), p, ctx.num_sms());
        const std::size_t n = std::size_t(M) * cols;
        return sh.out == GemvOut::kSwiglu ? from_bf16(download<std::uint16_t>(ctx, y, n))
                                          : download<float>(ctx, y, n);
      };
      const std::vector<float> reg = run(0);
      for (int stages = 2; stages <= kQgemvMaxStreamStages; ++stages) {
        if (!qgemv_stream_supported(f, M, sh.K, stages, smem)) continue;
        SCOPED_TRACE("N " + std::to_string(sh.N) + " K " + std::to_string(sh.K) + " M " +
                     std::to_string(M) + " stages " + std::to_string(stages));
        EXPECT_LT(rel_err(run(stages), reg), 1e-6);
      }
    }
  }
}

// Expert slots (QgemvParams::expert_ids, the MoE decode's routed experts): slot s runs expert
// ids[s] on input row s / slots_per_x into output row s, and equals the GEMV of that expert
// alone bit for bit (the same kernel arithmetic a row); an id outside [0, experts) gives a
// zero row. Register and streamed kernels, f32 and bf16 out, output rows wider than N.
TEST_P(Qgemv, ExpertSlotsEqualThePerExpertGemv) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(53);
  const QuantFormat f = *device_quant_format(GetParam());
  constexpr int E = 3, S = 6, kPerX = 2;
  const std::vector<std::int32_t> ids = {1, 2, -1, 0, 2, 3};  // 3: past the experts
  for (const std::int64_t K : {std::int64_t{512}, std::int64_t{4096}}) {
    const std::int64_t N = 40, ldy = 48;
    const std::int64_t bytes =
        static_cast<std::int64_t>(quant_block_bytes(f)) * N * (K / quant_block_elems(f));
    const std::int64_t stride = (bytes + 15) / 16 * 16;
    std::vector<std::uint8_t> w(std::size_t(E * stride));
    for (int e = 0; e < E; ++e) {
      const QuantMatrix q = make_quant(GetParam(), N, K, rng);
      std::copy(q.bytes.begin(), q.bytes.end(), w.begin() + e * stride);
    }
    const auto x = test::random_bf16_values(std::size_t(S / kPerX) * K, rng, -2.0f, 2.0f);
    const DeviceBuffer dw = upload(ctx, w), dx = upload(ctx, to_bf16(x)), di = upload(ctx, ids);
    for (const bool f32 : {true, false})
      for (const int stages : {0, kQgemvStreamDefaultStages}) {
        SCOPED_TRACE("K " + std::to_string(K) + (f32 ? " f32" : " bf16") + " stages " +
                     std::to_string(stages));
        const std::size_t esize = f32 ? 4 : 2;
        DeviceBuffer y(S * ldy * esize), one(N * esize);
        test::poison(ctx, y);
        QgemvParams p;
        p.format = f;
        p.w = dw.data();
        p.N = N;
        p.K = K;
        p.M = 1;
        p.x = dx.as<bf16>();
        p.out = f32 ? GemvOut::kF32 : GemvOut::kBf16;
        p.y = y.data();
        p.ldy = ldy;
        p.stream_stages = stages;
        p.expert_ids = di.as<std::int32_t>();
        p.expert_stride = stride;
        p.experts = E;
        p.slots = S;
        p.slots_per_x = kPerX;
        launch_qgemv(ctx.compute(), p, ctx.num_sms());
        const auto got = download<std::uint8_t>(ctx, y, S * ldy * esize);
        for (int sl = 0; sl < S; ++sl) {
          std::vector<std::uint8_t> want(N * esize, 0);  // zeros for an unknown expert
          if (ids[sl] >= 0 && ids[sl] < E) {
            QgemvParams q = p;
            q.w = dw.as<std::uint8_t>() + ids[sl] * stride;
            q.x = dx.as<bf16>() + (sl / kPerX) * K;
            q.y = one.data();
            q.ldy = 0;
            q.expert_ids = nullptr;
            launch_qgemv(ctx.compute(), q, ctx.num_sms());
            want = download<std::uint8_t>(ctx, one, N * esize);
          }
          const std::vector<std::uint8_t> row(got.begin() + sl * ldy * esize,
                                              got.begin() + (sl * ldy + N) * esize);
          EXPECT_EQ(row, want) << "slot " << sl;
        }
      }
  }
  // What the expert slots refuse: M > 1, pdl, the tensor-core kernel, a misaligned stride.
  QgemvParams p;
  p.format = f;
  p.N = 8;
  p.K = 512;
  p.M = 2;
  const DeviceBuffer dw(4096), dx(4096), dy(4096), di(64);
  p.w = dw.data();
  p.x = dx.as<bf16>();
  p.y = dy.data();
  p.out = GemvOut::kF32;
  p.expert_ids = di.as<std::int32_t>();
  p.expert_stride = 1024;
  p.experts = 1;
  EXPECT_THROW(launch_qgemv(ctx.compute(), p, ctx.num_sms()), Error);
  p.M = 1;
  p.pdl = true;
  EXPECT_THROW(launch_qgemv(ctx.compute(), p, ctx.num_sms()), Error);
  p.pdl = false;
  p.expert_stride = 1000;
  EXPECT_THROW(launch_qgemv(ctx.compute(), p, ctx.num_sms()), Error);
}

INSTANTIATE_TEST_SUITE_P(Formats, Qgemv,
                         ::testing::Values(DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K,
                                           DType::kQ6_K),
                         [](const auto &info) { return std::string(dtype_name(info.param)); });

TEST(Qgemv, RejectsWhatItCannotRun) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  const std::size_t smem = ctx.features().smem_per_block;
  EXPECT_FALSE(qgemv_supported(QuantFormat::kMXFP4, 1, 256, smem));
  EXPECT_FALSE(qgemv_supported(QuantFormat::kQ4_K, 0, 256, smem));
  EXPECT_FALSE(qgemv_supported(QuantFormat::kQ4_K, kQgemvMaxM + 1, 256, smem));
  EXPECT_FALSE(qgemv_supported(QuantFormat::kQ4_K, 1, 320, smem));  // not whole super-blocks
  EXPECT_TRUE(qgemv_supported(QuantFormat::kQ4_0, 1, 320, smem));
  EXPECT_FALSE(qgemv_supported(QuantFormat::kQ8_0, 8, 1 << 16, smem));  // beyond shared memory
  EXPECT_FALSE(qgemv_mma_supported(QuantFormat::kMXFP4));
  // The streamed kernel: rows of whole 16-byte runs (Q6_K's 210-byte blocks need an even
  // count), 2..kQgemvMaxStreamStages slots, the rings and the staged input in shared memory.
  EXPECT_TRUE(qgemv_stream_supported(QuantFormat::kQ4_K, 1, 4096, 4, smem));
  EXPECT_TRUE(qgemv_stream_supported(QuantFormat::kQ6_K, 1, 4096, 3, smem));
  EXPECT_FALSE(qgemv_stream_supported(QuantFormat::kQ6_K, 1, 2304, 3, smem));
  EXPECT_FALSE(qgemv_stream_supported(QuantFormat::kQ4_K, 1, 4096, 1, smem));
  EXPECT_FALSE(
      qgemv_stream_supported(QuantFormat::kQ4_K, 1, 4096, kQgemvMaxStreamStages + 1, smem));
  EXPECT_FALSE(qgemv_stream_supported(QuantFormat::kQ8_0, 1, 4096, 8, smem));  // 8 x 8 x 4,352 B
  EXPECT_FALSE(qgemv_stream_supported(QuantFormat::kMXFP4, 1, 4096, 4, smem));
  for (QuantFormat f : {QuantFormat::kQ8_0, QuantFormat::kQ4_0, QuantFormat::kQ4_K,
                        QuantFormat::kQ5_K, QuantFormat::kQ6_K})
    EXPECT_TRUE(qgemv_mma_supported(f));
  DeviceBuffer buf(1 << 16);
  QgemvParams p;
  p.format = QuantFormat::kQ4_K;
  p.w = buf.data();
  p.x = buf.as<bf16>();
  p.y = buf.data();
  p.N = 4;
  p.K = 320;
  p.M = 1;
  EXPECT_THROW(launch_qgemv(ctx.compute(), p, ctx.num_sms()), Error);
  p.K = 256;
  p.x = buf.as<bf16>() + 1;  // misaligned
  EXPECT_THROW(launch_qgemv(ctx.compute(), p, ctx.num_sms()), Error);
  p.x = buf.as<bf16>();
  p.in = GemvIn::kRmsNorm;  // no residual
  EXPECT_THROW(launch_qgemv(ctx.compute(), p, ctx.num_sms()), Error);
  // The tensor-core kernel refuses the same shapes: the checks come before the choice.
  p.mma = true;
  EXPECT_THROW(launch_qgemv(ctx.compute(), p, ctx.num_sms()), Error);
  p.in = GemvIn::kBf16;
  p.K = 320;
  EXPECT_THROW(launch_qgemv(ctx.compute(), p, ctx.num_sms()), Error);
  p.K = 256;
  p.M = kQgemvMaxM + 1;
  EXPECT_THROW(launch_qgemv(ctx.compute(), p, ctx.num_sms()), Error);
}

}  // namespace
}  // namespace keel::cuda
