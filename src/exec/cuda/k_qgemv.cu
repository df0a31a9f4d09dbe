// Integer-dot GEMV over GGUF blocks (see k_qgemv.h). A warp computes whole output rows;
// lane l takes units l, l + 32, ... of the row (a unit is 32 weights: a Q8_0 / Q4_0
// block, an eighth of a K-quant super-block), kUnroll units' loads in flight before the
// first dot, the next chunk's loads issued before this one's dots. Per unit and row: the weights'
// integer codes as packed bytes, dp4a against the staged int8 input, the block scales applied to
// the integer sums.
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_pdl.cuh"
#include "exec/cuda/k_qgemv.h"
#include "exec/cuda/k_qgemv_common.cuh"
#include "exec/cuda/k_qgemv_dp4a.cuh"

namespace keel::cuda {

namespace {

using namespace qgemv_detail;

template <QuantFormat F, int M>
__device__ __forceinline__ void qgemv_body(const QgemvParams &p) {
  using T = QDot<F>;
  extern __shared__ uint4 smem_raw[];
  __shared__ float red[kWarps][M];
  const std::int64_t K = p.K;
  auto *xq = reinterpret_cast<std::int8_t *>(smem_raw);
  auto *xds = reinterpret_cast<float2 *>(xq + M * K);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const bool swiglu = p.out == GemvOut::kSwiglu;
  const std::int64_t rows = swiglu ? p.N / 2 : p.N;
  const std::int64_t ldy = p.ldy > 0 ? p.ldy : rows;
  const std::int64_t units = K / T::kElems * T::kUnits;
  const std::size_t row_bytes = static_cast<std::size_t>(K / T::kElems) * T::kBytes;
  const SlotView sv = slot_view(p);
  const std::uint8_t *w = sv.w;
  const std::int64_t first = std::int64_t(blockIdx.x) * kWarps + warp;
  const std::int64_t stride = std::int64_t(gridDim.x) * kWarps;
  // Chunk q + 1's loads are issued before chunk q's dot products, so a warp's loads stay in
  // flight while it computes, across row boundaries too; chunk 0's are issued before the PDL
  // wait and the staging (weights never depend on the previous kernel), so their latency
  // overlaps both.
  const ChunkSeq seq(units, rows, first, stride, swiglu);
  const std::int64_t per_chunk = ChunkSeq::kPerChunk, total = seq.total;
  auto load_chunk = [&](const ChunkPos &a, typename T::Raw(&dst)[kUnroll]) {
    const std::int64_t n = first + a.row * stride + a.part * rows;
    const std::uint8_t *wr = w + static_cast<std::size_t>(n) * row_bytes;
    const std::int64_t u0 = lane + a.c * per_chunk;
#pragma unroll
    for (int i = 0; i < kUnroll; ++i)
      if (u0 + 32 * i < units) dst[i] = T::load(wr, u0 + 32 * i);
  };
  if (!sv.valid) return zero_slot(p, sv, first, stride);
  typename T::Raw cur[kUnroll], nxt[kUnroll];
  if (total > 0) load_chunk(ChunkPos{}, cur);
  wait_for_previous_kernel();
  allow_next_kernel();
  stage_input<F, M>(p, xq, xds, red, sv.x_off);
  __syncthreads();
  const Staged x{xq, xds, static_cast<int>(K), static_cast<int>(K / 32)};
  float acc[M], gate[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = gate[m] = 0.0f;
  ChunkPos at, next;
  seq.advance(next);
  for (std::int64_t q = 0; q < total; ++q) {
    if (q + 1 < total) load_chunk(next, nxt);
    const std::int64_t u0 = lane + at.c * per_chunk;
#pragma unroll
    for (int i = 0; i < kUnroll; ++i)
      if (u0 + 32 * i < units) T::template dot<M>(cur[i], u0 + 32 * i, x, acc);
#pragma unroll
    for (int i = 0; i < kUnroll; ++i) cur[i] = nxt[i];
    const ChunkPos done = at;
    at = next;
    seq.advance(next);
    finish_chunk<M>(p, seq, done, sv.y_off + first + done.row * stride, ldy, acc, gate);
  }
}

template <QuantFormat F, int M>
__global__ void __launch_bounds__(kThreads) qgemv_kernel(const QgemvParams p) {
  qgemv_body<F, M>(p);
}
// The same with registers capped for two blocks an SM: Q6_K at M = 2 took 153 registers
// otherwise (one block an SM) and ran 1.3x slower than before the staged input went
// unit-major (bench/RESULTS.md, session 15); capped, ptxas spills nothing. The other
// instantiations measured best with the compiler's own choice or spill when capped.
template <QuantFormat F, int M>
__global__ void __launch_bounds__(kThreads, 2) qgemv_kernel_two_blocks(const QgemvParams p) {
  qgemv_body<F, M>(p);
}

// The kernel a shape launches (only the one chosen is instantiated).
template <QuantFormat F, int M>
constexpr auto qgemv_entry() {
  if constexpr (F == QuantFormat::kQ6_K && M == 2)
    return qgemv_kernel_two_blocks<F, M>;
  else
    return qgemv_kernel<F, M>;
}

}  // namespace

std::size_t qgemv_smem_bytes(int M, std::int64_t K) {
  return static_cast<std::size_t>(M) * static_cast<std::size_t>(K) +
         static_cast<std::size_t>(M) * static_cast<std::size_t>(K / 32) * sizeof(float2);
}

std::size_t qgemv_device_smem() { return device_smem_optin(); }

bool qgemv_mma_supported(QuantFormat f) { return f != QuantFormat::kMXFP4; }

bool qgemv_supported(QuantFormat f, int M, std::int64_t K, std::size_t smem_per_block) {
  return f != QuantFormat::kMXFP4 && M >= 1 && M <= kQgemvMaxM && K > 0 &&
         K % quant_block_elems(f) == 0 &&
         qgemv_smem_bytes(M, K) <= std::min(kMaxSmem, smem_per_block);
}

void launch_qgemv(StreamRef s_ref, const QgemvParams &p, int num_sms) {
  const cudaStream_t s = s_ref.get("launch_qgemv");
  if (p.N <= 0) return;
  const bool swiglu = p.out == GemvOut::kSwiglu;
  const std::int64_t rows = swiglu ? p.N / 2 : p.N;
  if (!qgemv_supported(p.format, p.M, p.K, device_smem_optin()) || (swiglu && p.N % 2 != 0) ||
      (p.ldy > 0 && p.ldy < rows) || !p.w || !p.y ||
      reinterpret_cast<std::uintptr_t>(p.w) % 16 != 0 ||
      (p.in == GemvIn::kBf16 && (!p.x || reinterpret_cast<std::uintptr_t>(p.x) % 16 != 0 ||
                                 (p.ldx > 0 && (p.ldx < p.K || p.ldx % 8 != 0)))) ||
      (p.in == GemvIn::kRmsNorm && (!p.residual || !p.norm_weight)) ||
      (p.expert_ids &&
       (p.M != 1 || p.in != GemvIn::kBf16 || (p.out != GemvOut::kF32 && p.out != GemvOut::kBf16) ||
        p.pdl || p.mma || p.slots < 1 || p.slots > 65535 || p.slots_per_x < 1 || p.experts < 1 ||
        p.expert_stride % 16 != 0)))
    throw Error(ErrorCode::kInvalidArgument, "qgemv: unsupported shape M=" + std::to_string(p.M) +
                                                 " N=" + std::to_string(p.N) +
                                                 " K=" + std::to_string(p.K));
  if (p.mma && qgemv_mma_supported(p.format)) {
    qgemv_detail::launch_qgemv_mma(s, p, num_sms);
    KEEL_CUDA_CHECK_LAUNCH("qgemv_mma");
    return;
  }
  if (p.stream_stages > 0 &&
      qgemv_stream_supported(p.format, p.M, p.K, p.stream_stages, device_smem_optin())) {
    qgemv_detail::launch_qgemv_stream(s, p, num_sms);
    KEEL_CUDA_CHECK_LAUNCH("qgemv_stream");
    return;
  }
  dispatch_format(p.format, [&](auto f) {
    dispatch_rows(p.M, [&](auto m) {
      constexpr QuantFormat F = decltype(f)::value;
      constexpr int M = decltype(m)::value;
      launch_persistent(qgemv_entry<F, M>(), qgemv_smem_bytes(M, p.K), s, p, num_sms);
    });
  });
  KEEL_CUDA_CHECK_LAUNCH("qgemv");
}

}  // namespace keel::cuda
