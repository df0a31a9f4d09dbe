// What the experts' grouped GEMMs share (k_moe_grouped_gemm.cu over bf16 weights,
// k_moe_grouped_lowbit.cu over MXFP4 / FP8 / GGUF blocks): cp.async, the tile's expert,
// the warps' WMMA tiling of a BM x 128 output tile and the bf16 epilogue. BM (16, 32 or
// 64: kMoeGemmRowTiles) is the groups' padding, so a row tile is always one expert's.
#pragma once

#include <mma.h>

#include <cstdint>

#include "exec/cuda/k_cp_async.cuh"
#include "exec/cuda/k_moe.h"

namespace keel::cuda::moe_gemm {

namespace wmma = nvcuda::wmma;

constexpr int kBN = 128, kThreads = 256, kStages = 3;
constexpr int kCLd = kBN + 4;  // f32 epilogue staging row

using async_copy::cp_async16;
using async_copy::cp_async4;
using async_copy::cp_async_commit;
using async_copy::cp_async_wait;

// The low 32 bits of an address (its alignment: the kernels' copies of unaligned blocks).
__device__ __forceinline__ unsigned addr_low(const void *p) {
  return static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(p));
}

// The expert of the row tile at row0: the last whose group starts at or before row0 (the
// groups are padded to the tile's rows, so the whole tile is in it).
__device__ __forceinline__ int tile_expert(const std::int32_t *__restrict__ group,
                                           const MoeGroupLayout &L, std::int64_t row0) {
  int lo = 0, hi = static_cast<int>(L.E) - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (group[L.starts() + mid] <= row0)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// 8 warps over a BM x 128 tile: WM x WN warps of FI x FJ 16 x 16 fragments each.
// BM 64: 2 x 4 warps of 32 x 32; BM 32: 2 x 4 of 16 x 32; BM 16: 1 x 8 of 16 x 16.
template <int BM>
struct Tiling {
  static_assert(BM == 16 || BM == 32 || BM == 64, "row tiles of 16, 32 or 64 rows");
  static constexpr int WM = BM >= 32 ? 2 : 1, WN = 8 / WM;
  static constexpr int FI = BM / WM / 16, FJ = kBN / WN / 16;
};

template <int BM>
using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>[Tiling<BM>::FI][Tiling<BM>::FJ];

template <int BM>
__device__ __forceinline__ void zero(Acc<BM> &acc) {
#pragma unroll
  for (int i = 0; i < Tiling<BM>::FI; ++i)
#pragma unroll
    for (int j = 0; j < Tiling<BM>::FJ; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
}

// acc += A[BM][kk..kk+16) . B[128][kk..kk+16)^T for the warp's fragments; a and b are
// row-major bf16 in shared memory with leading dimensions lda / ldb (elements).
template <int BM>
__device__ __forceinline__ void mma_k16(Acc<BM> &acc, const bf16 *a, int lda, const bf16 *b,
                                        int ldb, int kk, int warp) {
  using T = Tiling<BM>;
  const int wm = warp / T::WN, wn = warp % T::WN;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa[T::FI];
  wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb[T::FJ];
#pragma unroll
  for (int i = 0; i < T::FI; ++i)
    wmma::load_matrix_sync(fa[i], a + (wm * T::FI * 16 + i * 16) * lda + kk, lda);
#pragma unroll
  for (int j = 0; j < T::FJ; ++j)
    wmma::load_matrix_sync(fb[j], b + (wn * T::FJ * 16 + j * 16) * ldb + kk, ldb);
#pragma unroll
  for (int i = 0; i < T::FI; ++i)
#pragma unroll
    for (int j = 0; j < T::FJ; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
}

// C[row0 + r][n0 + c] = bf16(acc) through the f32 staging c_smem [BM][kCLd] (the caller
// has synchronised: the input stages it overlays are dead). Columns from N on are not
// stored (N % 8 == 0: an 8-column piece is wholly in or out).
template <int BM>
__device__ __forceinline__ void store_tile(Acc<BM> &acc, float *c_smem, bf16 *__restrict__ C,
                                           std::int64_t row0, int n0, int N, int warp, int tid) {
  using T = Tiling<BM>;
  const int wm = warp / T::WN, wn = warp % T::WN;
#pragma unroll
  for (int i = 0; i < T::FI; ++i)
#pragma unroll
    for (int j = 0; j < T::FJ; ++j)
      wmma::store_matrix_sync(c_smem + (wm * T::FI * 16 + i * 16) * kCLd + wn * T::FJ * 16 + j * 16,
                              acc[i][j], kCLd, wmma::mem_row_major);
  __syncthreads();
  for (int idx = tid; idx < BM * kBN / 8; idx += kThreads) {
    const int r = idx / (kBN / 8), c = (idx % (kBN / 8)) * 8;
    if (n0 + c >= N) continue;
    const float *src = c_smem + r * kCLd + c;
    uint4 raw;
    __nv_bfloat162 *h2 = reinterpret_cast<__nv_bfloat162 *>(&raw);
#pragma unroll
    for (int e = 0; e < 4; ++e) h2[e] = __floats2bfloat162_rn(src[2 * e], src[2 * e + 1]);
    *reinterpret_cast<uint4 *>(C + (row0 + r) * N + n0 + c) = raw;
  }
}

}  // namespace keel::cuda::moe_gemm
