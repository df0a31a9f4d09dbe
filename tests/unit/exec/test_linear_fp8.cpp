// The CPU linear layer on FP8 e4m3 weights: the SIMD row conversion equals the reference for
// every code (NaN included) and any block width, and linear() equals the float32 linear of
// the dequantized weights bit for bit (the same rows through the same tiles), on every ISA
// family this CPU has, for block, channel and tensor scales with partial last blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "exec/cpu/fp8_row.h"
#include "exec/cpu/linear.h"
#include "formats/quant.h"

namespace keel::cpu {
namespace {

TEST(Fp8Row, SimdEqualsReferenceForEveryCode) {
  std::vector<std::uint8_t> codes(256 * 3 + 5);
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint8_t>(i * 5 + 1);
  const std::int64_t n = static_cast<std::int64_t>(codes.size());
  for (std::int64_t bc : {std::int64_t{128}, std::int64_t{13}, n}) {
    std::vector<float> scales((n + bc - 1) / bc);
    for (std::size_t i = 0; i < scales.size(); ++i) scales[i] = 0.01f * (i + 1) + 1e-3f;
    std::vector<float> ref(n), got(n);
    dequantize_fp8_row(codes.data(), ref.data(), n, scales.data(), bc);
    fp8_row_to_f32(codes.data(), got.data(), n, scales.data(), bc,
                   best_linear_isa() != LinearIsa::kPortable);
    for (std::int64_t i = 0; i < n; ++i) {
      if (std::isnan(ref[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << i;
        continue;
      }
      EXPECT_EQ(std::memcmp(&ref[i], &got[i], 4), 0) << "code " << int(codes[i]) << " bc " << bc;
    }
  }
}

TEST(LinearFp8, EqualsF32LinearOfTheDequantizedWeights) {
  std::mt19937 rng(17);
  const std::int64_t N = 70, K = 200;  // partial blocks: 70 = 0.55 x 128, 200 = 1.56 x 128
  std::vector<std::uint8_t> q(N * K);
  std::uniform_int_distribution<int> code(0, 255);
  for (auto &c : q) {
    c = static_cast<std::uint8_t>(code(rng));
    if ((c & 0x7F) == 0x7F) c ^= 1;
  }
  std::normal_distribution<float> nd(0, 1);
  const std::int64_t T = 5;
  std::vector<float> x(T * K);
  for (auto &v : x) v = nd(rng);
  for (const char *layout : {"block", "channel", "tensor"}) {
    TensorScale s;
    if (std::string(layout) == "block")
      s = {nullptr, 1, 2, 128, 128};
    else if (std::string(layout) == "channel")
      s = {nullptr, N, 1, 1, K};
    else
      s = {nullptr, 1, 1, N, K};
    std::vector<float> grid(s.grid_rows * s.grid_cols);
    for (auto &g : grid) g = 1e-3f * (1 + std::fabs(nd(rng)));
    s.data = grid.data();
    TensorView w;
    w.name = "w";
    w.dtype = DType::kF8_E4M3;
    w.shape = {N, K};
    w.data = reinterpret_cast<const std::byte *>(q.data());
    w.nbytes = q.size();
    w.scale = s;
    std::vector<float> deq = dequantize(w);
    TensorView f = w;
    f.dtype = DType::kF32;
    f.data = reinterpret_cast<const std::byte *>(deq.data());
    f.nbytes = deq.size() * 4;
    f.scale = {};
    std::vector<float> ref(T * N);
    linear_reference(w, x.data(), T, ref.data());
    ThreadPool pool(2);
    std::vector<LinearIsa> isas{LinearIsa::kPortable};
    if (best_linear_isa() >= LinearIsa::kAvx2) isas.push_back(LinearIsa::kAvx2);
    if (best_linear_isa() >= LinearIsa::kAvx512) isas.push_back(LinearIsa::kAvx512);
    for (const LinearIsa isa : isas) {
      SCOPED_TRACE(std::string(layout) + " " + linear_isa_name(isa));
      LinearScratch scratch;
      scratch.isa = isa;
      std::vector<float> y(T * N), yf(T * N);
      linear(w, x.data(), T, y.data(), pool, scratch);
      linear(f, x.data(), T, yf.data(), pool, scratch);
      EXPECT_EQ(std::memcmp(y.data(), yf.data(), y.size() * 4), 0);
      for (std::int64_t i = 0; i < T * N; ++i)
        EXPECT_NEAR(y[i], ref[i], 1e-4 * (1 + std::fabs(ref[i]))) << i;
    }
  }
  TensorView bad;
  bad.name = "model.layers.0.mlp.up_proj.weight";
  bad.dtype = DType::kF8_E4M3;
  bad.shape = {N, K};
  bad.data = reinterpret_cast<const std::byte *>(q.data());
  bad.nbytes = q.size();
  ThreadPool pool(1);
  LinearScratch scratch;
  std::vector<float> y(T * N);
  try {
    linear(bad, x.data(), T, y.data(), pool, scratch);
    FAIL() << "an fp8 weight without scales must be refused";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("up_proj.weight: fp8 weight without valid scales"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace keel::cpu
