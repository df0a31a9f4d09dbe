// The experts' grouped GEMM over MXFP4 blocks with the weights as the MMA's A operand
// (k_moe_grouped_mxfp4.h). A block of 8 warps owns 128 weight rows of one expert (16 a warp)
// and one row tile of BM grouped input rows (NT = BM / 8 column tiles of the MMA), over K in
// steps of 64 values (two MXFP4 blocks of each row; the last step may be one block):
//   - a ring of kSlots slots receives by cp.async the step's input rows (BM x 64 bf16) and
//     each weight row's 34 bytes as the aligned 8-byte words covering them (blocks are 17
//     bytes, so rows have any alignment), kSlots - 1 steps ahead; one barrier a step;
//   - each lane reads, for its rows g and g + 8, each block's scale byte and the nibble word
//     of code bytes 4t..4t+3 (codes 4t.. in the low nibbles, 16 + 4t.. in the high ones)
//     from the slot, and decodes it with mxfp4::decode_word_bf16 straight into the A
//     fragments of the block's two k16 tiles: value 4t + j of a 16-value run sits in MMA slot
//     2t + j (j < 2) or 2t + 6 + j (j >= 2), and the input is read at the same positions, one
//     8-byte shared load a column tile;
//   - the NT MMAs of each tile follow its decode.
// The decoded weights never go through shared memory: the first low-bit kernel
// (k_moe_grouped_lowbit.cu) wrote a bf16 tile there and read it back as WMMA fragments, with a
// second barrier a step, and its 16-row kernel was bound by those instructions (gpt-oss-20b at
// 64 seqs, bench/RESULTS.md session 22).
//
// Shared memory a slot: BM input rows of 160 bytes (64 bf16 + 32: the four rows a half-warp
// reads start 8 banks apart), then 128 weight rows of 48 bytes (6 copies of 8 bytes; 12 words:
// rows g = 0..7 of a warp start on banks 12 g mod 32, 4 apart, so the lanes' words rarely share
// a bank).
#include <cuda_bf16.h>

#include <algorithm>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_cp_async.cuh"
#include "exec/cuda/k_mma.cuh"
#include "exec/cuda/k_moe_gemm_tile.cuh"
#include "exec/cuda/k_moe_grouped_mxfp4.h"
#include "exec/cuda/k_mxfp4_decode.cuh"

namespace keel::cuda::moe_mxfp4 {

namespace {

using async_copy::cp_async16;
using async_copy::cp_async8;
using async_copy::cp_async_commit;
using async_copy::cp_async_wait;
using moe_gemm::addr_low;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 16 * kWarps;          // weight rows a block
constexpr int kBlocksPerStep = 2;           // MXFP4 blocks of a row a step (4: not yet measured)
constexpr int kStep = 32 * kBlocksPerStep;  // K values a step
constexpr int kBlockBytes = mxfp4::kBlockBytes;
// Aligned 8-byte words covering a row's blocks of a step (from up to 7 bytes before them).
constexpr int kWords = (kBlockBytes * kBlocksPerStep + 7 + 7) / 8;
constexpr int kCopies = kRows * kWords / kThreads;  // words a thread copies a step
static_assert(kCopies * kThreads == kRows * kWords, "whole copies a thread");
constexpr int kRawStride = 8 * kWords;    // bytes a staged weight row
constexpr int kXStride = 2 * kStep + 32;  // bytes a staged input row (kStep bf16, padded)
constexpr int kSlots = 6;                 // registers, not shared memory, bound the blocks an SM

template <int BM>
constexpr int slot_bytes() {
  return BM * kXStride + kRows * kRawStride;
}

template <int BM>
__global__ void __launch_bounds__(kThreads)
    mxfp4_grouped_kernel(const bf16 *__restrict__ A, const std::uint8_t *__restrict__ w,
                         std::size_t stride, int N, int K, const std::int32_t *__restrict__ group,
                         MoeGroupLayout L, bf16 *__restrict__ C) {
  constexpr int NT = BM / 8;
  constexpr int kSlotBytes = slot_bytes<BM>();
  extern __shared__ __align__(16) std::uint8_t smem[];
  const std::int64_t row0 = std::int64_t(blockIdx.y) * BM;
  if (row0 >= group[L.starts() + L.E]) return;
  const std::int64_t e = moe_gemm::tile_expert(group, L, row0);
  const int n0 = blockIdx.x * kRows;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const std::size_t row_bytes = std::size_t(K / mxfp4::kBlockElems) * kBlockBytes;
  const std::uint8_t *const tile_rows = w + e * stride + std::size_t(n0) * row_bytes;
  // The stored row that tile row r reads: rows past N read row N - 1 (never stored).
  auto source_row = [&](int r) { return min(r, N - 1 - n0); };
  // The copies: word i % kWords of row i / kWords for i = tid + j kThreads, so a warp's
  // copies run along five rows' contiguous bytes (a warp over 16 rows' words touched 16
  // lines an instruction). Each packed as row << 12 | source row << 4 | word.
  int copy_at[kCopies];
#pragma unroll
  for (int j = 0; j < kCopies; ++j) {
    const int i = tid + j * kThreads, r = i / kWords;
    copy_at[j] = r << 12 | source_row(r) << 4 | i % kWords;
  }
  // The math: this lane's rows g and g + 8 of the warp's 16.
  const std::uint8_t *const mrow[2] = {
      tile_rows + std::size_t(source_row(warp * 16 + g)) * row_bytes,
      tile_rows + std::size_t(source_row(warp * 16 + g + 8)) * row_bytes};
  const int steps = (K + kStep - 1) / kStep;
  auto units = [&](int kt) { return min(kBlocksPerStep, (K - kt * kStep) / mxfp4::kBlockElems); };
  // Step kt's input rows and weight words into ring slot `slot` (a half step's second block is
  // neither copied nor read; its input columns are zeros).
  auto stage = [&](int kt, int slot) {
    std::uint8_t *dst = smem + slot * kSlotBytes;
    const int u = units(kt);
    for (int i = tid; i < BM * (kStep / 8); i += kThreads) {
      const int r = i / (kStep / 8), c = i % (kStep / 8);
      std::uint8_t *d = dst + r * kXStride + 16 * c;
      if (c < 4 * u)
        cp_async16(d, A + (row0 + r) * K + std::int64_t(kt) * kStep + 8 * c);
      else
        *reinterpret_cast<uint4 *>(d) = make_uint4(0, 0, 0, 0);
    }
    const std::size_t at = std::size_t(kt) * kBlocksPerStep * kBlockBytes;
    std::uint8_t *wd = dst + BM * kXStride;
#pragma unroll
    for (int j = 0; j < kCopies; ++j) {
      const int r = copy_at[j] >> 12, rs = (copy_at[j] >> 4) & 255, c = copy_at[j] & 15;
      const std::uint8_t *p = tile_rows + std::size_t(rs) * row_bytes + at;
      const std::uint8_t *a0 = p - (addr_low(p) & 7);
      if (a0 + 8 * c < p + kBlockBytes * u) cp_async8(wd + r * kRawStride + 8 * c, a0 + 8 * c);
    }
  };

  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
  }
  // One commit group a slot, empty past the last step, so wait<kSlots - 2> always means
  // "step kt has landed".
#pragma unroll
  for (int s = 0; s < kSlots - 1; ++s) {
    if (s < steps) stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < steps; ++kt) {
    cp_async_wait<kSlots - 2>();
    __syncthreads();  // step kt staged by every thread; slot (kt - 1) % kSlots read by all
    if (kt + kSlots - 1 < steps) stage(kt + kSlots - 1, (kt + kSlots - 1) % kSlots);
    cp_async_commit();
    const std::uint8_t *xs = smem + (kt % kSlots) * kSlotBytes;
    const std::uint8_t *raw = xs + BM * kXStride;
    const int u = units(kt);
    // Where each of the lane's rows' step bytes start in its staged words.
    unsigned ph[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
      ph[h] = addr_low(mrow[h] + std::size_t(kt) * kBlocksPerStep * kBlockBytes) & 7;
#pragma unroll
    for (int b = 0; b < kBlocksPerStep; ++b) {
      if (b >= u) break;
      unsigned f[2][4];  // row g + 8h: low nibbles' pairs [0], [2]; high nibbles' [1], [3]
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const std::uint8_t *r = raw + (warp * 16 + g + 8 * h) * kRawStride;
        const unsigned at = ph[h] + kBlockBytes * b;  // the block's scale byte
        const unsigned o = at + 1 + 4 * t;            // its code bytes 4t..4t+3
        const unsigned *wp = reinterpret_cast<const unsigned *>(r) + o / 4;
        const unsigned q = __funnelshift_r(wp[0], wp[1], 8 * (o % 4));
        mxfp4::decode_word_bf16(q, mxfp4::scale_bf16x2(r[at]), f[h]);
      }
      // k16 tile s of the block: its values 16 s + 4t.. (low nibbles for s = 0, high for 1).
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const std::uint32_t a[4] = {f[0][s], f[1][s], f[0][2 + s], f[1][2 + s]};
        const std::uint8_t *xb = xs + g * kXStride + 2 * (32 * b + 16 * s + 4 * t);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint2 bv = *reinterpret_cast<const uint2 *>(xb + nt * 8 * kXStride);
          mma_bf16(acc[nt], a, bv.x, bv.y);
        }
      }
    }
  }
  cp_async_wait<0>();
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = n0 + warp * 16 + g + 8 * h;
      if (n >= N) continue;
#pragma unroll
      for (int i = 0; i < 2; ++i)
        C[(row0 + nt * 8 + 2 * t + i) * N + n] = __float2bfloat16(acc[nt][2 * h + i]);
    }
}

template <int BM>
void launch_bm(cudaStream_t s, const bf16 *A, const std::uint8_t *w, std::size_t stride, int N,
               int K, const std::int32_t *group, const MoeGroupLayout &L, bf16 *C) {
  constexpr int smem = kSlots * slot_bytes<BM>();
  const auto kernel = mxfp4_grouped_kernel<BM>;
  // The same value for every launch, so two engines' threads never race over the attribute.
  KEEL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(static_cast<unsigned>((N + kRows - 1) / kRows),
                  static_cast<unsigned>(L.rows_cap / BM));
  kernel<<<grid, kThreads, smem, s>>>(A, w, stride, N, K, group, L, C);
}

}  // namespace

void launch(cudaStream_t s, const bf16 *A, const std::uint8_t *w, std::size_t stride, int N, int K,
            const std::int32_t *group, const MoeGroupLayout &L, bf16 *C, int tile_rows) {
  if (tile_rows == 16)
    launch_bm<16>(s, A, w, stride, N, K, group, L, C);
  else if (tile_rows == 32)
    launch_bm<32>(s, A, w, stride, N, K, group, L, C);
  else
    launch_bm<64>(s, A, w, stride, N, K, group, L, C);
}

}  // namespace keel::cuda::moe_mxfp4
