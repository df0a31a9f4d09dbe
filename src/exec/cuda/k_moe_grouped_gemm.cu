// The experts' grouped GEMM for many tokens (k_moe.h, launch_moe_grouped_gemm): one launch
// over every expert's group of rows, sized by the device-side group starts, so prefill
// needs no host read of the starts and no GEMM per expert. Tiles of 16, 32 or 64 rows (the
// groups' padding, so a tile is one expert's) x 128 output columns on the tensor cores
// (WMMA 16x16x16 bf16, f32 accumulation), K in steps of 32 through a 3-stage cp.async ring.
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_moe.h"
#include "exec/cuda/k_moe_gemm_tile.cuh"

namespace keel::cuda {

namespace {

using namespace moe_gemm;

constexpr int kBK = 32;
constexpr int kPad = 8;  // bf16 per smem row beyond kBK: rows 80 bytes apart (no bank clash)
constexpr int kLd = kBK + kPad;

template <int BM>
struct __align__(128) Smem {
  union {
    struct {
      bf16 a[kStages][BM][kLd];
      bf16 b[kStages][kBN][kLd];
    } in;
    float c[BM][kCLd];
  };
};
static_assert(sizeof(Smem<kMoeGemmRows>) <= 48 * 1024, "static shared memory");

template <int BM>
__global__ void __launch_bounds__(kThreads)
    moe_grouped_gemm_kernel(const bf16 *__restrict__ A, const bf16 *__restrict__ W, int N, int K,
                            const std::int32_t *__restrict__ group, MoeGroupLayout L,
                            bf16 *__restrict__ C) {
  __shared__ Smem<BM> sm;
  const std::int64_t row0 = std::int64_t(blockIdx.y) * BM;
  const int n0 = blockIdx.x * kBN;
  if (row0 >= group[L.starts() + L.E]) return;
  // Rows past the expert's count are zero inputs (launch_moe_gather's padding).
  const bf16 *Wt = W + std::int64_t(tile_expert(group, L, row0)) * N * K;
  const int tid = threadIdx.x, warp = tid / 32;
  // One stage: A BM x 32 (one 16-byte piece per thread of the first BM * 4), W 128 x 32 (two).
  auto load = [&](int stage, int k0) {
    if (tid < BM * 4) {
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
  Acc<BM> acc;
  zero<BM>(acc);
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
    for (int kk = 0; kk < kBK; kk += 16)
      mma_k16<BM>(acc, &sm.in.a[st][0][0], kLd, &sm.in.b[st][0][0], kLd, kk, warp);
  }
  cp_async_wait<0>();
  __syncthreads();  // the input stages are dead: the epilogue reuses their space
  store_tile<BM>(acc, &sm.c[0][0], C, row0, n0, N, warp, tid);
}

}  // namespace

bool moe_gemm_rows_valid(int rows) { return rows == 16 || rows == 32 || rows == 64; }

bool moe_grouped_gemm_supported(int N, int K) {
  return N > 0 && N % 8 == 0 && K > 0 && K % kBK == 0;
}

void launch_moe_grouped_gemm(StreamRef s_ref, const bf16 *A, const bf16 *W, int N, int K,
                             const std::int32_t *group, const MoeGroupLayout &layout, bf16 *C,
                             int tile_rows) {
  const cudaStream_t s = s_ref.get("launch_moe_grouped_gemm");
  if (!moe_grouped_gemm_supported(N, K))
    throw Error(ErrorCode::kInvalidArgument, "launch_moe_grouped_gemm: N % 8 or K % 32 != 0");
  if (layout.E <= 0 || layout.E > kMoeMaxExperts || !moe_gemm_rows_valid(tile_rows) ||
      layout.rows_cap % tile_rows != 0)
    throw Error(ErrorCode::kInvalidArgument,
                "launch_moe_grouped_gemm: rows_cap must be a multiple of the row tile (16/32/64)");
  if (layout.rows_cap == 0) return;
  const dim3 grid((N + kBN - 1) / kBN, static_cast<unsigned>(layout.rows_cap / tile_rows));
  if (tile_rows == 16)
    moe_grouped_gemm_kernel<16><<<grid, kThreads, 0, s>>>(A, W, N, K, group, layout, C);
  else if (tile_rows == 32)
    moe_grouped_gemm_kernel<32><<<grid, kThreads, 0, s>>>(A, W, N, K, group, layout, C);
  else
    moe_grouped_gemm_kernel<64><<<grid, kThreads, 0, s>>>(A, W, N, K, group, layout, C);
  KEEL_CUDA_CHECK_LAUNCH("moe_grouped_gemm");
}

}  // namespace keel::cuda
