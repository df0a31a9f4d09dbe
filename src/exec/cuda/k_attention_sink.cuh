// The end of one attention row's online softmax, shared by the attention kernels: the
// factor its accumulated output is multiplied by, with an optional sink logit
// (AttnParams::sinks) joining the denominator without a value row.
#pragma once

#include <cuda_runtime.h>

namespace keel::cuda {

// acc and l are relative to the row's running max m (scores and m in natural-log units;
// the flash kernel's log2 units convert by log2e). Returns f with out = acc * f:
// 1 / l without a sink; with one, the sink's exp(sink - M) joins the sum after both are
// taken relative to M = max(m, sink), so a large sink cannot overflow. A row that saw no
// key (m = -inf) gives 0.
__device__ inline float attn_row_scale(float m, float l, const float *sinks, int head) {
  if (sinks == nullptr) return l > 0.0f ? 1.0f / l : 0.0f;
  if (m == -INFINITY || !(l > 0.0f)) return 0.0f;
  const float sink = sinks[head];
  const float mx = fmaxf(m, sink);
  const float a = __expf(m - mx);
  return a / (l * a + __expf(sink - mx));
}

}  // namespace keel::cuda
