#include "exec/cuda/device_weight.h"

#include "core/error.h"
#include "exec/cuda/k_qgemv.h"

namespace keel::cuda {

namespace {
constexpr const char *kBlockNames[] = {"q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "mxfp4"};

Fp8Weight fp8_of(const DeviceWeight &w) {
  return Fp8Weight{w.data, w.scales, w.scale_block_rows, w.rows, w.cols};
}
}  // namespace

std::size_t DeviceWeight::bytes() const {
  switch (format) {
    case WeightFormat::kBf16:
      return static_cast<std::size_t>(rows * cols) * 2;
    case WeightFormat::kGguf:
    case WeightFormat::kMxfp4: {
      const QuantFormat f = format == WeightFormat::kMxfp4 ? QuantFormat::kMXFP4 : blocks;
      return static_cast<std::size_t>(rows * (cols / quant_block_elems(f)) * quant_block_bytes(f));
    }
    case WeightFormat::kFp8: {
      const std::int64_t grid_rows =
          scale_block_rows > 0 ? (rows + scale_block_rows - 1) / scale_block_rows : 0;
      const std::int64_t grid_cols = (cols + kFp8ScaleCols - 1) / kFp8ScaleCols;
      return static_cast<std::size_t>(rows * cols + grid_rows * grid_cols * 4);
    }
  }
  return 0;
}

std::string DeviceWeight::name() const {
  switch (format) {
    case WeightFormat::kBf16:
      return "bf16";
    case WeightFormat::kGguf:
      return kBlockNames[static_cast<int>(blocks)];
    case WeightFormat::kFp8:
      return "fp8";
    case WeightFormat::kMxfp4:
      return "mxfp4";
  }
  return "?";
}

int device_weight_gemv_max_m(const DeviceWeight &w) {
  switch (w.format) {
    case WeightFormat::kGguf:
      return kQuantGemvMaxM;
    case WeightFormat::kFp8:
      return kFp8GemvMaxM;
    case WeightFormat::kMxfp4:
      return kQuantGemvMaxM;
    case WeightFormat::kBf16:
      break;
  }
  return 0;
}

void device_weight_gemv(StreamRef s, const DeviceWeight &w, const bf16 *x, void *y, bool y_f32,
                        std::int64_t ldy, int M, const QgemvChoice &qgemv) {
  switch (w.format) {
    case WeightFormat::kGguf:
      // The integer-dot GEMV (k_qgemv.h) wherever it runs the shape: the float GEMV
      // (k_quant.h) spends ~6 instructions a weight and was slower than bf16 (NOTES.md).
      // It stages M x K int8 in shared memory, so the float GEMV keeps the rows too long
      // for that (at M = 8, K past 20,480).
      if (qgemv_supported(w.blocks, M, w.cols, qgemv_device_smem())) {
        QgemvParams p;
        p.format = w.blocks;
        p.w = w.data;
        p.N = w.rows;
        p.K = w.cols;
        p.M = M;
        p.x = x;
        p.out = y_f32 ? GemvOut::kF32 : GemvOut::kBf16;
        p.y = y;
        p.ldy = ldy;
        qgemv.apply(p);
        launch_qgemv(s, p, 0);
        return;
      }
      launch_gemv_quant(s, w.blocks, x, w.data, y, y_f32, ldy, M, w.rows, w.cols);
      return;
    case WeightFormat::kFp8:
      launch_gemv_fp8(s, fp8_of(w), x, y, y_f32, ldy, M);
      return;
    case WeightFormat::kMxfp4:
      launch_gemv_quant(s, QuantFormat::kMXFP4, x, w.data, y, y_f32, ldy, M, w.rows, w.cols);
      return;
    case WeightFormat::kBf16:
      break;
  }
  throw Error(ErrorCode::kInvalidArgument, "device_weight_gemv: bf16 weights take gemm.h");
}

void device_weight_dequantize(StreamRef s, const DeviceWeight &w, bf16 *dst) {
  switch (w.format) {
    case WeightFormat::kGguf:
      launch_dequantize(s, w.blocks, w.data, dst, w.rows * w.cols);
      return;
    case WeightFormat::kMxfp4:
      launch_dequantize(s, QuantFormat::kMXFP4, w.data, dst, w.rows * w.cols);
      return;
    case WeightFormat::kFp8:
      launch_dequantize_fp8(s, fp8_of(w), dst);
      return;
    case WeightFormat::kBf16:
      break;
  }
  throw Error(ErrorCode::kInvalidArgument, "device_weight_dequantize: already bf16");
}

}  // namespace keel::cuda
