// The routed experts' weight format (issue #29; docs/ARCHITECTURE.md, "The weight-format
// type"): every sparse layer of a mixture-of-experts model keeps its experts stacked the
// same way on the device, so one value says how -- bf16, GGUF blocks (one block type for
// every gate and up, one for every down), FP8 e4m3 with scale grids (one row block per
// matrix kind) or MXFP4 -- and where each expert's gate, up and down lie in a layer's two
// buffers. The MoE code takes a layer's matrices from it and runs them through the three
// functions below, each the one place that picks a per-format kernel for the experts
// (k_mxfp4.h, k_quant.h, k_fp8.h, k_moe_grouped_lowbit.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "exec/cuda/device_weight.h"
#include "exec/cuda/k_moe_grouped_lowbit.h"
#include "formats/model_config.h"

namespace keel::cuda {

// One stacked matrix of a layer's experts, [experts][rows][cols]: expert e is `parts`
// moved by e * expert_stride bytes (one stride for both parts). gate|up holds each
// expert's gate rows, then its up rows: one part of 2 Ie rows, or for FP8 two (gate, up),
// whose scale grids are separate (Ie need not be a multiple of the grid's row block).
struct StackedExperts {
  DeviceWeight parts[2];
  int num_parts = 1;
  int experts = 0;
  std::int64_t rows() const;  // of one expert, the parts' rows added
};

struct ExpertFormat {
  WeightFormat format = WeightFormat::kBf16;
  std::int64_t experts = 0, hidden = 0, inter = 0;  // E, H, Ie (MoeConfig::expert_intermediate)
  // kGguf: the block type of every gate and up, and of every down.
  QuantFormat gate_up_blocks = QuantFormat::kQ8_0, down_blocks = QuantFormat::kQ8_0;
  // kFp8: rows per scale-grid row of every gate and up, and of every down.
  std::int64_t gate_up_block_rows = 0, down_block_rows = 0;

  bool low_bit() const { return format != WeightFormat::kBf16; }
  // Bytes from one expert to the next in a layer's gate|up and down buffers, which hold
  // `experts` of them: the stored bytes (FP8: the e4m3 bytes, then the scale grids), each
  // expert of GGUF blocks or FP8 padded to 16 bytes (the kernels' vector loads).
  std::size_t gate_up_stride() const;
  std::size_t down_stride() const;
  // Expert 0's gate or up ([Ie, H], in the gate|up buffer at `buffer`: up's rows after
  // gate's, FP8's grids after both matrices, up's after gate's) or down ([H, Ie], in the
  // down buffer), expert_stride set.
  DeviceWeight matrix(ExpertMatrix which, const void *buffer) const;
  // A layer's gate|up and down over its buffers.
  StackedExperts gate_up(const void *buffer) const;
  StackedExperts down(const void *buffer) const;
  // What the gates and ups (kGate, kUp) or the downs are: "bf16", "q4_k", "fp8", "mxfp4".
  std::string name(ExpertMatrix which) const;
};

// `config`'s routed experts in bf16 (all zero for a dense model).
ExpertFormat bf16_experts(const ModelConfig &config);

// Slot i < slots: y[i, :] (rows ldy apart; f32 when y_f32, else bf16) = x[i / slots_per_x,
// :] (rows ldx apart) . W[ids[i]]^T over all of W's rows, ids on the device (a fixed launch
// shape, so graphs capture it). Low-bit W only: bf16 experts run k_moe.h's gather-GEMVs.
// gguf_qgemv (CudaKernelChoices::moe_gguf_qgemv: the runner's QgemvChoice, or null): GGUF
// blocks on the integer-dot GEMV's expert slots (k_qgemv.h), streamed as that choice says,
// where it takes the shape; else (and when null) on k_quant.h's float slot GEMV.
void launch_expert_slot_gemv(StreamRef s, const StackedExperts &W, const bf16 *x, std::int64_t ldx,
                             int slots_per_x, const std::int32_t *ids, int slots, void *y,
                             bool y_f32, std::int64_t ldy, const QgemvChoice *gguf_qgemv = nullptr);

// For g < *n_active (on the device), e = active[g]: W[e] in bf16 to dst + e * rows * cols
// (the stacked bf16 tensor's layout), equal to the CPU's dequantization rounded once.
// max_active bounds *n_active. Low-bit W only.
void launch_expert_dequantize(StreamRef s, const StackedExperts &W, const std::int32_t *active,
                              const std::int32_t *n_active, int max_active, bf16 *dst);

// W as launch_moe_grouped_gemm_lowbit reads it. Low-bit W only.
MoeLowbitWeights grouped_lowbit_weights(const StackedExperts &W);

}  // namespace keel::cuda
