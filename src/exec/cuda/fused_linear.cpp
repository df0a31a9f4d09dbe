#include "exec/cuda/fused_linear.h"

#include <string>

#include "core/error.h"
#include "exec/cuda/k_qgemv.h"

namespace keel::cuda {

bool fused_linear_supported(const LinearLayout &l, int M, GemvOut out, std::size_t smem_per_block) {
  if (!l.quantized()) return fused_gemv_supported(M, l.K, smem_per_block);
  if (out == GemvOut::kSwiglu && l.ranges.size() != 1) return false;
  for (const WeightRange &r : l.ranges)
    if (r.fp8 || !qgemv_supported(r.format, M, l.K, smem_per_block)) return false;
  return true;
}

void launch_fused_linear(StreamRef s, const LinearLayout &l, const void *w,
                         const FusedGemvParams &p, int num_sms, const QgemvChoice &qgemv) {
  if (!l.quantized()) {
    FusedGemvParams b = p;
    b.w = static_cast<const bf16 *>(w);
    b.N = l.N;
    b.K = l.K;
    launch_fused_gemv(s, b, num_sms);
    return;
  }
  if (!fused_linear_supported(l, p.M, p.out, qgemv_device_smem()))
    throw Error(ErrorCode::kInvalidArgument,
                "fused_linear: " + l.describe() + " at M=" + std::to_string(p.M) +
                    " K=" + std::to_string(l.K) + " is not a fused shape");
  const auto *base = static_cast<const std::byte *>(w);
  // Output element (m, n) of range r is y[m * l.N + n0 + n]: f32 for kF32 / kAddResidual,
  // bf16 for kBf16 (kSwiglu is one range, y as given).
  const std::size_t elem = p.out == GemvOut::kBf16 ? sizeof(bf16) : sizeof(float);
  std::int64_t n0 = 0;
  for (const WeightRange &r : l.ranges) {
    QgemvParams q;
    q.format = r.format;
    q.w = base + r.offset;
    q.N = r.rows;
    q.K = l.K;
    q.M = p.M;
    q.in = p.in;
    q.x = p.x;
    q.residual = p.residual;
    q.rows = p.rows;
    q.norm_weight = p.norm_weight;
    q.eps = p.eps;
    q.out = p.out;
    q.y = static_cast<std::byte *>(p.y) + static_cast<std::size_t>(n0) * elem;
    q.ldy = p.out == GemvOut::kSwiglu ? 0 : l.N;
    q.pdl = p.pdl;
    qgemv.apply(q);
    launch_qgemv(s, q, num_sms);
    n0 += r.rows;
  }
}

}  // namespace keel::cuda
