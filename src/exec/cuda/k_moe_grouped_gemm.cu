// The experts' grouped GEMM for many tokens (k_moe.h, launch_moe_grouped_gemm): one launch
// over every expert's group of rows, sized by the device-side group starts, so prefill
// needs no host read of the starts and no GEMM per expert. Tiles of 64 rows x 128 output
// columns (groups are padded to 64 rows, so a tile is one expert's) on the tensor cores
// (WMMA 16x16x16 bf16, f32 accumulation), K in steps of 32 through a 3-stage cp.async ring.
#include <mma.h>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_moe.h"

namespace keel::cuda {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kBM = kMoeGemmRows, kBN = 128, kBK = 32, kStages = 3;
constexpr int kPad = 8;  // bf16 per smem row beyond kBK: rows 80 bytes apart (no bank clash)
constexpr int kLd = kBK + kPad;
constexpr int kThreads = 256;  // 8 warps: 2 (rows) x 4 (columns), 32 x 32 outputs each
constexpr int kCLd = kBN + 4;  // f32 epilogue staging row

struct __align__(128) Smem {
  union {
    struct {
      bf16 a[kStages][kBM][kLd];
      bf16 b[kStages][kBN][kLd];
    } in;
    float c[kBM][kCLd];
  };
};
static_assert(sizeof(Smem) <= 48 * 1024, "static shared memory");

__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__global__ void __launch_bounds__(kThreads)
    moe_grouped_gemm_kernel(const bf16 *__restrict__ A, const bf16 *__restrict__ W, int N, int K,
                            const std::int32_t *__restrict__ group, MoeGroupLayout L,
                            bf16 *__restrict__ C) {
  __shared__ Smem sm;
  const std::int64_t row0 = std::int64_t(blockIdx.y) * kBM;
  const int n0 = blockIdx.x * kBN;
  if (row0 >= group[L.starts() + L.E]) return;
  // The tile's expert: the last whose group starts at or before row0 (groups are padded
  // to kBM rows, so the whole tile is in it; rows past its count are zero inputs).
  int lo = 0, hi = static_cast<int>(L.E) - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (group[L.starts() + mid] <= row0)
      lo = mid;
    else
      hi = mid - 1;
  }
  const bf16 *Wt = W + std::int64_t(lo) * N * K;
  const int tid = threadIdx.x, warp = tid / 32;
  const int wm = warp / 4, wn = warp % 4;  // warp tile: rows wm*32.., columns wn*32..
  // One stage: A 64 x 32 (one 16-byte piece per thread), W 128 x 32 (two).
  auto load = [&](int stage, int k0) {
    {
      const int r = tid / 4, c = (tid % 4) * 8;
      cp_async16(&sm.in.a[stage][r][c], A + (row0 + r) * K + k0 + c);
    }
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int idx = tid + q * kThreads, r = idx / 4, c = (idx % 4) * 8;
      const int n = min(n0 + r, N - 1);  // a partial last tile repeats row N - 1, never stored
      cp_async16(&sm.in.b[stage][r][c], Wt + std::int64_t(n) * K + k0 + c);
    }
  };
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  const int KT = K / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < KT) load(s, s * kBK);
    cp_async_commit();
  }
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<kStages - 2>();  // stage kt has landed (for this thread's copies)
    __syncthreads();               // ... and everyone's; stage kt - 1 is free to refill
    const int next = kt + kStages - 1;
    if (next < KT) load(next % kStages, next * kBK);
    cp_async_commit();
    const int st = kt % kStages;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb[2];
#pragma unroll
      for (int i = 0; i < 2; ++i)
        wmma::load_matrix_sync(fa[i], &sm.in.a[st][wm * 32 + i * 16][kk], kLd);
#pragma unroll
      for (int j = 0; j < 2; ++j)
        wmma::load_matrix_sync(fb[j], &sm.in.b[st][wn * 32 + j * 16][kk], kLd);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the input stages are dead: the epilogue reuses their space
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(&sm.c[wm * 32 + i * 16][wn * 32 + j * 16], acc[i][j], kCLd,
                              wmma::mem_row_major);
  __syncthreads();
  for (int idx = tid; idx < kBM * kBN / 8; idx += kThreads) {
    const int r = idx / (kBN / 8), c = (idx % (kBN / 8)) * 8;
    if (n0 + c >= N) continue;  // N % 8 == 0: a piece is wholly in or out
    uint4 raw;
    __nv_bfloat162 *h2 = reinterpret_cast<__nv_bfloat162 *>(&raw);
#pragma unroll
    for (int e = 0; e < 4; ++e)
      h2[e] = __floats2bfloat162_rn(sm.c[r][c + 2 * e], sm.c[r][c + 2 * e + 1]);
    *reinterpret_cast<uint4 *>(C + (row0 + r) * N + n0 + c) = raw;
  }
}

}  // namespace

bool moe_grouped_gemm_supported(int N, int K) {
  return N > 0 && N % 8 == 0 && K > 0 && K % kBK == 0;
}

void launch_moe_grouped_gemm(StreamRef s_ref, const bf16 *A, const bf16 *W, int N, int K,
                             const std::int32_t *group, const MoeGroupLayout &layout, bf16 *C) {
  const cudaStream_t s = s_ref.get("launch_moe_grouped_gemm");
  if (!moe_grouped_gemm_supported(N, K))
    throw Error(ErrorCode::kInvalidArgument, "launch_moe_grouped_gemm: N % 8 or K % 32 != 0");
  if (layout.E <= 0 || layout.E > kMoeMaxExperts || layout.rows_cap % kBM != 0)
    throw Error(ErrorCode::kInvalidArgument,
                "launch_moe_grouped_gemm: rows_cap must be a multiple of kMoeGemmRows");
  if (layout.rows_cap == 0) return;
  const dim3 grid((N + kBN - 1) / kBN, static_cast<unsigned>(layout.rows_cap / kBM));
  moe_grouped_gemm_kernel<<<grid, kThreads, 0, s>>>(A, W, N, K, group, layout, C);
  KEEL_CUDA_CHECK_LAUNCH("moe_grouped_gemm");
}

}  // namespace keel::cuda
