#include "exec/cuda/quant_linear.h"

#include "core/error.h"

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
    default:
      return std::nullopt;
  }
}

std::size_t LinearLayout::bytes() const {
  if (!quantized()) return bf16_bytes();
  std::size_t b = 0;
  for (const auto &r : ranges)
    b += static_cast<std::size_t>(r.rows * (K / quant_block_elems(r.format)) *
                                  quant_block_bytes(r.format));
  return b;
}

std::size_t LinearLayout::bf16_bytes() const { return static_cast<std::size_t>(N * K) * 2; }

std::string LinearLayout::describe() const {
  if (!quantized()) return "bf16";
  std::string out;
  for (const auto &r : ranges) {
    static constexpr const char *kNames[] = {"q8_0", "q4_0", "q4_k", "q6_k"};
    const std::string name = kNames[static_cast<int>(r.format)];
    if (out.find(name) == std::string::npos) out += (out.empty() ? "" : "+") + name;
  }
  return out;
}

LinearLayout plan_linear(const std::vector<std::pair<std::string, DType>> &parts,
                         const std::vector<std::int64_t> &rows, std::int64_t K,
                         bool keep_quantized) {
  LinearLayout l;
  l.K = K;
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
    if (r.offset % 16 != 0) return LinearLayout{l.N, K, {}, {}};
  return l;
}

void run_linear(Gemm &gemm, StreamRef s, const LinearLayout &layout, const void *w,
                const bf16 *x, void *y, bool y_f32, std::int64_t M, void *scratch) {
  (void)s.get("run_linear");  // owner check naming this launcher; the launches below recheck
  const GemmType out = y_f32 ? GemmType::kF32 : GemmType::kBF16;
  if (!layout.quantized()) {
    gemm.run(s, GemmType::kBF16, out, x, w, y, M, layout.N, layout.K);
    return;
  }
  const auto *base = static_cast<const std::byte *>(w);
  if (M <= kQuantGemvMaxM) {
    std::int64_t n0 = 0;
    for (const auto &r : layout.ranges) {
      void *yr = y_f32 ? static_cast<void *>(static_cast<float *>(y) + n0)
                       : static_cast<void *>(static_cast<bf16 *>(y) + n0);
      launch_gemv_quant(s, r.format, x, base + r.offset, yr, y_f32, layout.N, static_cast<int>(M),
                        r.rows, layout.K);
      n0 += r.rows;
    }
    return;
  }
  bf16 *dq = static_cast<bf16 *>(scratch);
  std::int64_t n0 = 0;
  for (const auto &r : layout.ranges) {
    launch_dequantize(s, r.format, base + r.offset, dq + n0 * layout.K, r.rows * layout.K);
    n0 += r.rows;
  }
  gemm.run(s, GemmType::kBF16, out, x, dq, y, M, layout.N, layout.K);
}

}  // namespace keel::cuda
