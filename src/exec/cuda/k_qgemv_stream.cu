// The dp4a GEMV with its weights streamed through shared memory (QgemvParams::stream_stages,
// k_qgemv.h). Why: the register kernel (k_qgemv.cu) keeps one chunk's loads in flight a warp
// (its registers hold them: 125 a thread, two blocks an SM), and at M = 1 it runs at the same
// ~300 tok/s (8B Q4_K_M) on the H100 and on the H200 with 1.4x the bandwidth -- bound by the
// bytes it can keep in flight, not by DRAM. Here a warp's chunks (the same 32 x kUnroll units,
// 4,096 weights of a row, contiguous bytes) are copied by cp.async into a ring of
// `stream_stages` slots in shared memory, stages - 1 chunks ahead of the one being computed;
// the copies need no registers, so a warp keeps several chunks in flight. A lane then reads
// its units from the slot and runs the register kernel's dot products in the same order:
// both kernels give the same bits.
#include <cuda_fp16.h>

#include <algorithm>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_cp_async.cuh"
#include "exec/cuda/k_pdl.cuh"
#include "exec/cuda/k_qgemv.h"
#include "exec/cuda/k_qgemv_common.cuh"
#include "exec/cuda/k_qgemv_dp4a.cuh"

namespace keel::cuda {

namespace qgemv_detail {
namespace {

using namespace async_copy;

// Bytes of `units` units of a row in format F (K-quant units are eighths of a super-block;
// chunks start and end on whole blocks).
template <QuantFormat F>
__device__ __forceinline__ std::int64_t unit_bytes(std::int64_t units) {
  using T = QDot<F>;
  return units / T::kUnits * T::kBytes;
}

template <QuantFormat F, int M>
__global__ void __launch_bounds__(kThreads) qgemv_stream_kernel(const QgemvParams p) {
  using T = QDot<F>;
  extern __shared__ uint4 smem_raw[];
  __shared__ float red[kWarps][M];
  const std::int64_t K = p.K;
  const int stages = p.stream_stages;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const bool swiglu = p.out == GemvOut::kSwiglu;
  const std::int64_t rows = swiglu ? p.N / 2 : p.N;
  const std::int64_t ldy = p.ldy > 0 ? p.ldy : rows;
  const std::int64_t units = K / T::kElems * T::kUnits;
  const std::int64_t row_bytes = unit_bytes<F>(units);
  const std::int64_t slot_bytes = unit_bytes<F>(ChunkSeq::kPerChunk);
  const SlotView sv = slot_view(p);
  const std::uint8_t *w = sv.w;
  // Shared memory: the warps' rings (16-byte multiples), then the staged input.
  auto *ring = reinterpret_cast<std::uint8_t *>(smem_raw) + warp * stages * slot_bytes;
  auto *xq = reinterpret_cast<std::int8_t *>(smem_raw) + kWarps * stages * slot_bytes;
  auto *xds = reinterpret_cast<float2 *>(xq + M * K);
  const std::int64_t first = std::int64_t(blockIdx.x) * kWarps + warp;
  const std::int64_t stride = std::int64_t(gridDim.x) * kWarps;
  const ChunkSeq seq(units, rows, first, stride, swiglu);
  const std::int64_t per_chunk = ChunkSeq::kPerChunk;
  // Chunk at `a` into ring slot `slot`: its bytes in 16-byte copies spread over the lanes,
  // then one commit (also when there is nothing left to copy, so that every lane's group
  // count stays in step with the chunk index).
  auto issue = [&](const ChunkPos &a, int slot, bool any) {
    if (any) {
      const std::int64_t n = first + a.row * stride + a.part * rows;
      const std::int64_t u0 = a.c * per_chunk;
      const std::uint8_t *src = w + n * row_bytes + unit_bytes<F>(u0);
      const int len =
          static_cast<int>(unit_bytes<F>(units - u0 < per_chunk ? units - u0 : per_chunk));
      std::uint8_t *dst = ring + slot * slot_bytes;
      for (int off = 16 * lane; off < len; off += 16 * 32) cp_async16(dst + off, src + off);
    }
    cp_async_commit();
  };
  if (!sv.valid) return zero_slot(p, sv, first, stride);
  ChunkPos ahead;
  for (int i = 0; i < stages - 1; ++i) {
    issue(ahead, i, i < seq.total);
    seq.advance(ahead);
  }
  wait_for_previous_kernel();
  allow_next_kernel();
  stage_input<F, M>(p, xq, xds, red, sv.x_off);
  __syncthreads();
  const Staged x{xq, xds, static_cast<int>(K), static_cast<int>(K / 32)};
  float acc[M], gate[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = gate[m] = 0.0f;
  ChunkPos at;
  int slot = 0;
  for (std::int64_t q = 0; q < seq.total; ++q) {
    // Chunk q is group q of every lane: this lane's copies of it have landed once at most
    // stages - 2 later groups are in flight, every lane's after the warp barrier, which also
    // frees the slot of chunk q - 1 for chunk q + stages - 1.
    cp_async_wait_upto(stages - 2);
    __syncwarp();
    const int refill = slot == 0 ? stages - 1 : slot - 1;
    issue(ahead, refill, q + stages - 1 < seq.total);
    seq.advance(ahead);
    const std::uint8_t *chunk = ring + slot * slot_bytes;
    const std::int64_t u0 = lane + at.c * per_chunk;
#pragma unroll
    for (int i = 0; i < kUnroll; ++i)
      if (u0 + 32 * i < units) {
        const typename T::Raw r = T::template load<true>(chunk, lane + 32 * i);
        T::template dot<M>(r, u0 + 32 * i, x, acc);
      }
    slot = slot + 1 == stages ? 0 : slot + 1;
    const ChunkPos done = at;
    seq.advance(at);
    finish_chunk<M>(p, seq, done, sv.y_off + first + done.row * stride, ldy, acc, gate);
  }
  cp_async_wait<0>();  // no copy outlives the block (the groups past the end are empty)
}

}  // namespace

void launch_qgemv_stream(cudaStream_t s, const QgemvParams &p, int num_sms) {
  dispatch_format(p.format, [&](auto f) {
    dispatch_rows(p.M, [&](auto m) {
      constexpr QuantFormat F = decltype(f)::value;
      constexpr int M = decltype(m)::value;
      launch_persistent(qgemv_stream_kernel<F, M>,
                        qgemv_stream_smem_bytes(F, M, p.K, p.stream_stages), s, p, num_sms);
    });
  });
}

}  // namespace qgemv_detail

std::size_t qgemv_stream_slot_bytes(QuantFormat f) {
  return static_cast<std::size_t>(qgemv_detail::ChunkSeq::kPerChunk * 32 / quant_block_elems(f) *
                                  quant_block_bytes(f));
}

std::size_t qgemv_stream_smem_bytes(QuantFormat f, int M, std::int64_t K, int stages) {
  return static_cast<std::size_t>(qgemv_detail::kWarps) * static_cast<std::size_t>(stages) *
             qgemv_stream_slot_bytes(f) +
         qgemv_smem_bytes(M, K);
}

bool qgemv_stream_supported(QuantFormat f, int M, std::int64_t K, int stages,
                            std::size_t smem_per_block) {
  return stages >= 2 && stages <= kQgemvMaxStreamStages &&
         qgemv_supported(f, M, K, smem_per_block) &&
         (K / quant_block_elems(f)) * quant_block_bytes(f) % 16 == 0 &&
         qgemv_stream_smem_bytes(f, M, K, stages) <=
             std::min(qgemv_detail::kMaxSmem, smem_per_block);
}

}  // namespace keel::cuda
