// Bandwidth-bound GEMV for decode steps with few sequences (see k_gemv.h). At M = 1 a
// GEMM library tile wastes most of its MMA work and, for some shapes, under-fills the
// memory system; here each warp streams one weight row (K bf16) with 16-byte loads,
// kUnroll of them in flight per lane, and reuses each loaded weight for all M inputs
// (read through L1/L2: they are tiny next to the weights).
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_bf16x8.cuh"
#include "exec/cuda/k_gemv.h"

namespace keel::cuda {

namespace {
constexpr int kWarpsPerBlock = 8;
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane

template <int M, bool OutF32>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    gemv_kernel(const bf16 *__restrict__ x, const bf16 *__restrict__ w, void *__restrict__ y,
                std::int64_t N, std::int64_t K) {
  const int lane = threadIdx.x % 32;
  const std::int64_t n = std::int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (n >= N) return;
  const std::int64_t kv = K / 8;  // 16-byte vectors per row
  const uint4 *wr = reinterpret_cast<const uint4 *>(w + n * K);
  const uint4 *xr = reinterpret_cast<const uint4 *>(x);
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  std::int64_t v = lane;
  // Main loop: kUnroll independent weight loads issued before any is used.
  for (; v + (kUnroll - 1) * 32 < kv; v += kUnroll * 32) {
    uint4 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) raw[u] = __ldcs(wr + v + u * 32);  // streamed once
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float wf[8];
      bf16x8_to_float(raw[u], wf);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float xf[8];
        bf16x8_to_float(__ldg(xr + m * kv + v + u * 32), xf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[m] += wf[e] * xf[e];
      }
    }
  }
  for (; v < kv; v += 32) {
    float wf[8];
    bf16x8_to_float(__ldcs(wr + v), wf);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xf[8];
      bf16x8_to_float(__ldg(xr + m * kv + v), xf);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[m] += wf[e] * xf[e];
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
    for (int o = 16; o > 0; o >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      if constexpr (OutF32)
        static_cast<float *>(y)[m * N + n] = acc[m];
      else
        static_cast<bf16 *>(y)[m * N + n] = __float2bfloat16(acc[m]);
    }
  }
}

template <int M>
void launch_m(cudaStream_t s, const bf16 *x, const bf16 *w, void *y, bool y_f32, std::int64_t N,
              std::int64_t K) {
  const unsigned blocks = static_cast<unsigned>((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
  if (y_f32)
    gemv_kernel<M, true><<<blocks, kWarpsPerBlock * 32, 0, s>>>(x, w, y, N, K);
  else
    gemv_kernel<M, false><<<blocks, kWarpsPerBlock * 32, 0, s>>>(x, w, y, N, K);
  KEEL_CUDA_CHECK_LAUNCH("gemv");
}
}  // namespace

bool gemv_supported(std::int64_t M, std::int64_t K, const void *x, const void *w) {
  return M >= 1 && M <= kGemvMaxM && K > 0 && K % 8 == 0 &&
         reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(w) % 16 == 0;
}

void launch_gemv(StreamRef s_ref, const bf16 *x, const bf16 *w, void *y, bool y_f32, std::int64_t M,
                 std::int64_t N, std::int64_t K) {
  const cudaStream_t s = s_ref.get("launch_gemv");
  if (N <= 0) return;
  if (!gemv_supported(M, K, x, w) || N > std::int64_t(0x7fffffff) * kWarpsPerBlock)
    throw Error(ErrorCode::kInvalidArgument,
                "gemv: unsupported shape M=" + std::to_string(M) + " K=" + std::to_string(K));
  switch (M) {
    case 1:
      launch_m<1>(s, x, w, y, y_f32, N, K);
      break;
    case 2:
      launch_m<2>(s, x, w, y, y_f32, N, K);
      break;
    case 3:
      launch_m<3>(s, x, w, y, y_f32, N, K);
      break;
    case 4:
      launch_m<4>(s, x, w, y, y_f32, N, K);
      break;
    case 5:
      launch_m<5>(s, x, w, y, y_f32, N, K);
      break;
    case 6:
      launch_m<6>(s, x, w, y, y_f32, N, K);
      break;
    case 7:
      launch_m<7>(s, x, w, y, y_f32, N, K);
      break;
    default:
      launch_m<8>(s, x, w, y, y_f32, N, K);
      break;
  }
}

}  // namespace keel::cuda
