// Scatter of new K/V rows into their paged cache slots.
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/kernels.h"

namespace keel::cuda {

namespace {
// One block per token; threads copy the K and V heads (contiguous in both places).
__global__ void kv_write_kernel(const bf16 *qkv, int row_stride, int k_offset, int v_offset,
                                const std::int32_t *slots, bf16 *cache, KvLayout layout,
                                int layer) {
  const int t = blockIdx.x;
  const std::int32_t slot = slots[t];
  if (slot < 0) return;
  const std::int64_t block = slot / layout.block_size;
  const int in_block = slot % layout.block_size;
  const int n = static_cast<int>(layout.slot_elems());
  const bf16 *row = qkv + std::int64_t(t) * row_stride;
  bf16 *k_dst = cache + layout.offset(block, layer, 0, in_block);
  bf16 *v_dst = cache + layout.offset(block, layer, 1, in_block);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    k_dst[i] = row[k_offset + i];
    v_dst[i] = row[v_offset + i];
  }
}
}  // namespace

void launch_kv_write(StreamRef s_ref, const bf16 *qkv, int T, int row_stride, int k_offset,
                     int v_offset, const std::int32_t *slots, bf16 *cache, const KvLayout &layout,
                     int layer) {
  const cudaStream_t s = s_ref.get("launch_kv_write");
  if (T <= 0) return;
  kv_write_kernel<<<T, 256, 0, s>>>(qkv, row_stride, k_offset, v_offset, slots, cache, layout,
                                    layer);
  KEEL_CUDA_CHECK_LAUNCH("kv_write");
}

}  // namespace keel::cuda
