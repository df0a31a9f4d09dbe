// The experts' grouped GEMM over low-bit weights (launch_moe_grouped_gemm_lowbit) against a
// host reference: the same stored bytes dequantized on the host (formats/quant.h, equal to
// the device's decode bit for bit), rounded to bf16 as the kernels' decoded tiles or MMA
// fragments are, times the bf16 inputs in double (MXFP4 runs the A-operand kernel,
// k_moe_grouped_mxfp4.cu). Every format (MXFP4, FP8 with one and two scale-grid
// parts, Q8_0, Q4_K, Q5_K, Q6_K), the row tiles 16 / 32 / 64, group patterns (empty
// experts, one row, exactly a tile, a tile + 1, every slot on one expert) and shapes like
// gpt-oss's and Qwen3-30B-A3B's, scaled down. Each element must lie within
// 2^-8 |ref| (the bf16 output's rounding, twice) + 2^-12 sum_k |a_k w_k| (f32 accumulation);
// every case prints its worst absolute error and its worst error / bound ratio.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "cuda_test_util.h"
#include "exec/cuda/k_moe.h"
#include "exec/cuda/k_moe_grouped_lowbit.h"
#include "formats/quant.h"

namespace keel::cuda {
namespace {

using test::download;
using test::upload;

constexpr int kE = 8;

// One format's stacked experts: the device bytes' host image and the dequantized values.
struct Experts {
  std::vector<std::uint8_t> bytes;  // kE * stride
  std::size_t stride = 0;
  std::vector<float> w;  // [kE][N][K], rounded to bf16
  int fp8_parts = 0;
  std::int64_t split = 0, block_rows = 128;  // FP8: rows of part 0, scale-grid row blocks
  std::size_t scale_off[2] = {0, 0};         // FP8: each part's grid, bytes into an expert
};

std::size_t pad16(std::size_t n) { return (n + 15) / 16 * 16; }

float bf16_round(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// GGUF / MXFP4 blocks: quantize random values (every block valid), dequantize them back.
Experts make_blocks(DType t, int N, int K, std::mt19937 &rng) {
  Experts x;
  const std::size_t row = static_cast<std::size_t>(dtype_bytes(t, K));
  x.stride = pad16(row * N);
  x.bytes.assign(kE * x.stride, 0);
  x.w.resize(std::size_t(kE) * N * K);
  std::normal_distribution<float> d(0.0f, 0.5f);
  std::vector<float> v(K), back(K);
  for (int e = 0; e < kE; ++e)
    for (int n = 0; n < N; ++n) {
      for (auto &f : v) f = d(rng);
      std::uint8_t *dst = x.bytes.data() + e * x.stride + n * row;
      quantize_row(t, v.data(), dst, K);
      dequantize_row(t, dst, back.data(), K);
      for (int k = 0; k < K; ++k) x.w[(std::size_t(e) * N + n) * K + k] = bf16_round(back[k]);
    }
  return x;
}

// FP8 e4m3 with 128 x 128 block scales; two parts (gate | up: split rows, separate grids)
// laid out per expert as the runner's: [part 0 bytes | part 1 bytes | grid 0 | grid 1].
Experts make_fp8(int N, int K, int parts, std::mt19937 &rng) {
  Experts x;
  x.fp8_parts = parts;
  x.split = parts == 2 ? N / 2 : N;
  const std::int64_t rows[2] = {x.split, N - x.split};
  const std::int64_t gc = (K + 127) / 128;
  auto grid_floats = [&](std::int64_t r) { return (r + x.block_rows - 1) / x.block_rows * gc; };
  x.scale_off[0] = std::size_t(N) * K;
  x.scale_off[1] = x.scale_off[0] + grid_floats(rows[0]) * 4;
  x.stride = pad16(x.scale_off[1] + (parts == 2 ? grid_floats(rows[1]) * 4 : 0));
  x.bytes.assign(kE * x.stride, 0);
  x.w.resize(std::size_t(kE) * N * K);
  std::uniform_int_distribution<int> code(0, 255);
  std::uniform_real_distribution<float> sc(0.001f, 0.01f);
  std::vector<float> back(K);
  for (int e = 0; e < kE; ++e) {
    std::uint8_t *base = x.bytes.data() + e * x.stride;
    for (int p = 0; p < parts; ++p) {
      auto *grid = reinterpret_cast<float *>(base + x.scale_off[p]);
      for (std::int64_t i = 0; i < grid_floats(rows[p]); ++i) grid[i] = sc(rng);
    }
    for (int n = 0; n < N; ++n) {
      std::uint8_t *q = base + std::size_t(n) * K;
      for (int k = 0; k < K; ++k) {
        int c = code(rng);
        if ((c & 0x7F) == 0x7F) c ^= 1;  // no NaN codes
        q[k] = static_cast<std::uint8_t>(c);
      }
      const int p = n >= x.split ? 1 : 0;
      const std::int64_t np = n - p * x.split;
      const auto *grid = reinterpret_cast<const float *>(base + x.scale_off[p]);
      dequantize_fp8_row(q, back.data(), K, grid + (np / x.block_rows) * gc, 128);
      for (int k = 0; k < K; ++k) x.w[(std::size_t(e) * N + n) * K + k] = bf16_round(back[k]);
    }
  }
  return x;
}

MoeLowbitWeights describe(const Experts &x, DType t, const DeviceBuffer &d, int N, int K) {
  MoeLowbitWeights w;
  if (x.fp8_parts == 0) {
    w.format = t == DType::kMXFP4  ? QuantFormat::kMXFP4
               : t == DType::kQ8_0 ? QuantFormat::kQ8_0
               : t == DType::kQ4_K ? QuantFormat::kQ4_K
               : t == DType::kQ5_K ? QuantFormat::kQ5_K
                                   : QuantFormat::kQ6_K;
    w.w = d.data();
    w.stride = x.stride;
    return w;
  }
  w.fp8_parts = x.fp8_parts;
  for (int p = 0; p < x.fp8_parts; ++p) {
    Fp8Experts &f = w.fp8[p];
    f.w = d.as<std::uint8_t>() + (p ? std::size_t(x.split) * K : 0);
    f.scales = reinterpret_cast<const float *>(d.as<std::uint8_t>() + x.scale_off[p]);
    f.stride = x.stride;
    f.block_rows = x.block_rows;
    f.N = p ? N - x.split : x.split;
    f.K = K;
    f.experts = kE;
  }
  return w;
}

struct Pattern {
  const char *name;
  std::vector<std::int32_t> ids;  // one slot per token (k = 1)
};

std::vector<Pattern> patterns(int tile, std::mt19937 &rng) {
  std::vector<Pattern> out;
  {  // spread over the experts but 2 and 5, several tiles on expert 0
    Pattern p{"spread", {}};
    std::uniform_int_distribution<int> any(0, kE - 1);
    for (int s = 0; s < 150; ++s) {
      int e = (s % 3 == 0) ? 0 : any(rng);
      if (e == 2 || e == 5) e = 7;
      p.ids.push_back(e);
    }
    out.push_back(p);
  }
  out.push_back({"one_row", {4}});
  out.push_back({"exactly_a_tile", std::vector<std::int32_t>(tile, 3)});
  {
    Pattern p{"tile_plus_one", std::vector<std::int32_t>(tile + 1, 1)};
    p.ids.push_back(6);
    out.push_back(p);
  }
  out.push_back({"all_on_last", std::vector<std::int32_t>(97, kE - 1)});
  return out;
}

void run_format(DType t, int parts, int N, int K, const char *shape) {
  CudaContext ctx;
  std::mt19937 rng(N * 31 + K + static_cast<int>(t) * 7 + parts);
  const Experts x = t == DType::kF8_E4M3 ? make_fp8(N, K, parts, rng) : make_blocks(t, N, K, rng);
  const DeviceBuffer dw = upload(ctx, x.bytes);
  const MoeLowbitWeights W = describe(x, t, dw, N, K);
  ASSERT_TRUE(moe_grouped_lowbit_supported(W, N, K)) << shape;
  for (const int tile : {16, 32, 64}) {
    for (const Pattern &p : patterns(tile, rng)) {
      const int S = static_cast<int>(p.ids.size());
      const std::int64_t rows = moe_gemm_rows_cap(S, kE, tile);
      const MoeGroupLayout L{kE, S, rows};
      const auto a = test::random_bf16_values(std::size_t(S) * K, rng);
      const DeviceBuffer d_ids = upload(ctx, p.ids), d_a = upload(ctx, test::to_bf16(a));
      DeviceBuffer d_group(L.ints() * 4), d_xg(rows * K * 2), d_c(rows * N * 2);
      test::poison(ctx, d_c);
      launch_moe_group(ctx.compute(), d_ids.as<std::int32_t>(), S, kE, 1, tile, rows,
                       d_group.as<std::int32_t>());
      launch_moe_gather(ctx.compute(), d_a.as<bf16>(), K, d_group.as<std::int32_t>(), L,
                        d_xg.as<bf16>());
      launch_moe_grouped_gemm_lowbit(ctx.compute(), d_xg.as<bf16>(), W, N, K,
                                     d_group.as<std::int32_t>(), L, d_c.as<bf16>(), tile);
      const auto group = download<std::int32_t>(ctx, d_group, L.ints());
      const auto c = test::from_bf16(download<std::uint16_t>(ctx, d_c, rows * N));
      double worst_abs = 0, worst_ratio = 0;
      int checked = 0;
      for (std::int64_t r = 0; r < rows; ++r) {
        const int tok = group[L.row_token() + r];
        if (tok < 0) continue;
        const int e = p.ids[tok];
        for (int n = 0; n < N; ++n) {
          double ref = 0, mag = 0;
          const float *wr = x.w.data() + (std::size_t(e) * N + n) * K;
          const float *ar = a.data() + std::size_t(tok) * K;
          for (int k = 0; k < K; ++k) {
            ref += double(ar[k]) * wr[k];
            mag += std::abs(double(ar[k]) * wr[k]);
          }
          const double got = c[r * N + n], err = std::abs(got - ref);
          const double bound = std::ldexp(std::abs(ref), -8) + std::ldexp(mag, -12) + 1e-30;
          worst_abs = std::max(worst_abs, std::isfinite(got) ? err : INFINITY);
          worst_ratio = std::max(worst_ratio, std::isfinite(got) ? err / bound : INFINITY);
          ++checked;
        }
      }
      std::printf(
          "lowbit %s %s N %d K %d tile %d %s: %d outputs, max abs err %.3g, max err/bound "
          "%.3g\n",
          shape, std::string(dtype_name(t)).c_str(), N, K, tile, p.name, checked, worst_abs,
          worst_ratio);
      EXPECT_EQ(checked, S * N) << p.name;
      EXPECT_LE(worst_ratio, 1.0) << shape << " tile " << tile << " " << p.name;
    }
  }
}

struct Case {
  DType t;
  int fp8_parts;
};

class MoeGroupedLowbit : public ::testing::TestWithParam<Case> {};

// gpt-oss-like (H = I, gate|up = 2 I; N not a multiple of the 128-row tile; K = 5 steps,
// and 5.5 steps: the last a half step of 32) for the 32-value formats; Qwen3-30B-A3B-like
// (H = 2048 / I = 768 scaled to 512 / 256: gate|up 512 x 512, down 512 x 256) for all.
TEST_P(MoeGroupedLowbit, MatchesHostDequantizedReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const Case c = GetParam();
  const bool kquant = c.t == DType::kQ4_K || c.t == DType::kQ5_K || c.t == DType::kQ6_K;
  if (!kquant) {
    run_format(c.t, c.fp8_parts, 2 * 160, 320, "gpt-oss gate_up");
    run_format(c.t, c.fp8_parts, 200, 352, "gpt-oss down, half last step");
  }
  run_format(c.t, c.fp8_parts, 2 * 256, 512, "qwen3 gate_up");
  run_format(c.t, c.fp8_parts, 520, 256, "qwen3 down, N % 128 = 8");
}

INSTANTIATE_TEST_SUITE_P(Formats, MoeGroupedLowbit,
                         ::testing::Values(Case{DType::kMXFP4, 0}, Case{DType::kF8_E4M3, 1},
                                           Case{DType::kF8_E4M3, 2}, Case{DType::kQ8_0, 0},
                                           Case{DType::kQ4_K, 0}, Case{DType::kQ5_K, 0},
                                           Case{DType::kQ6_K, 0}),
                         [](const auto &info) {
                           return std::string(dtype_name(info.param.t)) +
                                  (info.param.fp8_parts == 2 ? "_two_parts" : "");
                         });

TEST(MoeGroupedLowbitShapes, RefusesWhatItCannotRun) {
  MoeLowbitWeights w;
  int dummy = 0;
  w.w = &dummy;
  w.format = QuantFormat::kMXFP4;
  EXPECT_TRUE(moe_grouped_lowbit_supported(w, 5760, 2880));   // gpt-oss-20b gate|up
  EXPECT_FALSE(moe_grouped_lowbit_supported(w, 5760, 2896));  // K % 32
  EXPECT_FALSE(moe_grouped_lowbit_supported(w, 5764, 2880));  // N % 8
  w.format = QuantFormat::kQ4_0;  // no tile format: the dequantize path runs it
  EXPECT_FALSE(moe_grouped_lowbit_supported(w, 1536, 2048));
  w.format = QuantFormat::kQ6_K;
  EXPECT_FALSE(moe_grouped_lowbit_supported(w, 1536, 2880));  // K % 256
  EXPECT_TRUE(moe_grouped_lowbit_supported(w, 2048, 768));
}

}  // namespace
}  // namespace keel::cuda
