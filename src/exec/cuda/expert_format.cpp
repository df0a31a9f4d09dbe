#include "exec/cuda/expert_format.h"

#include "core/error.h"
#include "exec/cuda/k_mxfp4.h"

namespace keel::cuda {

namespace {
Fp8Experts fp8_of(const DeviceWeight &w, int experts) {
  return Fp8Experts{w.data, w.scales, w.expert_stride, w.scale_block_rows, w.rows, w.cols, experts};
}

Error not_low_bit(const char *what) {
  return Error(ErrorCode::kInvalidArgument,
               std::string(what) + ": bf16 experts take k_moe.h's kernels as stored");
}

// One matrix of an expert as stored: its format and shape (no data).
DeviceWeight shape_of(const ExpertFormat &f, ExpertMatrix which) {
  const bool down = which == ExpertMatrix::kDown;
  DeviceWeight w;
  w.format = f.format;
  w.blocks = down ? f.down_blocks : f.gate_up_blocks;
  w.rows = down ? f.hidden : f.inter;
  w.cols = down ? f.inter : f.hidden;
  if (f.format == WeightFormat::kFp8)
    w.scale_block_rows = down ? f.down_block_rows : f.gate_up_block_rows;
  return w;
}

// An expert of `bytes` as a layer's buffer spaces them: GGUF blocks and FP8 padded to 16
// bytes, so every expert stays 16-byte aligned for the kernels' vector loads; bf16 and
// MXFP4 (byte-aligned blocks, read by aligned words) as stored.
std::size_t stride_of(const ExpertFormat &f, std::size_t bytes) {
  const bool pad = f.format == WeightFormat::kGguf || f.format == WeightFormat::kFp8;
  return pad ? (bytes + 15) / 16 * 16 : bytes;
}
}  // namespace

ExpertFormat bf16_experts(const ModelConfig &config) {
  ExpertFormat f;
  if (config.moe) {
    f.experts = config.moe->num_experts;
    f.hidden = config.hidden_size;
    f.inter = config.moe->expert_intermediate;
  }
  return f;
}

std::int64_t StackedExperts::rows() const {
  std::int64_t r = 0;
  for (int p = 0; p < num_parts; ++p) r += parts[p].rows;
  return r;
}

std::size_t ExpertFormat::gate_up_stride() const {
  return stride_of(*this, 2 * shape_of(*this, ExpertMatrix::kGate).bytes());
}

std::size_t ExpertFormat::down_stride() const {
  return stride_of(*this, shape_of(*this, ExpertMatrix::kDown).bytes());
}

DeviceWeight ExpertFormat::matrix(ExpertMatrix which, const void *buffer) const {
  DeviceWeight w = shape_of(*this, which);
  const bool down = which == ExpertMatrix::kDown, up = which == ExpertMatrix::kUp;
  w.expert_stride = down ? down_stride() : gate_up_stride();
  const auto *base = static_cast<const std::byte *>(buffer);
  if (format == WeightFormat::kFp8) {
    // The e4m3 bytes of the expert's matrices first, then their scale grids in order.
    const auto codes = static_cast<std::size_t>(w.rows * w.cols), grid = w.bytes() - codes;
    w.data = base + (up ? codes : 0);
    w.scales = reinterpret_cast<const float *>(base + (down ? codes : 2 * codes + (up ? grid : 0)));
  } else {
    w.data = base + (up ? w.bytes() : 0);
  }
  return w;
}

StackedExperts ExpertFormat::gate_up(const void *buffer) const {
  StackedExperts s;
  s.experts = static_cast<int>(experts);
  s.parts[0] = matrix(ExpertMatrix::kGate, buffer);
  if (format == WeightFormat::kFp8) {
    s.parts[1] = matrix(ExpertMatrix::kUp, buffer);
    s.num_parts = 2;
  } else {  // up's rows continue gate's in one layout
    s.parts[0].rows = 2 * inter;
  }
  return s;
}

StackedExperts ExpertFormat::down(const void *buffer) const {
  StackedExperts s;
  s.experts = static_cast<int>(experts);
  s.parts[0] = matrix(ExpertMatrix::kDown, buffer);
  return s;
}

std::string ExpertFormat::name(ExpertMatrix which) const { return shape_of(*this, which).name(); }

void launch_expert_slot_gemv(StreamRef s, const StackedExperts &W, const bf16 *x, std::int64_t ldx,
                             int slots_per_x, const std::int32_t *ids, int slots, void *y,
                             bool y_f32, std::int64_t ldy, const QgemvChoice *gguf_qgemv) {
  std::int64_t row0 = 0;  // part p's outputs start at column row0 of y
  for (int p = 0; p < W.num_parts; ++p) {
    const DeviceWeight &w = W.parts[p];
    void *yp = y_f32 ? static_cast<void *>(static_cast<float *>(y) + row0)
                     : static_cast<void *>(static_cast<bf16 *>(y) + row0);
    switch (w.format) {
      case WeightFormat::kMxfp4:
        launch_gemv_mxfp4_experts(s, x, ldx, slots_per_x, w.data, w.expert_stride, W.experts, ids,
                                  slots, yp, y_f32, ldy, w.rows, w.cols);
        break;
      case WeightFormat::kGguf:
        // The integer-dot GEMV's expert slots (k_qgemv.h) where asked and it takes the shape:
        // the float GEMV (k_quant.h) spends ~6 instructions a weight.
        if (gguf_qgemv && qgemv_supported(w.blocks, 1, w.cols, qgemv_device_smem()) &&
            slots <= 65535 && w.expert_stride % 16 == 0) {
          QgemvParams q;
          q.format = w.blocks;
          q.w = w.data;
          q.N = w.rows;
          q.K = w.cols;
          q.M = 1;
          q.x = x;
          q.ldx = ldx;
          q.out = y_f32 ? GemvOut::kF32 : GemvOut::kBf16;
          q.y = yp;
          q.ldy = ldy;
          gguf_qgemv->apply(q);
          q.mma = false;  // expert slots run the dp4a kernels only
          q.expert_ids = ids;
          q.expert_stride = static_cast<std::int64_t>(w.expert_stride);
          q.experts = W.experts;
          q.slots = slots;
          q.slots_per_x = slots_per_x;
          launch_qgemv(s, q, 0);
        } else {
          launch_gemv_quant_experts(s, w.blocks, x, ldx, slots_per_x, w.data, w.expert_stride,
                                    W.experts, ids, slots, yp, y_f32, ldy, w.rows, w.cols);
        }
        break;
      case WeightFormat::kFp8:
        launch_gemv_fp8_experts(s, fp8_of(w, W.experts), x, ldx, slots_per_x, ids, slots, yp, y_f32,
                                ldy);
        break;
      case WeightFormat::kBf16:
        throw not_low_bit("launch_expert_slot_gemv");
    }
    row0 += w.rows;
  }
}

void launch_expert_dequantize(StreamRef s, const StackedExperts &W, const std::int32_t *active,
                              const std::int32_t *n_active, int max_active, bf16 *dst) {
  const std::int64_t n = W.rows() * W.parts[0].cols;  // elements of one expert in dst
  std::int64_t at = 0;                                // part p's first element in an expert
  for (int p = 0; p < W.num_parts; ++p) {
    const DeviceWeight &w = W.parts[p];
    switch (w.format) {
      case WeightFormat::kMxfp4:
        launch_dequantize_mxfp4_experts(s, w.data, w.expert_stride, n, active, n_active, max_active,
                                        dst);
        break;
      case WeightFormat::kGguf:
        launch_dequantize_quant_experts(s, w.blocks, w.data, w.expert_stride, n, active, n_active,
                                        max_active, dst);
        break;
      case WeightFormat::kFp8:
        launch_dequantize_fp8_experts(s, fp8_of(w, W.experts), active, n_active, max_active,
                                      dst + at, n);
        break;
      case WeightFormat::kBf16:
        throw not_low_bit("launch_expert_dequantize");
    }
    at += w.rows * w.cols;
  }
}

MoeLowbitWeights grouped_lowbit_weights(const StackedExperts &W) {
  MoeLowbitWeights m;
  const DeviceWeight &w = W.parts[0];
  switch (w.format) {
    case WeightFormat::kFp8:
      m.fp8_parts = W.num_parts;
      for (int p = 0; p < W.num_parts; ++p) m.fp8[p] = fp8_of(W.parts[p], W.experts);
      return m;
    case WeightFormat::kMxfp4:
    case WeightFormat::kGguf:
      m.format = w.format == WeightFormat::kMxfp4 ? QuantFormat::kMXFP4 : w.blocks;
      m.w = w.data;
      m.stride = w.expert_stride;
      return m;
    case WeightFormat::kBf16:
      break;
  }
  throw not_low_bit("grouped_lowbit_weights");
}

}  // namespace keel::cuda
