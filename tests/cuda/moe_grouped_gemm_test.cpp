// The experts' grouped GEMM (launch_moe_grouped_gemm) against float64: rows grouped by
// expert with launch_moe_group (groups padded to each row tile: 16, 32, 64), skewed so some experts
// span several row tiles and some are empty, and N not a multiple of the 128-column tile.
#include <gtest/gtest.h>

#include <random>

#include "cuda_test_util.h"
#include "exec/cuda/k_moe.h"

namespace keel::cuda {
namespace {

using test::download;
using test::upload;

TEST(MoeGroupedGemm, MatchesFloat64PerExpert) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  for (const int tile : {16, 32, 64})
    for (const auto [S, E, N, K] : {std::array{300, 8, 200, 96}, std::array{40, 16, 128, 64},
                                    std::array{1000, 5, 256, 256}}) {
      std::mt19937 rng(S + N + tile);
      // Half the slots on expert 0 (several tiles), none on the last expert.
      std::uniform_int_distribution<int> any(0, E - 2);
      std::vector<std::int32_t> ids(S);
      for (auto &e : ids) e = (rng() & 1) ? 0 : any(rng);
      const std::int64_t rows = moe_gemm_rows_cap(S, E, tile);
      const MoeGroupLayout L{E, S, rows};
      const auto a = test::random_bf16_values(rows * K, rng);
      const auto w = test::random_bf16_values(std::size_t(E) * N * K, rng);
      const DeviceBuffer d_ids = upload(ctx, ids), d_a = upload(ctx, test::to_bf16(a)),
                         d_w = upload(ctx, test::to_bf16(w));
      DeviceBuffer d_group(L.ints() * 4), d_c(rows * N * 2);
      test::poison(ctx, d_c);
      launch_moe_group(ctx.compute(), d_ids.as<std::int32_t>(), S, E, 1, tile, rows,
                       d_group.as<std::int32_t>());
      launch_moe_grouped_gemm(ctx.compute(), d_a.as<bf16>(), d_w.as<bf16>(), N, K,
                              d_group.as<std::int32_t>(), L, d_c.as<bf16>(), tile);
      const auto group = download<std::int32_t>(ctx, d_group, L.ints());
      const auto c = test::from_bf16(download<std::uint16_t>(ctx, d_c, rows * N));
      std::vector<float> got, want;
      for (int e = 0; e < E; ++e)
        for (int r = group[L.starts() + e]; r < group[L.starts() + e] + group[L.counts() + e]; ++r)
          for (int n = 0; n < N; ++n) {
            double s = 0;
            for (int kk = 0; kk < K; ++kk)
              s += double(a[std::size_t(r) * K + kk]) * w[(std::size_t(e) * N + n) * K + kk];
            got.push_back(c[std::size_t(r) * N + n]);
            want.push_back(static_cast<float>(s));
          }
      ASSERT_EQ(got.size(), std::size_t(S) * N);
      EXPECT_LT(test::rel_err(got, want), 5e-3)
          << "tile " << tile << " S " << S << " N " << N << " K " << K;
    }
}

TEST(MoeGroupedGemm, RefusesShapesItCannotRun) {
  EXPECT_TRUE(moe_grouped_gemm_supported(2880, 2880));   // gpt-oss: N not a multiple of 128
  EXPECT_FALSE(moe_grouped_gemm_supported(2048, 100));   // K % 32
  EXPECT_FALSE(moe_grouped_gemm_supported(2044, 2048));  // N % 8
}

}  // namespace
}  // namespace keel::cuda
