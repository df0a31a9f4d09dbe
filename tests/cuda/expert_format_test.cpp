// The routed experts' device layout (expert_format.h; host arithmetic, no device needed):
// strides, where each expert's gate, up and down (and FP8's scale grids) lie, and what the
// grouped GEMM is handed. The expected figures are the runner's formulas from before the
// format became one type (per-format strides and offsets in cuda_runner_weights.cpp and
// cuda_runner_moe.cpp), written out, so the memory layout cannot drift.
#include "exec/cuda/expert_format.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

namespace keel::cuda {
namespace {

ExpertFormat shape(WeightFormat f, std::int64_t H, std::int64_t Ie) {
  return ExpertFormat{.format = f, .experts = 4, .hidden = H, .inter = Ie};
}

std::ptrdiff_t at(const void *p, const std::vector<std::byte> &base) {
  return static_cast<const std::byte *>(p) - base.data();
}

TEST(CudaExpertFormat, Bf16ExpertsAreTheStackedTensor) {
  ModelConfig c;
  c.hidden_size = 512;
  c.moe = MoeConfig{};
  c.moe->num_experts = 4;
  c.moe->expert_intermediate = 320;
  const ExpertFormat x = bf16_experts(c);
  EXPECT_FALSE(x.low_bit());
  EXPECT_EQ(x.experts, 4);
  EXPECT_EQ(x.gate_up_stride(), 2u * 320 * 512 * 2);
  EXPECT_EQ(x.down_stride(), 512u * 320 * 2);
  std::vector<std::byte> buf(x.gate_up_stride());
  EXPECT_EQ(at(x.matrix(ExpertMatrix::kUp, buf.data()).data, buf), 320 * 512 * 2);
  const StackedExperts gu = x.gate_up(buf.data());
  EXPECT_EQ(gu.num_parts, 1);
  EXPECT_EQ(gu.rows(), 640);
  EXPECT_EQ(x.name(ExpertMatrix::kGate), "bf16");
  EXPECT_EQ(bf16_experts(ModelConfig{}).experts, 0) << "a dense model has none";
}

TEST(CudaExpertFormat, Mxfp4ExpertsAsStored) {
  const ExpertFormat x = shape(WeightFormat::kMxfp4, 512, 320);
  EXPECT_EQ(x.gate_up_stride(), 2u * 320 * 512 / 32 * 17);  // dtype_bytes(kMXFP4, 2 Ie H)
  EXPECT_EQ(x.down_stride(), 512u * 320 / 32 * 17);
  std::vector<std::byte> buf(x.gate_up_stride());
  // Up at half the expert's gate|up bytes.
  EXPECT_EQ(at(x.matrix(ExpertMatrix::kUp, buf.data()).data, buf), 174080 / 2);
  const MoeLowbitWeights w = grouped_lowbit_weights(x.down(buf.data()));
  EXPECT_EQ(w.format, QuantFormat::kMXFP4);
  EXPECT_EQ(w.fp8_parts, 0);
  EXPECT_EQ(w.stride, x.down_stride());
  EXPECT_EQ(x.name(ExpertMatrix::kGate), "mxfp4");
  EXPECT_EQ(x.name(ExpertMatrix::kDown), "mxfp4");
}

TEST(CudaExpertFormat, GgufExpertsOneBlockTypeForGateUpOneForDown) {
  ExpertFormat x = shape(WeightFormat::kGguf, 512, 768);
  x.gate_up_blocks = QuantFormat::kQ4_K;
  x.down_blocks = QuantFormat::kQ6_K;
  EXPECT_EQ(x.gate_up_stride(), 2u * 768 * (512 / 256) * 144);
  EXPECT_EQ(x.down_stride(), 512u * (768 / 256) * 210);
  std::vector<std::byte> buf(x.gate_up_stride());
  EXPECT_EQ(at(x.matrix(ExpertMatrix::kUp, buf.data()).data, buf), 768 * 2 * 144);
  const StackedExperts gu = x.gate_up(buf.data()), dn = x.down(buf.data());
  EXPECT_EQ(gu.num_parts, 1);
  EXPECT_EQ(gu.parts[0].rows, 2 * 768);
  EXPECT_EQ(gu.parts[0].expert_stride, x.gate_up_stride());
  EXPECT_EQ(grouped_lowbit_weights(gu).format, QuantFormat::kQ4_K);
  EXPECT_EQ(grouped_lowbit_weights(dn).format, QuantFormat::kQ6_K);
  EXPECT_EQ(x.name(ExpertMatrix::kGate), "q4_k");
  EXPECT_EQ(x.name(ExpertMatrix::kDown), "q6_k");
}

// Ie = 96 rows under 128-row scale blocks: gate and up keep separate grids, and the
// expert's bytes are padded to 16.
TEST(CudaExpertFormat, Fp8ExpertsKeepGateAndUpGridsApart) {
  ExpertFormat x = shape(WeightFormat::kFp8, 256, 96);
  x.gate_up_block_rows = 128;
  x.down_block_rows = 128;
  const std::size_t grid_gu = 1 * 2 * 4, grid_down = 2 * 1 * 4;  // ceil(rows/128) x ceil(K/128)
  EXPECT_EQ(x.gate_up_stride(), (2u * 96 * 256 + 2 * grid_gu + 15) / 16 * 16);
  EXPECT_EQ(x.down_stride(), (256u * 96 + grid_down + 15) / 16 * 16);
  EXPECT_EQ(x.down_stride(), 24592u) << "padded from 24,584";
  std::vector<std::byte> buf(x.gate_up_stride());
  const DeviceWeight gate = x.matrix(ExpertMatrix::kGate, buf.data()),
                     up = x.matrix(ExpertMatrix::kUp, buf.data()),
                     down = x.matrix(ExpertMatrix::kDown, buf.data());
  EXPECT_EQ(at(gate.data, buf), 0);
  EXPECT_EQ(at(up.data, buf), 96 * 256);
  EXPECT_EQ(at(gate.scales, buf), 2 * 96 * 256);
  EXPECT_EQ(at(up.scales, buf), 2 * 96 * 256 + static_cast<std::ptrdiff_t>(grid_gu));
  EXPECT_EQ(at(down.data, buf), 0);
  EXPECT_EQ(at(down.scales, buf), 256 * 96);
  const StackedExperts gu = x.gate_up(buf.data());
  ASSERT_EQ(gu.num_parts, 2);
  EXPECT_EQ(gu.rows(), 2 * 96);
  const MoeLowbitWeights w = grouped_lowbit_weights(gu);
  ASSERT_EQ(w.fp8_parts, 2);
  EXPECT_EQ(w.fp8[1].w, up.data);
  EXPECT_EQ(w.fp8[1].scales, up.scales);
  EXPECT_EQ(w.fp8[1].stride, x.gate_up_stride());
  EXPECT_EQ(w.fp8[1].block_rows, 128);
  EXPECT_EQ(w.fp8[1].N, 96);
  EXPECT_EQ(w.fp8[1].K, 256);
  EXPECT_EQ(w.fp8[1].experts, 4);
  EXPECT_EQ(x.name(ExpertMatrix::kUp), "fp8");
}

}  // namespace
}  // namespace keel::cuda
