// Greedy decoding on the device: the argmax of each logits row (stochastic sampling is
// k_sample.cu). A row is split over up to kMaxParts blocks when there are few rows: one
// block streaming a 128k-entry row alone took 52 us on the H200 (1% of an 8B batch-1
// step, 5% of a 1B one); each block writes its part's (value, index) and a second
// kernel picks among them in a fixed order, so ties still go to the lowest index.
#include <algorithm>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_block_argmax.cuh"
#include "exec/cuda/kernels.h"

namespace keel::cuda {

namespace {
constexpr int kThreads = 512;
constexpr int kMinPartLen = 2048;  // entries per block at least, so a part pays its launch

// Part p of row r: [p * part_len, min(V, (p + 1) * part_len)). With one part the result
// goes straight to out; otherwise to part_v / part_i [R][parts].
__global__ void __launch_bounds__(kThreads)
    argmax_part_kernel(const float *logits, int V, int part_len, int parts, std::int32_t *out,
                       float *part_v, std::int32_t *part_i) {
  __shared__ float sv[kThreads / 32];
  __shared__ int si[kThreads / 32];
  const int r = blockIdx.y, part = blockIdx.x;
  const int begin = part * part_len, len = min(V, begin + part_len) - begin;
  const float *row = logits + std::int64_t(r) * V + begin;
  float v = -FLT_MAX;
  int idx = 0x7fffffff;
  // 16-byte loads where the part starts aligned (V and part_len multiples of 4).
  if ((reinterpret_cast<std::uintptr_t>(row) & 15) == 0) {
    const int n4 = len / 4;
    const float4 *row4 = reinterpret_cast<const float4 *>(row);
    for (int i = threadIdx.x; i < n4; i += kThreads) {
      const float4 q = row4[i];
      argmax_better(v, idx, q.x, begin + 4 * i);
      argmax_better(v, idx, q.y, begin + 4 * i + 1);
      argmax_better(v, idx, q.z, begin + 4 * i + 2);
      argmax_better(v, idx, q.w, begin + 4 * i + 3);
    }
    for (int i = 4 * n4 + threadIdx.x; i < len; i += kThreads)
      argmax_better(v, idx, row[i], begin + i);
  } else {
    for (int i = threadIdx.x; i < len; i += kThreads) argmax_better(v, idx, row[i], begin + i);
  }
  block_argmax_reduce(v, idx, sv, si);
  if (threadIdx.x == 0) {
    if (parts == 1) {
      out[r] = idx == 0x7fffffff ? 0 : idx;
    } else {
      part_v[r * parts + part] = v;
      part_i[r * parts + part] = idx;
    }
  }
}

// One warp per row over its parts' winners.
__global__ void argmax_merge_kernel(int parts, const float *part_v, const std::int32_t *part_i,
                                    std::int32_t *out) {
  const int r = blockIdx.x, lane = threadIdx.x;
  float v = -FLT_MAX;
  int idx = 0x7fffffff;
  for (int p = lane; p < parts; p += 32)
    argmax_better(v, idx, part_v[r * parts + p], part_i[r * parts + p]);
  for (int o = 16; o > 0; o >>= 1)
    argmax_better(v, idx, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, idx, o));
  if (lane == 0) out[r] = idx == 0x7fffffff ? 0 : idx;
}

int parts_for(int R, int V, int num_sms) {
  const int by_sms = (2 * std::max(num_sms, 1) + R - 1) / R;
  const int by_len = std::max(1, V / kMinPartLen);
  return std::clamp(std::min(by_sms, by_len), 1, kArgmaxMaxParts);
}
}  // namespace

std::size_t argmax_scratch_bytes(int max_rows) {
  return std::size_t(std::max(max_rows, 0)) * kArgmaxMaxParts *
         (sizeof(float) + sizeof(std::int32_t));
}

void launch_argmax(StreamRef s_ref, const float *logits, int R, int V, std::int32_t *out,
                   void *scratch, int num_sms) {
  const cudaStream_t s = s_ref.get("launch_argmax");
  if (R <= 0) return;
  if (V <= 0) throw Error(ErrorCode::kInvalidArgument, "argmax: V must be positive");
  const int parts = scratch ? parts_for(R, V, num_sms) : 1;
  // A multiple of 4 keeps every part 16-byte aligned when the row is.
  const int part_len = parts == 1 ? V : ((V + parts - 1) / parts + 3) / 4 * 4;
  const int used = (V + part_len - 1) / part_len;
  auto *part_v = static_cast<float *>(scratch);
  auto *part_i = reinterpret_cast<std::int32_t *>(part_v + std::size_t(R) * kArgmaxMaxParts);
  argmax_part_kernel<<<dim3(used, R), kThreads, 0, s>>>(logits, V, part_len, used, out, part_v,
                                                        part_i);
  KEEL_CUDA_CHECK_LAUNCH("argmax");
  if (used > 1) {
    argmax_merge_kernel<<<R, 32, 0, s>>>(used, part_v, part_i, out);
    KEEL_CUDA_CHECK_LAUNCH("argmax_merge");
  }
}

}  // namespace keel::cuda
