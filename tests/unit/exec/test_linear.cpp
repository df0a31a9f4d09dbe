#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "exec/cpu/linear.h"
#include "exec/cpu/vec_math.h"

namespace keel::cpu {

namespace {

// Random weight bytes of `dt` for [N, K], with sane block scales.
std::vector<std::byte> random_weight(DType dt, std::int64_t N, std::int64_t K, std::mt19937 &rng) {
  std::vector<std::byte> buf(static_cast<std::size_t>(dtype_bytes(dt, N * K)));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto &b : buf) b = static_cast<std::byte>(byte(rng));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  auto put16 = [&](std::size_t off, std::uint16_t v) { std::memcpy(buf.data() + off, &v, 2); };
  const std::int64_t n = N * K;
  switch (dt) {
    case DType::kF32:
      for (std::int64_t i = 0; i < n; ++i) {
        float f = nd(rng);
        std::memcpy(buf.data() + 4 * i, &f, 4);
      }
      break;
    case DType::kF16:
      for (std::int64_t i = 0; i < n; ++i) put16(2 * i, f32_to_f16(nd(rng)));
      break;
    case DType::kBF16:
      for (std::int64_t i = 0; i < n; ++i) put16(2 * i, f32_to_bf16(nd(rng)));
      break;
    case DType::kQ8_0:
      for (std::int64_t b = 0; b < n / 32; ++b) put16(34 * b, f32_to_f16(scale(rng)));
      break;
    case DType::kQ4_0:
      for (std::int64_t b = 0; b < n / 32; ++b) put16(18 * b, f32_to_f16(scale(rng)));
      break;
    case DType::kQ4_K:
      for (std::int64_t b = 0; b < n / 256; ++b) {
        put16(144 * b, f32_to_f16(scale(rng)));
        put16(144 * b + 2, f32_to_f16(scale(rng)));
      }
      break;
    case DType::kQ5_K:
      for (std::int64_t b = 0; b < n / 256; ++b) {
        put16(176 * b, f32_to_f16(scale(rng)));
        put16(176 * b + 2, f32_to_f16(scale(rng)));
      }
      break;
    case DType::kQ6_K:
      for (std::int64_t b = 0; b < n / 256; ++b) put16(210 * b + 208, f32_to_f16(scale(rng)));
      break;
    case DType::kMXFP4:  // e8m0 scales 2^-10 .. 2^-4
      for (std::int64_t b = 0; b < n / 32; ++b)
        buf[17 * b] = static_cast<std::byte>(117 + static_cast<int>(rng() % 7));
      break;
    default:
      break;
  }
  return buf;
}

// Every instruction-set family this CPU runs (a portable build included).
std::vector<LinearIsa> runnable_isas() {
  std::vector<LinearIsa> isas{LinearIsa::kPortable};
  if (best_linear_isa() >= LinearIsa::kAvx2) isas.push_back(LinearIsa::kAvx2);
  if (best_linear_isa() >= LinearIsa::kAvx512) isas.push_back(LinearIsa::kAvx512);
  return isas;
}

// y = linear(w, x) against linear_reference, within float32 accumulation error relative
// to the sum of |products| of the dequantized row.
void expect_near_reference(const TensorView &w, const float *x, std::int64_t T, const float *y) {
  const std::int64_t N = w.shape[0], K = w.shape[1];
  std::vector<float> ref(T * N), wrow(K);
  linear_reference(w, x, T, ref.data());
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t n = 0; n < N; ++n) {
      dequantize_row(w.dtype, w.data + n * dtype_bytes(w.dtype, K), wrow.data(), K);
      double mag = 0;
      for (std::int64_t k = 0; k < K; ++k) mag += std::fabs(wrow[k] * x[t * K + k]);
      EXPECT_NEAR(y[t * N + n], ref[t * N + n], 1e-5 * mag + 1e-6) << "t=" << t << " n=" << n;
    }
}

class LinearTest : public ::testing::TestWithParam<DType> {};

// Every instruction-set family this CPU runs (a portable build included) against the
// scalar reference, at input sizes that exercise the kernels' tails (K % 16, odd block
// counts), and batch invariance within each family.
TEST_P(LinearTest, MatchesReferenceAndIsBatchInvariant) {
  const DType dt = GetParam();
  const std::int64_t block = dtype_info(dt).block_elems;
  std::vector<std::int64_t> sizes{512};
  if (block == 1) sizes.push_back(520);   // 16-lane kernels leave 8 for the tail
  if (block == 32) sizes.push_back(544);  // 17 blocks: the two-block kernels' odd last block
  for (const LinearIsa isa : runnable_isas())
    for (const std::int64_t K : sizes) {
      SCOPED_TRACE(std::string(linear_isa_name(isa)) + " K=" + std::to_string(K));
      std::mt19937 rng(42);
      const std::int64_t N = 37;
      auto wbytes = random_weight(dt, N, K, rng);
      TensorView w{"w", dt, {N, K}, wbytes.data(), wbytes.size()};
      std::normal_distribution<float> nd(0.0f, 1.0f);
      ThreadPool pool(3);
      LinearScratch scratch;
      scratch.isa = isa;
      for (std::int64_t T : {1, 2, 5, 9}) {
        std::vector<float> x(T * K), y(T * N);
        for (auto &v : x) v = nd(rng);
        linear(w, x.data(), T, y.data(), pool, scratch);
        expect_near_reference(w, x.data(), T, y.data());
        // Each token alone gives bit-identical results.
        for (std::int64_t t = 0; t < T; ++t) {
          std::vector<float> one(N);
          linear(w, x.data() + t * K, 1, one.data(), pool, scratch);
          EXPECT_EQ(0, std::memcmp(one.data(), y.data() + t * N, N * sizeof(float)))
              << "token " << t;
        }
      }
    }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, LinearTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                                           DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                                           DType::kMXFP4),
                         [](const auto &info) { return std::string(dtype_name(info.param)); });

// K-quant rows at their largest codes (every bit set) against activations at +-127 (a
// constant magnitude quantizes to exactly +-127): the integer dot products' widest sums
// (63 * 127 pairs in the int16 steps of AVX2) must not saturate in any family.
TEST(Linear, KQuantsAtExtremeCodesMatchReference) {
  for (const DType dt : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    std::mt19937 rng(7);
    const std::int64_t N = 6, K = 512;
    auto wbytes = random_weight(dt, N, K, rng);
    const std::int64_t block_bytes = dtype_bytes(dt, 256);
    for (std::int64_t b = 0; b < N * K / 256; ++b) {  // all codes and 6-bit scales at their top
      std::byte *blk = wbytes.data() + b * block_bytes;
      if (dt == DType::kQ6_K)
        std::memset(blk, 0xFF, 192);  // ql, qh; scales stay random int8, d random
      else
        std::memset(blk + 4, 0xFF, static_cast<std::size_t>(block_bytes - 4));
    }
    TensorView w{"w", dt, {N, K}, wbytes.data(), wbytes.size()};
    for (const LinearIsa isa : runnable_isas()) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + linear_isa_name(isa));
      ThreadPool pool(2);
      LinearScratch scratch;
      scratch.isa = isa;
      const std::int64_t T = 3;
      std::vector<float> x(T * K), y(T * N);
      for (std::int64_t i = 0; i < T * K; ++i)  // token 0 all +1, token 1 all -1, token 2 mixed
        x[i] = i < K ? 1.0f : i < 2 * K ? -1.0f : (rng() & 1 ? 1.0f : -1.0f);
      linear(w, x.data(), T, y.data(), pool, scratch);
      expect_near_reference(w, x.data(), T, y.data());
    }
  }
}

// The fused greedy head picks what first_argmax picks from linear()'s rows, in every family:
// rows 5 and 40 repeat row 20 (ties: the lowest id wins however tiles fall on threads), and
// f32: one token's activations are NaN (every value NaN: id 0; quantized activations of NaN
// are not defined).
TEST(Linear, ArgmaxEqualsFirstArgmaxOfTheRows) {
  for (const DType dt : {DType::kF32, DType::kQ4_K, DType::kQ8_0}) {
    std::mt19937 rng(11);
    const std::int64_t N = 1000, K = 256;
    auto wbytes = random_weight(dt, N, K, rng);
    const std::int64_t rb = dtype_bytes(dt, K);
    for (const std::int64_t copy : {5, 40})
      std::memcpy(wbytes.data() + copy * rb, wbytes.data() + 20 * rb, static_cast<std::size_t>(rb));
    TensorView w{"w", dt, {N, K}, wbytes.data(), wbytes.size()};
    for (const LinearIsa isa : runnable_isas()) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + linear_isa_name(isa));
      ThreadPool pool(3);
      LinearScratch scratch;
      scratch.isa = isa;
      for (const std::int64_t T : {1, 7}) {
        std::vector<float> x(T * K), y(T * N);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (auto &v : x) v = nd(rng);
        // Token 0 is row 20's own values (f32: its largest dot), so the tie is at the top.
        if (dt == DType::kF32) std::memcpy(x.data(), wbytes.data() + 20 * rb, K * sizeof(float));
        const bool nan_token = T > 1 && dt == DType::kF32;
        if (nan_token) std::fill(x.begin() + K, x.begin() + 2 * K, std::nanf(""));
        linear(w, x.data(), T, y.data(), pool, scratch);
        std::vector<std::int32_t> ids(T, -1);
        linear_argmax(w, x.data(), T, ids.data(), pool, scratch);
        for (std::int64_t t = 0; t < T; ++t)
          EXPECT_EQ(ids[t], first_argmax(std::span<const float>(y.data() + t * N, N))) << "t=" << t;
        if (dt == DType::kF32) EXPECT_EQ(ids[0], 5);
        if (nan_token) EXPECT_EQ(ids[1], 0);
      }
    }
  }
}

TEST(Linear, RejectsMismatchedData) {
  std::vector<std::byte> buf(100);
  TensorView w{"w", DType::kF32, {10, 8}, buf.data(), buf.size()};
  std::vector<float> x(8), y(10);
  ThreadPool pool(1);
  LinearScratch s;
  EXPECT_THROW(linear(w, x.data(), 1, y.data(), pool, s), Error);
}

// The values are std::lround(x / d): ties (x / d = k + 0.5) away from zero.
TEST(Quant, Q8ActivationRoundsHalfAwayFromZero) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = (i % 2 ? -1.0f : 1.0f) * (0.5f * (i % 32) + 0.25f * (i % 3));
  x[0] = 127.0f;  // d = 1 in the first block: every other value is an exact tie
  x[32] = -127.0f;
  std::vector<BlockQ8Act> q(2);
  quantize_row_q8_act(x.data(), q.data(), 64);
  for (int i = 0; i < 64; ++i) {
    const BlockQ8Act &b = q[i / 32];
    EXPECT_EQ(b.qs[i % 32], std::lround(x[i] * (1.0f / b.d))) << i;
  }
  EXPECT_EQ(q[0].qs[3], -2);  // -1.5 -> -2
  EXPECT_EQ(q[0].qs[4], 2);   // 2 + 0.25 = 2.25 -> 2
  EXPECT_EQ(q[1].qs[1], -1);  // -0.5 -> -1
}

TEST(Quant, Q8ActivationRoundTrip) {
  std::vector<float> x(64);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (auto &v : x) v = nd(rng);
  std::vector<BlockQ8Act> q(2);
  quantize_row_q8_act(x.data(), q.data(), 64);
  for (int i = 0; i < 64; ++i)
    EXPECT_NEAR(q[i / 32].d * q[i / 32].qs[i % 32], x[i], q[i / 32].d * 0.5001f);
}

}  // namespace
}  // namespace keel::cpu
