// The small-M GEMV kernel (k_gemv.h) against a double-precision CPU reference, directly and
// through Gemm::run with set_gemv_max_m, on fresh random inputs with poisoned outputs.
#include <gtest/gtest.h>

#include <array>

#include "cuda_test_util.h"
#include "exec/cuda/gemm.h"
#include "exec/cuda/k_gemv.h"

namespace keel::cuda {
namespace {

using test::download;
using test::from_bf16;
using test::rel_err;
using test::to_bf16;
using test::upload;

std::vector<float> reference(const std::vector<float> &x, const std::vector<float> &w, int M, int N,
                             int K) {
  std::vector<float> ref(std::size_t(M) * N);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int k = 0; k < K; ++k)
        acc += double(x[std::size_t(m) * K + k]) * w[std::size_t(n) * K + k];
      ref[std::size_t(m) * N + n] = static_cast<float>(acc);
    }
  return ref;
}

TEST(CudaGemv, MatchesReferenceForEverySmallM) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(11);
  // K: a tail past the unrolled loop (1032 = 4 x 256 + 8), exactly one unrolled pass
  // (1024), shorter than one warp pass (40); N not a multiple of the warps per block.
  for (auto [M, N, K] : {std::array<int, 3>{1, 333, 1032},
                         {2, 77, 1024},
                         {3, 129, 40},
                         {5, 64, 4104},
                         {8, 201, 520}}) {
    SCOPED_TRACE(std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K));
    const auto x = test::random_bf16_values(std::size_t(M) * K, rng);
    const auto w = test::random_bf16_values(std::size_t(N) * K, rng);
    const auto ref = reference(x, w, M, N, K);
    auto d_x = upload(ctx, to_bf16(x));
    auto d_w = upload(ctx, to_bf16(w));
    ASSERT_TRUE(gemv_supported(M, K, d_x.data(), d_w.data()));
    DeviceBuffer y32(ref.size() * 4), y16(ref.size() * 2);
    test::poison(ctx, y32);
    test::poison(ctx, y16);
    launch_gemv(ctx.compute(), d_x.as<bf16>(), d_w.as<bf16>(), y32.data(), true, M, N, K);
    launch_gemv(ctx.compute(), d_x.as<bf16>(), d_w.as<bf16>(), y16.data(), false, M, N, K);
    EXPECT_LT(rel_err(download<float>(ctx, y32, ref.size()), ref), 1e-5);
    EXPECT_LT(rel_err(from_bf16(download<std::uint16_t>(ctx, y16, ref.size())), ref), 6e-3);
  }
}

TEST(CudaGemv, GemmRoutesSmallMAndKeepsTheRestOnCublas) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  Gemm gemm(ctx);
  gemm.set_gemv_max_m(4);
  std::mt19937 rng(12);
  // M 1 and 4 take the GEMV kernel; M 9 stays on cuBLASLt; accumulate always cuBLASLt.
  for (int M : {1, 4, 9}) {
    const int N = 96, K = 264;
    const auto x = test::random_bf16_values(std::size_t(M) * K, rng);
    const auto w = test::random_bf16_values(std::size_t(N) * K, rng);
    const auto ref = reference(x, w, M, N, K);
    auto d_x = upload(ctx, to_bf16(x));
    auto d_w = upload(ctx, to_bf16(w));
    DeviceBuffer y(ref.size() * 4);
    test::poison(ctx, y);
    gemm.run(ctx.compute(), GemmType::kBF16, GemmType::kF32, d_x.data(), d_w.data(), y.data(), M, N,
             K);
    EXPECT_LT(rel_err(download<float>(ctx, y, ref.size()), ref), 1e-5) << M;
    gemm.run(ctx.compute(), GemmType::kBF16, GemmType::kF32, d_x.data(), d_w.data(), y.data(), M, N,
             K, true);
    auto twice = ref;
    for (auto &v : twice) v *= 2;
    EXPECT_LT(rel_err(download<float>(ctx, y, ref.size()), twice), 1e-5) << M;
  }
}

TEST(CudaGemv, RejectsWhatItCannotRun) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  DeviceBuffer buf(4096);
  EXPECT_FALSE(gemv_supported(0, 64, buf.data(), buf.data()));
  EXPECT_FALSE(gemv_supported(kGemvMaxM + 1, 64, buf.data(), buf.data()));
  EXPECT_FALSE(gemv_supported(1, 60, buf.data(), buf.data()));          // K not a multiple of 8
  EXPECT_FALSE(gemv_supported(1, 64, buf.as<bf16>() + 1, buf.data()));  // misaligned x
  EXPECT_THROW(
      launch_gemv(ctx.compute(), buf.as<bf16>(), buf.as<bf16>(), buf.data(), true, 1, 4, 60),
      Error);
}

}  // namespace
}  // namespace keel::cuda
