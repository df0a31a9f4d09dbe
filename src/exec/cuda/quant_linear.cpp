#include "exec/cuda/quant_linear.h"

#include <algorithm>

#include "core/error.h"
#include "exec/cuda/device_weight.h"
#include "exec/cuda/k_qgemm.h"

namespace keel::cuda {

bool keep_quantized_auto(std::int64_t bf16_weight_bytes, std::int64_t free_bytes) {
  return bf16_weight_bytes > free_bytes / 2;
}

std::optional<QuantFormat> device_quant_format(DType t) {
  switch (t) {
    case DType::kQ8_0:
      return QuantFormat::kQ8_0;
    case DType::kQ4_0:
      return QuantFormat::kQ4_0;
    case DType::kQ4_K:
      return QuantFormat::kQ4_K;
    case DType::kQ5_K:
      return QuantFormat::kQ5_K;
    case DType::kQ6_K:
      return QuantFormat::kQ6_K;
    case DType::kMXFP4:
      return QuantFormat::kMXFP4;
    default:
      return std::nullopt;
  }
}

namespace {
std::int64_t fp8_grid_cols(std::int64_t K) { return (K + kFp8ScaleCols - 1) / kFp8ScaleCols; }
std::int64_t fp8_scale_bytes(std::int64_t rows, std::int64_t block_rows, std::int64_t K) {
  return (rows + block_rows - 1) / block_rows * fp8_grid_cols(K) * 4;
}
}  // namespace

std::vector<float> fp8_device_scales(const TensorScale &s, std::int64_t K) {
  const std::int64_t gc = fp8_grid_cols(K);
  std::vector<float> out(static_cast<std::size_t>(s.grid_rows * gc));
  for (std::int64_t r = 0; r < s.grid_rows; ++r)
    for (std::int64_t c = 0; c < gc; ++c)
      out[r * gc + c] = s.data[r * s.grid_cols + (c * kFp8ScaleCols) / s.block_cols];
  return out;
}

std::size_t LinearLayout::bytes() const {
  if (!quantized()) return bf16_bytes();
  std::size_t b = 0;
  for (const auto &r : ranges) {
    if (r.fp8) {
      b += static_cast<std::size_t>(r.rows * K + fp8_scale_bytes(r.rows, r.scale_block_rows, K));
      continue;
    }
    b += static_cast<std::size_t>(r.rows * (K / quant_block_elems(r.format)) *
                                  quant_block_bytes(r.format));
  }
  return b;
}

std::size_t LinearLayout::bf16_bytes() const { return static_cast<std::size_t>(N * K) * 2; }

std::string LinearLayout::describe() const {
  if (!quantized()) return "bf16";
  std::string out;
  for (const auto &r : ranges) {
    static constexpr const char *kNames[] = {"q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "mxfp4"};
    const std::string name = r.fp8 ? "fp8" : kNames[static_cast<int>(r.format)];
    if (out.find(name) == std::string::npos) out += (out.empty() ? "" : "+") + name;
  }
  return out;
}

LinearLayout plan_linear(const std::vector<std::pair<std::string, DType>> &parts,
                         const std::vector<std::int64_t> &rows, std::int64_t K, bool keep_quantized,
                         const std::vector<TensorScale> *scales) {
  LinearLayout l;
  l.K = K;
  // FP8: every part FP8 with scales the device grid holds, or bf16.
  bool any_fp8 = false,
       all_fp8 = keep_quantized && scales && scales->size() == parts.size() && K % 16 == 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const bool fp8 = parts[i].second == DType::kF8_E4M3;
    any_fp8 |= fp8;
    if (!fp8 || !all_fp8) {
      all_fp8 = false;
      continue;
    }
    const TensorScale &s = (*scales)[i];
    if (!s.present() || s.block_rows <= 0 ||
        !(s.block_cols >= K || s.block_cols % kFp8ScaleCols == 0) ||
        s.grid_rows * s.block_rows < rows[i] || s.grid_cols * s.block_cols < K)
      all_fp8 = false;
  }
  if (any_fp8) {
    for (auto r : rows) l.N += r;
    if (!all_fp8) return l;
    std::size_t offset = 0;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      l.part_offsets.push_back(offset);
      offset += static_cast<std::size_t>(rows[i] * K);
    }
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const TensorScale &s = (*scales)[i];
      l.part_scale_offsets.push_back(offset);
      // Merge with the previous part when their grids continue each other: one launch.
      WeightRange *prev = l.ranges.empty() ? nullptr : &l.ranges.back();
      if (prev && prev->scale_block_rows == s.block_rows && prev->rows % s.block_rows == 0) {
        prev->rows += rows[i];
      } else {
        WeightRange r;
        r.fp8 = true;
        r.rows = rows[i];
        r.offset = l.part_offsets[i];
        r.scale_offset = offset;
        r.scale_block_rows = s.block_rows;
        l.ranges.push_back(r);
      }
      offset += static_cast<std::size_t>(fp8_scale_bytes(rows[i], s.block_rows, K));
    }
    for (const auto &r : l.ranges)
      if (r.offset % 16 != 0) return LinearLayout{l.N, K, {}, {}, {}};
    return l;
  }
  bool all_quant = keep_quantized;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    l.N += rows[i];
    const auto &[name, dt] = parts[i];
    if (dtype_is_quantized(dt) && K % dtype_info(dt).block_elems != 0)
      throw Error(ErrorCode::kFormat, "weights: " + name + ": rows of " + std::to_string(K) +
                                          " elements are not a whole number of " +
                                          std::string(dtype_name(dt)) + " blocks");
    if (!device_quant_format(dt)) all_quant = false;
  }
  if (!all_quant) return l;
  std::size_t offset = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const QuantFormat f = *device_quant_format(parts[i].second);
    l.part_offsets.push_back(offset);
    // Merge with the previous range when the format is the same: one GEMV launch.
    if (!l.ranges.empty() && l.ranges.back().format == f) {
      l.ranges.back().rows += rows[i];
    } else {
      l.ranges.push_back({f, rows[i], offset});
    }
    offset += static_cast<std::size_t>(rows[i] * (K / quant_block_elems(f)) * quant_block_bytes(f));
  }
  // Every range starts 16-byte aligned only if its offset is; the GEMV needs that.
  for (const auto &r : l.ranges)
    if (r.offset % 16 != 0) return LinearLayout{l.N, K, {}, {}, {}};
  return l;
}

DeviceWeight range_weight(const LinearLayout &l, const WeightRange &r, const void *w) {
  DeviceWeight d;
  const auto *base = static_cast<const std::byte *>(w);
  d.rows = r.rows;
  d.cols = l.K;
  d.data = base + r.offset;
  if (r.fp8) {
    d.format = WeightFormat::kFp8;
    d.scales = reinterpret_cast<const float *>(base + r.scale_offset);
    d.scale_block_rows = r.scale_block_rows;
  } else if (r.format == QuantFormat::kMXFP4) {
    d.format = WeightFormat::kMxfp4;
  } else {
    d.format = WeightFormat::kGguf;
    d.blocks = r.format;
  }
  return d;
}

bool run_linear_uses_qgemm(const LinearLayout &layout, std::int64_t M) {
  if (!layout.quantized() || M <= kQuantGemvMaxM || M > 65535) return false;
  for (const auto &r : layout.ranges)
    if (r.fp8 || !qgemm_supported(r.format, static_cast<int>(M), layout.K, qgemv_device_smem()))
      return false;
  return true;
}

bool run_linear_uses_qgemm_bf16(const LinearLayout &layout, std::int64_t M) {
  if (!layout.quantized() || M <= kQuantGemvMaxM || M > 65535) return false;
  for (const auto &r : layout.ranges)
    if (r.fp8 || !qgemm_bf16_supported(r.format, static_cast<int>(M), layout.K)) return false;
  return true;
}

std::size_t run_linear_scratch_bytes(const LinearLayout &layout, int max_gemm_rows) {
  std::size_t b = layout.quantized() ? layout.bf16_bytes() : 0;
  if (max_gemm_rows > kQuantGemvMaxM && layout.quantized())
    b = std::max(b, qgemm_input_bytes(max_gemm_rows, layout.K));
  return b;
}

void run_linear(Gemm &gemm, StreamRef s, const LinearLayout &layout, const void *w, const bf16 *x,
                void *y, bool y_f32, std::int64_t M, void *scratch) {
  (void)s.get("run_linear");  // owner check naming this launcher; the launches below recheck
  const GemmType out = y_f32 ? GemmType::kF32 : GemmType::kBF16;
  if (!layout.quantized()) {
    gemm.run(s, GemmType::kBF16, out, x, w, y, M, layout.N, layout.K);
    return;
  }
  // Each weight range with its output columns (rows of y are layout.N apart).
  auto each_range = [&](auto &&fn) {
    std::int64_t n0 = 0;
    for (const auto &r : layout.ranges) {
      fn(r, y_f32 ? static_cast<void *>(static_cast<float *>(y) + n0)
                  : static_cast<void *>(static_cast<bf16 *>(y) + n0));
      n0 += r.rows;
    }
  };
  // Few rows: each range's GEMV (every format's max M is at least kQuantGemvMaxM).
  if (M <= kQuantGemvMaxM) {
    each_range([&](const WeightRange &r, void *yr) {
      device_weight_gemv(s, range_weight(layout, r, w), x, yr, y_f32, layout.N, static_cast<int>(M),
                         gemm.qgemv_choice());
    });
    return;
  }
  // Batched decode, K-quants: the dequantizing bf16 GEMM per range, on x as it is. Its split-K
  // partial sums take at most the scratch's bf16 weight size (run_linear_scratch_bytes), which
  // the launch fits its splits to.
  if (scratch && M <= gemm.qgemm_max_m() && gemm.qgemm_bf16() &&
      run_linear_uses_qgemm_bf16(layout, M)) {
    each_range([&](const WeightRange &r, void *yr) {
      QgemmBf16Params p;
      p.format = r.format;
      p.w = static_cast<const std::byte *>(w) + r.offset;
      p.N = r.rows;
      p.K = layout.K;
      p.M = static_cast<int>(M);
      p.x = x;
      p.y_f32 = y_f32;
      p.y = yr;
      p.ldy = layout.N;
      p.workspace = scratch;
      p.workspace_bytes = layout.bf16_bytes();
      launch_qgemm_bf16(s, p, 0);
    });
    return;
  }
  // Batched decode, Q8_0 / Q4_0: x quantized to int8 once, then the integer tensor-core GEMM
  // per range.
  if (scratch && M <= gemm.qgemm_max_m() && run_linear_uses_qgemm(layout, M)) {
    launch_qgemm_quantize_input(s, x, 0, static_cast<int>(M), layout.K, scratch);
    each_range([&](const WeightRange &r, void *yr) {
      QgemmParams p;
      p.format = r.format;
      p.w = static_cast<const std::byte *>(w) + r.offset;
      p.N = r.rows;
      p.K = layout.K;
      p.M = static_cast<int>(M);
      p.staged = scratch;
      p.y_f32 = y_f32;
      p.y = yr;
      p.ldy = layout.N;
      launch_qgemm(s, p, 0);
    });
    return;
  }
  bf16 *dq = static_cast<bf16 *>(scratch);
  std::int64_t n0 = 0;
  for (const auto &r : layout.ranges) {
    device_weight_dequantize(s, range_weight(layout, r, w), dq + n0 * layout.K);
    n0 += r.rows;
  }
  gemm.run(s, GemmType::kBF16, out, x, dq, y, M, layout.N, layout.K);
}

}  // namespace keel::cuda
